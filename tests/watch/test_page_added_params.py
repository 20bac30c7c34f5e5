"""A parameter added mid-run has no record before it existed: the offline page's cells there
are "no record" (empty), never a status, whether the page is exported from the live watch or
from the run read back from disk, and both exports carry the same cells."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from gradviz_widgets.vocabulary import STATUSES
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.history import EMPTY
from gradviz_widgets.watch.page import page_data

ADDED_AT = 5
STEPS = 10


class _Grows(nn.Module):
    """A linear layer, and a second one added at step ADDED_AT."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.extra: nn.Linear | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + (self.extra(x) if self.extra is not None else 0)


def _run(path: Path, split: bool) -> GradWatch:
    """Ten steps; `split`: the record is flushed before the addition (two chunks, the first
    narrower than the params table), else the steps around it share one chunk."""
    torch.manual_seed(0)
    model = _Grows()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning):  # "1 parameter(s) were added at step 5 ..."
        watch = GradWatch(model, optimizer=opt, path=path, spikes=False, flush_s=60.0)
        for k in range(STEPS):
            if k == ADDED_AT:
                if split:
                    watch.history()  # waits for the queue: the steps so far are flushed
                model.extra = nn.Linear(4, 4)
                opt.add_param_group({"params": list(model.extra.parameters())})
            opt.zero_grad()
            model(torch.randn(3, 4)).pow(2).mean().backward()
            opt.step()
        watch.history()
    return watch


def _status(data: dict[str, Any], view: int = 0) -> np.ndarray:
    """The status codes of a page view's cells, (rows in page order, buckets): the last
    rows x buckets bytes of its packed cells (page_data.view_data)."""
    v = data["views"][view]
    raw = zlib.decompress(base64.b64decode(v["cells"]))
    rows, buckets = len(data["names"]), v["buckets"]
    assert len(raw) == 17 * rows * buckets  # four uint32 arrays, then the uint8 statuses
    return np.frombuffer(raw[-rows * buckets :], dtype=np.uint8).reshape(rows, buckets)


@pytest.mark.parametrize("split", [False, True], ids=["one-chunk", "two-chunks"])
def test_cells_before_a_parameter_existed_are_no_record(tmp_path: Path, split: bool) -> None:
    watch = _run(tmp_path / "run", split)
    live = page_data(watch)
    h = watch.history()
    watch.close()
    run = GradWatch.open(tmp_path / "run")
    try:
        disk = page_data(run)
        assert run.history().equals(h)
    finally:
        run.close()
    healthy = STATUSES.index("healthy")
    for data in (live, disk):
        assert data["views"][0]["first"] == 0 and data["views"][0]["width"] == 1
        status = _status(data)
        assert status.shape == (4, STEPS)
        for name in ("extra.weight", "extra.bias"):
            # history() has no rows before the parameter existed ...
            assert sorted(h[h.param == name].step.tolist()) == list(range(ADDED_AT, STEPS))
            row = status[data["names"].index(name)]
            # ... and the page has no record there, not "none" (no gradient)
            assert row[:ADDED_AT].tolist() == [EMPTY] * ADDED_AT
            assert row[ADDED_AT:].tolist() == [healthy] * (STEPS - ADDED_AT)
        for name in ("a.weight", "a.bias"):
            assert status[data["names"].index(name)].tolist() == [healthy] * STEPS
    # the two exports agree: same rows, same cells, same default lines
    for key in ("names", "selected", "anomalies"):
        assert live[key] == disk[key]
    assert live["views"] == disk["views"]


def test_a_pair_without_a_history_row_is_no_record() -> None:
    """The page built from history() alone (a run object whose overview takes no rank: the
    per-rank fallback) leaves a (step, parameter) without a row empty, not "none"."""
    import pandas as pd

    from gradviz_widgets.vocabulary import Thresholds
    from gradviz_widgets.watch.store import ParamInfo

    params = [ParamInfo(0, "a", "", (2,), 2, 0), ParamInfo(1, "b", "", (2,), 2, 2)]
    rows = [(s, r, "a", 1.0) for s in range(4) for r in (0, 1)]
    rows += [(s, r, "b", 2.0) for s in (2, 3) for r in (0, 1)]
    frame = pd.DataFrame(rows, columns=["step", "rank", "param", "norm"])
    frame["status"] = "healthy"

    class _Run:
        ranks = [0, 1]
        anomalies: list = []
        thresholds = Thresholds()
        name = "fake"

        def __init__(self) -> None:
            self.params = params

        def overview(self) -> None:  # no n_buckets/rank: the history fallback
            raise AssertionError("not called with these arguments")

        def history(self) -> pd.DataFrame:
            return frame

    data = page_data(_Run())
    healthy = STATUSES.index("healthy")
    for view in range(2):
        status = _status(data, view)
        assert status[data["names"].index("a")].tolist() == [healthy] * 4
        assert status[data["names"].index("b")].tolist() == [EMPTY, EMPTY, healthy, healthy]
