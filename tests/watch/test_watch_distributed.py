"""GradWatch under DDP and FSDP2 with real gloo process groups (one process per rank, started by
test_distributed_launch.launch): per-rank records, the rank column, one collective per step,
rank_divergence anomalies, FSDP2 full norms equal to a single-process reference."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_distributed_launch import Counter, launch, stop_forkserver
from torch import nn

from gradviz_widgets.watch import GradWatch

stop = pytest.fixture(scope="module", autouse=True)(stop_forkserver)
STEPS = 3


class TwoHeads(nn.Module):
    """Head a for a positive batch, head b for a negative one (a data-dependent branch)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.a = nn.Linear(4, 2)
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.stem(x))
        return self.a(h) if x.sum() > 0 else self.b(h)


def _batch(rank: int, step: int) -> torch.Tensor:
    x = torch.rand(3, 4, generator=torch.Generator().manual_seed(100 * step + rank)) + 0.1
    return x if rank % 2 == 0 else -x


def _norms(model: nn.Module) -> dict[str, float | None]:
    return {
        n: None if p.grad is None else float(p.grad.double().norm())
        for n, p in model.named_parameters()
    }


def _truth(model: nn.Module, xs: list[torch.Tensor]) -> dict[str, float | None]:
    """Single process: the gradient of the mean of every rank's loss (what DDP averages)."""
    twin = copy.deepcopy(model)
    (sum(twin(x).sum() for x in xs) / len(xs)).backward()
    return _norms(twin)


def _anomalies(watch: object) -> list[list]:
    return [[a.step, a.kind, a.params, a.detail, list(a.ranks)] for a in watch.anomalies]  # type: ignore[attr-defined]


def _watch_ddp(rank: int, world: int, folder: Path) -> dict:
    """DDP(find_unused_parameters=True); world 2 with an optimizer, world 4 without one."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = TwoHeads()
    truth0 = _truth(model, [_batch(r, 0) for r in range(world)])
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1) if world == 2 else None
    watch = GradWatch(ddp, optimizer=opt, path=folder / "run", flush_s=0.05)
    seen = []
    with Counter() as calls:
        for step in range(STEPS):
            if opt is not None:
                opt.zero_grad()
            else:
                ddp.zero_grad(set_to_none=True)
            ddp(_batch(rank, step)).sum().backward()
            seen.append(_norms(model))  # what this rank holds: DDP's average
            if opt is not None:
                opt.step()
        h = watch.history()
        own = {"ranks": sorted(set(h["rank"])), "anomalies": _anomalies(watch)}
        watch.close()
    dist.barrier()  # every rank's file is complete
    out: dict = {"calls": dict(calls), "seen": seen, "truth0": truth0, "own": own}
    out["recorded"] = [
        {r.param: None if r.status == "none" else r.norm for r in h[h.step == s].itertuples()}
        for s in range(STEPS)
    ]
    if rank == 0:
        run = GradWatch.open(folder / "run")
        both = run.history()
        out["merged"] = {
            "ranks": run.ranks,
            "order": both[both.param == "stem.weight"]["rank"].tolist(),
            "anomalies": _anomalies(run),
            "meta": run.meta,
        }
        run.close()
    out["plain"] = _plain_divergence(rank, folder)
    return out


def _plain_divergence(rank: int, folder: Path) -> dict:
    """No DDP: each rank keeps its own gradient, so the norms differ; then rank 1 records one
    step more than rank 0 (its check times out: a warning and a finding, never a hang)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    watch = GradWatch(model, optimizer=opt, path=folder / "plain", flush_s=0.05, rank_timeout_s=2)
    for step in range(1 + (rank == 1)):
        opt.zero_grad()
        model(_batch(rank, step)).sum().backward()
        opt.step()
        if step == 0:
            watch._writer.sync()  # rank 0 must not close before the first step's check
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch.close()
    return {"anomalies": _anomalies(watch), "warnings": [str(w.message) for w in caught]}


class Sharded(nn.Module):
    """Uneven shards (5 rows over 2 ranks, a 1-element bias) and a branch multiplied by 0."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(4, 5)
        self.dead = nn.Linear(4, 5)
        self.head = nn.Linear(5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.l1(x)) + 0.0 * self.dead(x))


def _watch_fsdp(rank: int, world: int, folder: Path) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    xs = [torch.randn(6, 4, generator=torch.Generator().manual_seed(10 + r)) for r in range(world)]
    torch.manual_seed(0)
    model = Sharded()
    twin = copy.deepcopy(model)
    (sum(twin(x).square().mean() for x in xs) / world).backward()
    truth = _norms(twin)
    mesh = init_device_mesh("cpu", (world,))
    for child in model.children():
        fully_shard(child, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=folder / "fsdp", flush_s=0.05)
    with Counter() as calls:
        for _ in range(2):
            opt.zero_grad()
            model(xs[rank]).square().mean().backward()
            opt.step()
        h = watch.history()
        watch.close()
    step0 = h[h.step == 0]
    local = GradWatch(model, optimizer=opt, path=folder / "shard", ranks=False)  # no check
    with Counter() as quiet:
        opt.zero_grad()
        model(xs[rank]).square().mean().backward()
        opt.step()
        shard = local.history()
        local.close()
    own = {n: float(p.grad.to_local().double().norm()) for n, p in model.named_parameters()}
    return {
        "shard": [quiet.get("all_reduce", 0), dict(zip(shard.param.astype(str), shard.norm)), own],
        "truth": truth,
        "all_reduce": calls.get("all_reduce", 0),
        "norms": dict(zip(step0.param.astype(str), step0.norm)),
        "status": dict(zip(step0.param.astype(str), step0.status.astype(str))),
        "zero_fraction": dict(zip(step0.param.astype(str), step0.zero_fraction)),
        "anomaly_kinds": sorted({a.kind for a in watch.anomalies}),
        "local_rows": {n: list(p.to_local().shape) for n, p in model.named_parameters()},
    }


def _two_runs(rank: int, world: int, folder: Path) -> dict:
    """Two successive runs into one path (2 steps, then 1): one folder each, both ranks each."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids, warned = [], []
    for steps in (2, 1):
        torch.manual_seed(0)
        ddp = DDP(nn.Linear(4, 2))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            watch = GradWatch(ddp, optimizer=opt, path=folder / "again", flush_s=0.05)
        warned += [str(w.message) for w in caught if "already holds" in str(w.message)]
        for step in range(steps):
            opt.zero_grad()
            ddp(_batch(rank, step)).sum().backward()
            opt.step()
        watch.close()
        ids.append([watch.run_id, watch.rank_path.relative_to(folder).as_posix()])
    dist.barrier()
    out: dict = {"ids": ids, "warned": warned}
    if rank == 0:
        run = GradWatch.open(folder / "again")
        first = GradWatch.open(folder / "again", run=run.runs[0].id)
        out["latest"] = [run.run_id, run.ranks, sorted(set(run.history().step))]
        out["first"] = [first.run_id, first.ranks, sorted(set(first.history().step))]
        out["runs"] = [[r.id, list(r.ranks), r.steps] for r in run.runs]
        run.close()
        first.close()
    return out


def _join_uneven(rank: int, world: int, folder: Path) -> dict:
    """DDP's Join over 2 epochs, rank 0 with 4 batches an epoch, rank 1 with 2: the rank that
    joins early takes no optimizer step while it waits, so from epoch 2 its step k is rank
    0's step k + 2 (an outside tester's false 'differs more than the all-reduce explains')."""
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    ddp = DDP(nn.Linear(4, 2))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watch = GradWatch(ddp, optimizer=opt, path=folder / "join", flush_s=0.05)
        for epoch in range(2):
            with Join([ddp]):
                for step in range(4 if rank == 0 else 2):
                    opt.zero_grad()
                    ddp(_batch(rank, 10 * epoch + step)).sum().backward()
                    opt.step()
        watch.close()
    return {"anomalies": _anomalies(watch)}


def _ddp_and_fsdp(rank: int, world: int, folder: Path) -> dict:
    return {
        "ddp": _watch_ddp(rank, world, folder),
        "fsdp": _watch_fsdp(rank, world, folder),
        "runs": _two_runs(rank, world, folder),
        "join": _join_uneven(rank, world, folder),
    }


SCENARIOS = {"ddp": _watch_ddp, "ddp+fsdp": _ddp_and_fsdp}


@pytest.fixture(scope="module")
def world2(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Both scenarios in one launch of 2 ranks (starting processes costs seconds of imports)."""
    return launch(__name__, "ddp+fsdp", 2, tmp_path_factory.mktemp("watch2"))


def _check_norms(res: dict) -> None:
    for step in range(STEPS):
        for name, norm in res["seen"][step].items():
            got = res["recorded"][step][name]
            assert (got is None) == (norm is None), (step, name)
            assert got is None or got == pytest.approx(norm, rel=1e-6), (step, name)
    for name, norm in res["truth0"].items():
        assert res["recorded"][0][name] == pytest.approx(norm, rel=1e-5), name


def _divergence(anomalies: list[list]) -> dict[str, list]:
    return {p: a for a in anomalies if a[1] == "rank_divergence" for p in a[2]}


def test_ddp_world2_records_every_rank(world2: list[dict]) -> None:
    results = [r["ddp"] for r in world2]
    for res in results:
        _check_norms(res)
        assert res["calls"] == {"all_reduce": STEPS}, "one collective per step, no other"
        found = _divergence(res["own"]["anomalies"])
        assert found.keys() == {"a.weight", "a.bias", "b.weight", "b.bias"}
        assert "a.weight: a gradient of its own on rank 0, none on rank 1" in found["a.weight"][3]
        assert "b.weight: a gradient of its own on rank 1, none on rank 0" in found["b.weight"][3]
        assert found["a.weight"][0] == 0
    merged = results[0]["merged"]
    assert merged["ranks"] == [0, 1] and merged["order"] == [0, 1] * STEPS
    assert merged["meta"]["world"] == "2" and merged["meta"]["mode"] == "ddp"
    div = _divergence(merged["anomalies"])
    assert div["a.weight"][4] == [0, 1]  # both ranks recorded it (each one's own file)


def test_norms_that_differ_and_a_rank_that_stops(world2: list[dict]) -> None:
    plain = [r["ddp"]["plain"] for r in world2]
    for res in plain:
        found = _divergence(res["anomalies"])
        assert "differs across ranks more than the all-reduce explains" in found["weight"][3]
    stopped = [a for a in plain[1]["anomalies"] if a[1] == "rank_divergence" and not a[2]]
    assert stopped and "cross-rank check stopped at step 1" in stopped[0][3]
    assert any("cross-rank check stopped" in w for w in plain[1]["warnings"])


def test_fsdp2_full_norms_world2(world2: list[dict]) -> None:
    results = [r["fsdp"] for r in world2]
    assert results[0]["local_rows"]["l1.weight"] == [3, 4]
    assert results[1]["local_rows"]["head.bias"] == [0]  # an empty shard counts as well
    for res in results:
        assert res["all_reduce"] == 2, "one all_reduce per step (FSDP2's own are others)"
        for name, truth in res["truth"].items():
            assert res["norms"][name] == pytest.approx(truth, rel=1e-5, abs=1e-12), name
        assert res["status"]["dead.weight"] == "zero" and res["zero_fraction"]["dead.weight"] == 1
        assert res["status"]["l1.weight"] == "healthy"
        assert "rank_divergence" not in res["anomaly_kinds"]
        calls, shard, own = res["shard"]  # ranks=False: this rank's shard, no collective
        assert calls == 0 and shard == pytest.approx(own, rel=1e-6)
    assert results[0]["norms"] == results[1]["norms"]


def test_two_runs_into_one_path_stay_apart(world2: list[dict]) -> None:
    """Each run's ranks share one run id (rank 0's, broadcast at construction), in one folder."""
    zero, one = world2[0]["runs"], world2[1]["runs"]
    assert [i[0] for i in zero["ids"]] == [i[0] for i in one["ids"]]
    (a, _), (b, _) = zero["ids"]
    assert (
        a != b
        and zero["ids"][1][1] == f"again/{b}/rank0"
        and one["ids"][1][1] == f"again/{b}/rank1"
    )
    assert len(zero["warned"]) == 1 and not one["warned"]  # said once, by rank 0, at the rerun
    assert zero["runs"] == [[a, [0, 1], 2], [b, [0, 1], 1]]
    assert zero["latest"] == [b, [0, 1], [0]] and zero["first"] == [a, [0, 1], [0, 1]]


def test_ddp_world4_without_optimizer(tmp_path: Path) -> None:
    """World 4, one step per backward: read after DDP's averaging (post-accumulate hooks)."""
    results = launch(__name__, "ddp", 4, tmp_path)
    for res in results:
        _check_norms(res)
        assert res["calls"] == {"all_reduce": STEPS}
        found = _divergence(res["own"]["anomalies"])
        assert "a gradient of its own on ranks 0, 2, none on ranks 1, 3" in found["a.weight"][3]
    merged = results[0]["merged"]
    assert merged["ranks"] == [0, 1, 2, 3] and merged["order"] == [0, 1, 2, 3] * STEPS


def test_ranks_out_of_step_under_join_say_so(world2: list[dict]) -> None:
    """Every parameter differs at once after steps that agreed: the anomaly says the ranks
    may be at different iterations (or stepped under no_sync), not just 'differs'."""
    for res in world2:
        found = [a for a in res["join"]["anomalies"] if a[1] == "rank_divergence" and a[2]]
        assert found and found[0][0] == 2, found
        assert "different iterations under the same step number" in found[0][3]
        assert "joined early under DDP's Join" in found[0][3]
