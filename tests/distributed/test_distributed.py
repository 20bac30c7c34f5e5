"""GradExplorer under DDP and FSDP2 with real gloo process groups (one process per rank,
started by test_distributed_launch.launch; each rank's result comes back as a dict)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_distributed_launch import Counter, launch, stop_forkserver
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.distributed.ddp import gather_ranks, unwrap
from gradviz_widgets.distributed.fsdp import (
    fsdp_gradients,
    fsdp_param_norms,
    fsdp_param_stats,
    total_norm,
)

stop = pytest.fixture(scope="module", autouse=True)(stop_forkserver)


class Branchy(nn.Module):
    """Branch a or b by the sign of the batch; c's output detached when x[0, 0] < -100."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.a = nn.Linear(4, 2)
        self.b = nn.Linear(4, 2)
        self.c = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.stem(x))
        out = self.a(h) if x.sum() > 0 else self.b(h)
        extra = self.c(h)
        return out + (extra.detach() if x[0, 0] < -100 else extra)


def _batch(rank: int) -> torch.Tensor:
    x = torch.rand(3, 4, generator=torch.Generator().manual_seed(rank)) + 0.1
    x = x if rank % 2 == 0 else -x
    if rank == 3:
        x[0, 0] = -1000.0
    return x


def _local_truth(module: nn.Module, x: torch.Tensor) -> dict[str, float | None]:
    twin = copy.deepcopy(module)
    twin(x).sum().backward()
    return {
        n: None if p.grad is None else float(p.grad.double().norm())
        for n, p in twin.named_parameters()
    }


def _ddp_rank(rank: int, world: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    ddp = DDP(Branchy(), find_unused_parameters=True)
    torch.manual_seed(0)
    twin = DDP(Branchy(), find_unused_parameters=True)  # trained without exploring
    reducer = ddp.reducer
    x = _batch(rank)
    inner, kind = unwrap(ddp)
    with Counter() as calls:
        if rank == 0:  # extra runs on one rank only: any collective in them would deadlock
            GradExplorer(inner, x).run()
            GradExplorer(inner, x).run()
        ex = GradExplorer(inner, x)
        report = ex.run()
        explore_calls = dict(calls)
        summary = gather_ranks(report, ddp=ddp)
    result = {
        "kind": kind,
        "explore_calls": explore_calls,
        "calls": dict(calls),
        "norms": report.param_norms,
        "truth": _local_truth(inner, x),
        "table": {str(r): {n: list(p) for n, p in t.items()} for r, t in summary.table.items()},
        "findings": list(summary.findings),
        "node_ids": [n.id for n in ex.graph.nodes],
        "grads_after_explore": [p.grad is not None for p in ddp.parameters()],
        "same_reducer": ddp.reducer is reducer,
        "sync": ddp.require_backward_grad_sync,
    }
    if world == 4:  # a subgroup: ranks 1 and 3 compare themselves (new_group: every rank calls)
        sub = dist.new_group([1, 3])
        if rank in (1, 3):
            result["sub_ranks"] = sorted(gather_ranks(report, group=sub).table)
    for _ in range(2):  # the user's training continues as if nothing had happened
        for model in (ddp, twin):
            model(x).sum().backward()
    result["train_equal"] = all(
        (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)
        for p, q in zip(ddp.parameters(), twin.parameters())
    )
    wrapped = GradExplorer(ddp, x)  # the DDP model itself, as users pass it (every rank runs)
    direct = wrapped.run()
    result["integrated"] = {
        "ranks": {
            str(r): {n: list(p) for n, p in t.items()}
            for r, t in (getattr(direct, "ranks", None) or {}).items()
        },
        "findings": list(direct.findings),
        "node_ids": [n.id for n in wrapped.graph.nodes],
    }
    return result


class _Sharded(nn.Module):
    """Uneven shard sizes (5 rows, 3 rows, 1-element bias) and a branch multiplied by 0."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(4, 5)
        self.l2 = nn.Linear(5, 3)
        self.dead = nn.Linear(4, 3)
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.l2(torch.relu(self.l1(x))) + 0.0 * self.dead(x))


def _fsdp_rank(rank: int, world: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    xs = [torch.randn(6, 4, generator=torch.Generator().manual_seed(10 + r)) for r in range(world)]
    torch.manual_seed(0)
    model = _Sharded()
    truth_model = copy.deepcopy(model)  # single process: the mean of every rank's loss
    (sum(truth_model(x).square().mean() for x in xs) / world).backward()
    truth = {n: float(p.grad.double().norm()) for n, p in truth_model.named_parameters()}
    mesh = init_device_mesh("cpu", (world,))
    for child in model.children():
        fully_shard(child, mesh=mesh)
    fully_shard(model, mesh=mesh)
    loss_fn = lambda out, _target: out.square().mean()  # noqa: E731
    model(xs[rank]).square().mean().backward()  # the user's own gradients, kept as they are
    users = {n: p.grad.to_local().clone() for n, p in model.named_parameters()}
    grads = fsdp_gradients(model, xs[rank], loss_fn=loss_fn, target=0)
    kept = all(torch.equal(p.grad.to_local(), users[n]) for n, p in model.named_parameters())
    model.zero_grad(set_to_none=True)  # the user's next step is as if fsdp_gradients never ran
    model(xs[rank]).square().mean().backward()
    kept = kept and all(
        torch.equal(p.grad.to_local(), users[n]) for n, p in model.named_parameters()
    )
    model.set_requires_gradient_sync(False)  # gradient accumulation: refused, nothing mixed in
    try:
        fsdp_gradients(model, xs[rank], loss_fn=loss_fn, target=0)
        refused = False
    except GradExplorerError:
        refused = True
    model.set_requires_gradient_sync(True)
    with Counter() as calls:
        norms = fsdp_param_norms(grads)
    stats = fsdp_param_stats(grads)
    clip_total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    return {
        "truth": truth,
        "norms": norms,
        "calls": dict(calls),
        "kept_user_grads": kept,
        "refused_without_sync": refused,
        "total": total_norm(norms),
        "clip_total": float(clip_total.full_tensor()),
        "stats": {n: [s.status, s.zero_fraction] for n, s in stats.items()},
        "local_rows": {n: list(g.to_local().shape) for n, g in grads.items()},
    }


def _ddp_and_fsdp(rank: int, world: int, folder: Path) -> dict:
    return {"ddp": _ddp_rank(rank, world), "fsdp": _fsdp_rank(rank, world)}


def _lonely_gather(rank: int, world: int, folder: Path) -> dict:
    """Rank 0 gathers its report over a group with a 2 s timeout; rank 1 never comes (an
    outside tester's ex.run() on rank 0 only: a raw gloo timeout after the group's timeout)."""
    import datetime

    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=2))
    said = ""
    if rank == 0:
        report = GradExplorer(nn.Linear(4, 2), torch.randn(3, 4)).run()
        try:
            gather_ranks(report, group=group)
        except GradExplorerError as e:
            said = str(e)
    dist.barrier()
    return {"said": said}


def _other_sizes(rank: int, world: int, folder: Path) -> dict:
    """Ranks that explored models of other parameter counts gather: their tables had other
    sizes, and gloo aborted rank 0 ("84 vs 60"; an outside try-out)."""
    model = nn.Linear(4, 2) if rank == 0 else nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    report = GradExplorer(model, torch.randn(3, 4)).run()
    try:
        gather_ranks(report)
        said = ""
    except GradExplorerError as e:
        said = str(e)
    dist.barrier()
    return {"said": said}


SCENARIOS = {
    "sizes": _other_sizes,
    "ddp": lambda r, w, _f: {"ddp": _ddp_rank(r, w)},
    "ddp+fsdp": _ddp_and_fsdp,
    "lonely": _lonely_gather,
}


# ---- the tests --------------------------------------------------------------------------------
def _check_ddp(results: list[dict]) -> None:
    for r, res in enumerate(results):
        assert res["kind"] == "DistributedDataParallel"
        assert res["explore_calls"] == {}, "an explorer run issued a collective"
        # gather_ranks: a header of one size on every rank, then the table
        assert res["calls"] == {"all_gather": 2}, "gather_ranks: exactly two small collectives"
        assert res["norms"].keys() == res["truth"].keys()
        for name, truth in res["truth"].items():
            norm = res["norms"][name]
            assert (norm is None) == (truth is None), (r, name)
            assert norm is None or norm == pytest.approx(truth, rel=1e-6), (r, name)
        assert not any(i.startswith(("module.", "module:module")) for i in res["node_ids"])
        assert "param:a.weight" in res["node_ids"] or "param:b.weight" in res["node_ids"]
        assert res["grads_after_explore"] == [False] * 8, "exploring touched .grad"
        assert res["same_reducer"] and res["sync"] and res["train_equal"]
        assert res["table"] == results[0]["table"] and res["findings"] == results[0]["findings"]


@pytest.fixture(scope="module")
def world2(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Both scenarios in one launch of 2 ranks (starting a process costs seconds of imports)."""
    return launch(__name__, "ddp+fsdp", 2, tmp_path_factory.mktemp("world2"))


def test_ddp_world2_names_parameters_per_rank(world2: list[dict]) -> None:
    results = [r["ddp"] for r in world2]
    _check_ddp(results)
    table, findings = results[0]["table"], results[0]["findings"]
    assert table["0"]["b.weight"][:2] == ["none", "never called"]
    assert table["1"]["a.weight"][:2] == ["none", "never called"]
    assert table["1"]["b.weight"][0] == "healthy"
    assert findings[0].startswith("a.weight, a.bias get no gradient on rank 1 (never called")
    assert findings[1].startswith("b.weight, b.bias get no gradient on rank 0 (never called")
    assert "find_unused_parameters=True: it handles this" in findings[2]


def test_explorer_on_ddp_model_gathers_ranks(world2: list[dict]) -> None:
    """GradExplorer(ddp_model).run() on every rank: the user's module, report.ranks filled."""
    results = [r["ddp"] for r in world2]
    if not results[0]["integrated"]["ranks"]:
        pytest.skip("explorer.run does not call distributed.gather_ranks yet (integration)")
    for res in results:
        assert res["integrated"]["ranks"] == results[0]["table"]
        assert res["integrated"]["findings"][:2] == results[0]["findings"][:2]
        assert not any(i.startswith("module.") for i in res["integrated"]["node_ids"])


def test_ddp_world4_detached_on_one_rank(tmp_path: Path) -> None:
    results = [r["ddp"] for r in launch(__name__, "ddp", 4, tmp_path)]
    _check_ddp(results)
    table, findings = results[0]["table"], results[0]["findings"]
    assert [table[str(r)]["c.weight"][:2] for r in range(4)] == [
        ["healthy", None],
        ["healthy", None],
        ["healthy", None],
        ["none", "detached"],
    ]
    assert "a.weight, a.bias get no gradient on ranks 1, 3 (never called" in findings[0]
    assert "c.weight, c.bias get no gradient on rank 3 (detached" in " ".join(findings)
    assert "a gradient on ranks 0, 1, 2" in " ".join(findings)
    assert results[1]["sub_ranks"] == results[3]["sub_ranks"] == [1, 3]


def test_fsdp2_norms_from_shards_world2(world2: list[dict]) -> None:
    results = [r["fsdp"] for r in world2]
    assert results[0]["local_rows"]["l1.weight"] == [3, 4]
    assert results[1]["local_rows"]["head.bias"] == [0]  # an empty shard counts as well
    for res in results:
        assert res["calls"] == {"all_reduce": 1}, "one all_reduce, no all_gather of gradients"
        assert res["kept_user_grads"] and res["refused_without_sync"]
        for name, truth in res["truth"].items():
            assert res["norms"][name] == pytest.approx(truth, rel=1e-5, abs=1e-12), name
        assert res["total"] == pytest.approx(res["clip_total"], rel=1e-5)
        assert res["stats"]["dead.weight"] == ["zero", 1.0]
        assert res["stats"]["l1.weight"][0] == "healthy"
    assert results[0]["norms"] == results[1]["norms"]


def test_a_rank_gathering_alone_is_told_what_to_do(tmp_path: Path) -> None:
    said = launch(__name__, "lonely", 2, tmp_path)[0]["said"]
    assert "run it on every rank (ex.run() of a DDP model, or gather_ranks)" in said
    assert "ex.run(ranks=False)" in said


def test_ranks_with_other_parameter_counts_raise_on_every_rank(tmp_path: Path) -> None:
    for r in launch(__name__, "sizes", 2, tmp_path):  # both exit 0: no abort (launch checks)
        assert "explored a model with other parameters (names or count)" in r["said"], r
