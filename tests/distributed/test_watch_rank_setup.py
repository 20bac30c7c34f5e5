"""GradWatch's setup across ranks (2 gloo ranks, one launch): a watch created on some ranks only
never moves the ranks' group bookkeeping apart (the user's own `new_group` + `all_reduce`
afterwards works, and so does a later watch on every rank), and a rank whose `path` is not rank
0's says so."""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_distributed_launch import launch, stop_forkserver
from torch import nn

from gradviz_widgets import GradWatch

stop = pytest.fixture(scope="module", autouse=True)(stop_forkserver)

TIMEOUT_S = 2.0


def _watch(rank: int, path: Path) -> tuple[GradWatch, list[str], str]:
    """A watch recording two steps of a small model; the warnings its creation gave; its
    cross-rank check."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch = GradWatch(model, optimizer=opt, path=path, flush_s=0.05, rank_timeout_s=TIMEOUT_S)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(3, 4) + rank).square().mean().backward()
        opt.step()
    check = watch._ranks.meta()["check"]
    watch.close()
    return watch, [str(w.message) for w in caught], check


def _user_group(rank: int) -> float | str:
    """What the user's own later group does: its all_reduce's result, or the error."""
    t = torch.ones(1) * (rank + 1)
    try:
        pg = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=10))
        dist.all_reduce(t, group=pg)
        return t.item()
    except Exception as e:  # the failure is the finding: the test says what it was
        return f"{type(e).__name__}: {str(e)[:200]}"


def _setup(rank: int, world: int, folder: Path) -> dict:
    out: dict = {}
    watch, out["paths_warned"], _ = _watch(rank, folder / f"runs_r{rank}")
    out["paths_run"] = watch.run_id
    dist.barrier()
    for alone in (0, 1):  # a watch on one rank only, then the user's group on both
        if rank == alone:
            watch, out[f"alone{alone}_warned"], _ = _watch(rank, folder / "alone")
            out[f"alone{alone}_steps"] = sorted(int(s) for s in watch.history().step.unique())
        dist.barrier()
        out[f"user_group_after_alone{alone}"] = _user_group(rank)
    watch, _, out["every_check"] = _watch(rank, folder / "every")  # every rank: check on
    out["every_run"] = watch.run_id
    return out


def _stages(rank: int, world: int, folder: Path) -> dict:
    """Pipeline-like stages: each rank watches its own model, of another parameter count (and
    one of the same count with other shapes): their per-step vectors had other sizes, and gloo
    aborted rank 0 ("Received data size doesn't match"; an outside try-out)."""
    out: dict = {}
    for case, model in (
        (
            "count",
            nn.Linear(4, 2) if rank == 0 else nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)),
        ),
        ("shapes", nn.Linear(4, 2) if rank == 0 else nn.Linear(4, 3)),
    ):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            watch = GradWatch(model, optimizer=opt, path=folder / case, flush_s=0.05)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(3, 4)).square().mean().backward()
            opt.step()
        history = watch.history()
        out[case] = {
            "warned": [str(w.message) for w in caught],
            "check": watch._ranks.meta()["check"],
            "steps": sorted(int(s) for s in history.step.unique()),
            "anomalies": [a.kind for a in watch.anomalies],
        }
        watch.close()
        dist.barrier()
    if rank == 0:  # the page of the record: rank 1's rows had read rank 0's names
        from gradviz_widgets.watch.page import page_data

        run = GradWatch.open(folder / "count")
        page = page_data(run)
        out["page"] = {"name": page["name"], "views": [v["label"] for v in page["views"]]}
        out["page"]["names"] = page["names"]
        run.close()
    return out


SCENARIOS = {"setup": _setup, "stages": _stages}


def test_ranks_that_watch_other_models_record_their_own_without_a_check(tmp_path: Path) -> None:
    ranks = launch(__name__, "stages", 2, tmp_path)  # both ranks exit 0 (launch checks)
    page = ranks[0]["page"]
    assert page["names"] == ["weight", "bias"] and page["views"] == ["rank 0"], page
    assert "rank 1 watched other parameters: not drawn here" in page["name"], page
    for r in ranks:
        for case in ("count", "shapes"):
            got = r[case]
            assert got["check"] == "off" and got["steps"] == [0, 1, 2], got
            assert any("the ranks watch different parameters" in w for w in got["warned"]), got
            assert "rank_divergence" not in got["anomalies"], got  # no false divergence


def test_watch_on_some_ranks_and_different_paths(tmp_path: Path) -> None:
    r0, r1 = launch(__name__, "setup", 2, tmp_path)
    # different paths: one run id, and the rank whose path is not rank 0's warns
    assert r0["paths_run"] == r1["paths_run"]
    assert any("rank 0 into" in w and "runs_r0" in w for w in r1["paths_warned"]), r1
    assert not any("rank 0 into" in w for w in r0["paths_warned"]), r0
    for alone, r in ((0, r0), (1, r1)):
        assert any("1 of 2 ranks created a GradWatch" in w for w in r[f"alone{alone}_warned"])
        assert r[f"alone{alone}_steps"] == [0, 1]
        # the ranks' group counters stayed in step: the user's own group works on both
        assert r0[f"user_group_after_alone{alone}"] == 3.0, r0
        assert r1[f"user_group_after_alone{alone}"] == 3.0, r1
    assert r0["every_run"] == r1["every_run"]
    assert r0["every_check"] == r1["every_check"] == "one all_reduce per step"
    assert max(r0["seconds"], r1["seconds"]) < 60
