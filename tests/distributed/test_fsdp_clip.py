"""GradWatch under FSDP2 with `clip_grad_norm_` before `opt.step()` (2 gloo ranks, one launch by
test_distributed_launch.launch): the record keeps the full gradient's norm from before clipping,
with clipped=True, as in one process; a run without clipping records clipped=False."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_distributed_launch import Counter, launch, stop_forkserver
from torch import nn

from gradviz_widgets.watch import GradWatch

stop = pytest.fixture(scope="module", autouse=True)(stop_forkserver)
STEPS = 3


def _train(rank: int, world: int, folder: Path, max_norm: float | None) -> dict:
    """STEPS steps of an FSDP2 model (uneven shards: 6 and 3 rows on 2 ranks); per step the
    full gradients' norms before any clipping, and what the watch recorded."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3))
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    name = "clip" if max_norm else "plain"
    watch = GradWatch(model, optimizer=opt, path=folder / name, flush_s=0.05)
    full, applied = [], []
    gen = torch.Generator().manual_seed(100 + rank)
    with Counter() as calls, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(STEPS):
            opt.zero_grad()
            x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 3, generator=gen)
            nn.functional.mse_loss(model(x), y).backward()
            full.append({n: float(p.grad.full_tensor().double().norm()) for n, p in _named(model)})
            if max_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            applied.append({n: float(p.grad.full_tensor().norm()) for n, p in _named(model)})
            opt.step()
        h = watch.history()
        watch.close()
    recorded = [dict(zip(s.param.astype(str), s.norm)) for _, s in h.groupby("step")]
    clipped = [[None if pd.isna(v) else bool(v) for v in s.clipped] for _, s in h.groupby("step")]
    return {
        "full": full,
        "applied": applied,
        "recorded": recorded,
        "clipped": clipped,
        "all_reduce": calls.get("all_reduce", 0),
        "warnings": [str(w.message) for w in caught if "GradWatch" in str(w.message)],
    }


def _named(model: nn.Module) -> list:
    return list(model.named_parameters())


def _both(rank: int, world: int, folder: Path) -> dict:
    return {
        "clip": _train(rank, world, folder, max_norm=0.01),
        "plain": _train(rank, world, folder, max_norm=None),
    }


SCENARIOS = {"fsdp clip": _both}


@pytest.fixture(scope="module")
def world2(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return launch(__name__, "fsdp clip", 2, tmp_path_factory.mktemp("fsdp_clip"))


def _check_norms(res: dict) -> None:
    assert len(res["recorded"]) == STEPS
    for step in range(STEPS):
        assert res["recorded"][step].keys() == res["full"][step].keys()
        for name, norm in res["full"][step].items():
            assert res["recorded"][step][name] == pytest.approx(norm, rel=1e-5), (step, name)


def test_fsdp2_clipping_keeps_pre_clip_full_norms(world2: list[dict]) -> None:
    for res in (r["clip"] for r in world2):
        _check_norms(res)
        for step in range(STEPS):  # clipping did change what the optimizer applied
            pre, post = res["full"][step], res["applied"][step]
            assert all(post[n] < 0.5 * pre[n] for n in pre), step
        assert res["clipped"] == [[True] * 4] * STEPS
        assert res["all_reduce"] == STEPS, "one all_reduce per step, as without clipping"
        assert not res["warnings"]
    assert world2[0]["clip"]["recorded"] == world2[1]["clip"]["recorded"]


def test_fsdp2_without_clipping_unchanged(world2: list[dict]) -> None:
    for res in (r["plain"] for r in world2):
        _check_norms(res)
        assert res["clipped"] == [[False] * 4] * STEPS
        assert res["all_reduce"] == STEPS
        assert not res["warnings"]
