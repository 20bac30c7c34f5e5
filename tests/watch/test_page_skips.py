"""The watch page tells the steps a GradScaler skipped from applied NaN/Inf steps: its data
carries them per drawing (how many, the first few, and which buckets hold them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.page import SKIPPED_LABEL, page_data, watch_page_html
from gradviz_widgets.watch.page_data import skipped_info

BAD = (2, 3, 7)  # steps whose loss overflows once scaled: the scaler skips them


def _scaled_run(path: Path | None, steps: int = 10, bad: tuple[int, ...] = BAD) -> GradWatch:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1000)
    watch = GradWatch(net, optimizer=opt, scaler=scaler, path=path)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for s in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        if s in bad:
            loss = loss * 1e38  # Inf once scaled: Inf gradients, the step is skipped
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return watch


def test_skipped_steps_reach_the_page_data_live_and_from_disk(tmp_path: Path) -> None:
    watch = _scaled_run(tmp_path / "run")
    live = page_data(watch)
    watch.close()
    h = GradWatch.open(tmp_path / "run").history()
    assert sorted(h[h.skipped].step.unique().tolist()) == list(BAD)  # what the record says
    disk = page_data(GradWatch.open(tmp_path / "run"))
    want = {"count": 3, "first": [2, 3, 7], "buckets": [[2, 1, 2], [3, 1, 3], [7, 1, 7]]}
    for data in (live, disk):
        assert data["views"][0]["skipped"] == want
        assert data["skipped_label"] == SKIPPED_LABEL == "skipped by GradScaler"
        # the skipped steps are still NaN/Inf steps; the page draws them as skipped
        assert any(kind == "nonfinite" for _, kind, _, _ in data["anomalies"])


def test_merged_buckets_count_their_skipped_steps(tmp_path: Path) -> None:
    watch = _scaled_run(tmp_path / "run")
    watch.close()
    data = page_data(GradWatch.open(tmp_path / "run"), max_steps=4)  # 10 steps, 4 columns at most
    view = data["views"][0]
    width = view["width"]
    assert width > 1 and view["buckets"] <= 4 and view["first"] == 0
    # per bucket holding skipped steps: [bucket, how many, the first of them]
    buckets: dict[int, list[int]] = {}
    for s in BAD:
        entry = buckets.setdefault(s // width, [s // width, 0, s])
        entry[1] += 1
    assert view["skipped"] == {"count": 3, "first": list(BAD), "buckets": list(buckets.values())}
    assert any(n > 1 for _, n, _ in view["skipped"]["buckets"])  # 2 and 3 share a bucket


def test_a_run_without_skips_has_none(tmp_path: Path) -> None:
    watch = _scaled_run(tmp_path / "run", steps=4, bad=())
    text = watch_page_html(watch)
    watch.close()
    data = page_data(GradWatch.open(tmp_path / "run"))
    assert data["views"][0]["skipped"] == {"count": 0, "first": [], "buckets": []}
    assert '"skipped"' in text


@pytest.mark.parametrize(
    ("steps", "first", "width", "used", "want"),
    [
        # many skips: all counted, the first 8 named, one entry per bucket
        (
            range(0, 100, 2),
            0,
            25,
            4,
            (50, list(range(0, 16, 2)), [[0, 13, 0], [1, 12, 26], [2, 13, 50], [3, 12, 76]]),
        ),
        # steps outside the drawn buckets are counted but not drawn
        ([3, 50], 10, 5, 4, (2, [3, 50], [])),
        ([], 0, 1, 3, (0, [], [])),
    ],
)
def test_skipped_info(steps, first, width, used, want) -> None:  # noqa: ANN001
    out = skipped_info(steps, first, width, used)
    assert (out["count"], out["first"], out["buckets"]) == want
