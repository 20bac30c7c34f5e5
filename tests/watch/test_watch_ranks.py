"""Per-rank records read together, without a process group: the rank column, a run of several
rank folders, merged anomalies, the view's rank menu, the check's decisions on sums."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.anomalies import Anomaly
from gradviz_widgets.watch.ranks import KIND, Exchange, RankSetup


def _record(path: Path, scale: float, steps: int = 3) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with GradWatch(model, optimizer=opt, path=path) as watch:
        for _ in range(steps):
            opt.zero_grad()
            (scale * model(torch.ones(4, 3)).sum()).backward()
            opt.step()
        h = watch.history()
    assert watch.rank == 0 and watch.world == 1 and watch.rank_path == path / watch.run_id
    assert h.columns[:3].tolist() == ["step", "rank", "param"] and set(h["rank"]) == {0}
    return watch.rank_path


def test_one_process_has_rank_zero(tmp_path: Path) -> None:
    _record(tmp_path, 1.0)
    run = GradWatch.open(tmp_path)
    assert run.ranks == [0] and set(run.history()["rank"]) == {0}
    run.close()


def test_rank_folders_read_side_by_side(tmp_path: Path) -> None:
    # one run's rank folders, as under torchrun: path/<run id>/rank<r>/
    run_path = tmp_path / "run-20261201-000000-0000"
    run_path.mkdir()
    _record(tmp_path / "src", 1.0).rename(run_path / "rank0")
    _record(tmp_path / "src", 1e-9).rename(run_path / "rank1")  # rank 1 vanishes: its file only
    shutil.rmtree(tmp_path / "src")
    run = GradWatch.open(tmp_path)
    h = run.history()
    assert run.ranks == [0, 1] and len(h) == 2 * 3 * 4
    first = h[h.param == "0.weight"]
    assert first["rank"].tolist() == [0, 1] * 3 and first["step"].tolist() == [0, 0, 1, 1, 2, 2]
    wide = h.pivot_table("norm", ["step", "param"], "rank", observed=True)
    assert np.allclose(wide[1] / wide[0], 1e-9)
    assert [(a.kind, a.ranks) for a in run.anomalies] == [("vanishing", (1,))]
    assert "on rank 1" in repr(run.anomalies[0])
    assert len(run.history(ranks=[1])) == 12
    pytest.importorskip("plotly")
    view = run.show()
    assert view.rank_menu.options == (("rank 0", 0), ("rank 1", 1))
    top = max(max(v for v in t["z"].ravel() if v == v) for t in [view.figures()[0]["data"][0]])
    view.rank_menu.value = 1
    low = max(v for v in view.figures()[0]["data"][0]["z"].ravel() if v == v)
    assert low == pytest.approx(top - 9, abs=1e-6) and "rank 1" in view.status.value
    run.close()


def test_divergence_from_the_sums() -> None:
    """Rank 0's side of a world of 3, with the all_reduce replaced by the sums it would give."""
    ex = Exchange(RankSetup(0, 3, "ddp", group=object()))
    norms = {0: [2.0, 1.0], 1: [2.0, 1.5], 2: [2.0, 1.0]}  # param 1 differs on rank 1
    own = {0: [True, True], 1: [False, True], 2: [True, True]}  # param 0: none on rank 1
    total = np.zeros(11)
    for r in range(3):
        n = np.array(norms[r])
        total[:2] += np.array(own[r]) * 2.0**r
        total[2:4] += n
        total[4:6] += n * n
        total[6:8] += 1
    total[8] = 2 * 3  # the parameter counts, then the step and its square (every rank's)

    def reduced(step: int, vec: np.ndarray) -> np.ndarray:
        return np.concatenate([total[:9], [3 * step, 3 * step * step]])

    ex._all_reduce = reduced  # type: ignore[method-assign]
    local = (np.array(own[0]), None)
    rows = ex.combine(5, np.array([0, 1]), np.array([[2.0, 1, 1], [1.0, 1, 1]]), local, ["w", "v"])
    a = Anomaly.from_row(rows[0])
    assert (a.step, a.kind, a.params) == (5, KIND, ["w", "v"])
    assert "w: a gradient of its own on ranks 0, 2, none on rank 1" in a.detail
    assert "v: ‖g‖ differs across ranks" in a.detail and "rank 0: 1)" in a.detail
    assert ex.combine(6, np.array([0, 1]), np.ones((2, 3)), local, ["w", "v"]) == []  # once


def test_ranks_at_different_step_numbers_stop_the_check() -> None:
    """The per-step sums carry the step and its square: equal to world x each only when every
    rank is at this step."""
    ex = Exchange(RankSetup(0, 2, "ddp", group=object()))
    n = 3
    ex._check_aligned(4, n, np.array([n * 2, 4 + 4, 16 + 16], dtype=float))
    assert ex.failed is None
    ex._check_aligned(4, n, np.array([n * 2, 4 + 6, 16 + 36], dtype=float))
    assert ex.failed is not None and "the ranks are at different steps" in ex.failed
