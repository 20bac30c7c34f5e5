"""The watch view's figure data and its downsampling, without a browser."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn

from gradviz_widgets.examples import nan_mid_graph_net
from gradviz_widgets.vocabulary import STATUSES, Thresholds
from gradviz_widgets.watch import GradWatch, Overview, minmax_downsample
from gradviz_widgets.watch.widget import colorscale, heatmap_figure

CODE = {s: i for i, s in enumerate(STATUSES)}


def test_minmax_downsample_keeps_every_spike_dip_and_nan():
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(size=100_000))
    values[31_337] = 1e9
    values[77_000] = 1e-12
    values[50_001] = np.nan
    steps, kept = minmax_downsample(np.arange(100_000), values, 500)
    assert len(kept) <= 3 * 500 and np.all(np.diff(steps) > 0)
    assert 31_337 in steps and 77_000 in steps and 50_001 in steps
    bounds = np.linspace(0, 100_000, 501).astype(int)
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # every bucket's extremes survive
        inside = (steps >= lo) & (steps < hi)
        assert np.nanmax(kept[inside]) == np.nanmax(values[lo:hi])
        assert np.nanmin(kept[inside]) == np.nanmin(values[lo:hi])
    s, v = minmax_downsample([1, 2, 3], [1.0, 2.0, 3.0], 10)
    assert s.tolist() == [1, 2, 3]


def test_overview_buckets_merge_without_losing_extremes():
    ov = Overview(n_buckets=8)
    norms = np.ones(1000)
    norms[123], norms[900] = 1e6, 1e-12
    for step, n in enumerate(norms):
        status = (
            CODE["exploding"] if n > 1e4 else CODE["vanishing"] if n < 1e-7 else CODE["healthy"]
        )
        ov.add(step, np.array([n, np.nan]), np.array([status, CODE["none"]], dtype=np.uint8))
    assert ov.used <= 8 and ov.width >= 128
    cells = ov.cell_values()[:, 0]
    assert cells.max() == 1e6 and cells.min() == 1e-12
    assert STATUSES[ov.status[123 // ov.width, 0]] == "exploding"
    assert (ov.status[: ov.used, 1] == CODE["none"]).all()
    steps, values = ov.series(0)
    assert 123 in steps and 900 in steps
    ref_s, ref_v = minmax_downsample(np.arange(1000), norms, 8)
    assert values.max() == ref_v.max() and values.min() == ref_v.min()


def test_colorscale_changes_band_at_the_thresholds():
    scale = colorscale(-9, 5, Thresholds(vanishing=1e-7, exploding=1e4))
    stops = [s for s, _ in scale]
    assert stops == sorted(stops) and stops[0] == 0 and stops[-1] == 1
    assert stops[1] == pytest.approx(2 / 14) and stops[3] == pytest.approx(13 / 14)


def test_widget_figures_mark_nan_none_and_anomalies(tmp_path):
    torch.manual_seed(0)
    model = nan_mid_graph_net()
    model.spare = nn.Linear(2, 2)  # never used: None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    g = torch.Generator().manual_seed(1)

    def train(steps, bad=None):
        for step in range(steps):
            x = torch.randn(4, 8, generator=g)
            if step == bad:
                x[1] = 0.0
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 0])).backward()
            opt.step()

    train(3)
    view = watch.show()
    first = view.updates
    train(3, bad=1)  # NaN from step 4 on
    watch.history()  # waits for the writer: the live view refreshes from its thread

    def settled() -> bool:  # all 6 steps drawn and the NaN parameter picked for the lines
        heat, lines = view.figures()
        drawn = np.shape(view.heatmap.data[0].z)[-1] == 6  # the throttled widget caught up
        return (
            drawn
            and np.asarray(heat["data"][0]["z"]).shape[-1] == 6
            and "fc1.weight" in [t["name"] for t in lines["data"]]
        )

    deadline = time.monotonic() + 10
    while not (view.updates > first and settled()) and time.monotonic() < deadline:
        time.sleep(0.05)  # a redraw < 0.25 s after the last one waits for the next tick
    assert view.updates > first
    heat, lines = view.figures()
    names = heat["data"][0]["y"]
    nan_cells = heat["data"][3]["z"]  # the NaN/Inf overlay
    row = names.index("fc1.weight")
    assert np.isnan(nan_cells[row, :4]).all() and (nan_cells[row, 4:] == 1).all()
    none_cells = heat["data"][1]["z"]
    assert (none_cells[names.index("spare.weight")] == 1).all()
    assert np.isfinite(heat["data"][0]["z"][names.index("head.bias"), :4]).all()
    marks = [
        (s["x0"], a["text"])
        for s, a in zip(heat["layout"]["shapes"], heat["layout"]["annotations"])
    ]
    assert (4, "nonfinite") in marks
    assert "fc1.weight" in [t["name"] for t in lines["data"]]
    shown = np.array(view.heatmap.data[0].z, dtype=float)  # None (JSON-safe) where NaN
    assert shown.shape == (len(names), 6)
    watch.close()
    # a finished run shows the same picture
    again = GradWatch.open(tmp_path / "run").show()
    heat2, _ = again.figures()
    assert np.array_equal(np.isnan(heat2["data"][3]["z"]), np.isnan(nan_cells))


def test_heatmap_rows_grouped_by_module():
    from gradviz_widgets.watch.store import ParamInfo

    params = [
        ParamInfo(0, "a.w", "a", (1,), 1, 0),
        ParamInfo(1, "b.w", "b", (1,), 1, 0),
        ParamInfo(2, "a.b", "a", (1,), 1, 0),
    ]
    ov = Overview()
    ov.add(0, np.array([1.0, 2.0, 3.0]), np.full(3, CODE["healthy"], dtype=np.uint8))
    fig = heatmap_figure(ov, params, Thresholds())
    assert fig["data"][0]["y"] == ["a.w", "a.b", "b.w"]
    assert fig["data"][0]["z"][:, 0].tolist() == pytest.approx(np.log10([1.0, 3.0, 2.0]).tolist())


def test_names_are_data_and_norm_text_comes_from_python():
    """A parameter named like markup (or a Plotly template) is shown as text in the heat map and
    the lines; hover shows Python's norm text (the same as node labels), not Plotly's format."""
    from gradviz_widgets.vocabulary import format_norm
    from gradviz_widgets.watch.store import ParamInfo
    from gradviz_widgets.watch.widget import lines_figure

    hostile = "<img src=x onerror=alert(1)>%{y}&amp;"
    params = [ParamInfo(0, hostile, "m", (1,), 1, 0), ParamInfo(1, "0", "m", (1,), 1, 0)]
    ov = Overview()
    for step in range(3):
        ov.add(step, np.array([1234.5, 1.5e-07]), np.full(2, CODE["healthy"], dtype=np.uint8))
    heat = heatmap_figure(ov, params, Thresholds())
    assert heat["data"][0]["y"][0] == "&lt;img src=x onerror=alert(1)&gt;%{y}&amp;amp;"
    assert heat["layout"]["yaxis"]["type"] == "category"  # a parameter named "0" stays a name
    lines = lines_figure(ov, params, [hostile, "0"], Thresholds())
    first = lines["data"][0]
    assert "<img" not in first["name"] and "%{y}" not in first["hovertemplate"]
    assert first["text"][0] == format_norm(1234.5) and "%{text}" in first["hovertemplate"]
    assert lines["data"][1]["text"][0] == format_norm(1.5e-07)


def test_view_opened_before_any_step_follows_the_worst_parameters(tmp_path):
    """A live view opened before the first flush has nothing to pick: once steps arrive, its
    lines show the most alarming parameters (until the user picks some)."""
    torch.manual_seed(0)
    model = nan_mid_graph_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    view = watch.show()  # nothing recorded yet
    for step in range(4):
        x = torch.randn(4, 8)
        if step == 2:
            x[1] = 0.0  # NaN from here on
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 0])).backward()
        opt.step()
    watch.history()  # waits for the writer
    _, lines = view.figures()
    assert "fc1.weight" in [t["name"] for t in lines["data"]]
    watch.close()


def test_a_nan_step_breaks_the_line_and_its_mark_stays_inside_the_plot():
    """The notebook's line chart ran straight through a NaN/Inf step (the offline page breaks
    it there), and the anomaly's rotated label stood above the plot, over its title."""
    from gradviz_widgets.watch.anomalies import Anomaly
    from gradviz_widgets.watch.figures import json_safe, lines_figure
    from gradviz_widgets.watch.store import ParamInfo

    ov = Overview()
    for step in range(12):
        bad = step == 7
        norm = np.array([np.nan if bad else 1.0 + step])
        ov.add(step, norm, np.array([CODE["nonfinite" if bad else "healthy"]], dtype=np.uint8))
    steps, values = ov.series(0)
    assert 7 in steps and np.isnan(values[list(steps).index(7)])
    params = [ParamInfo(0, "w", "", (2,), 2, 0)]
    fig = lines_figure(ov, params, ["w"], Thresholds(), [Anomaly(7, "nonfinite", ["w"])])
    y = json_safe(fig["data"][0])["y"]
    assert y[list(steps).index(7)] is None  # a gap: Plotly breaks the line there
    (note,) = fig["layout"]["annotations"]
    assert note["y"] == 1.0 and note["yanchor"] == "top"


def test_a_selected_line_the_log_axis_cannot_draw_is_listed_and_says_why() -> None:
    """From outside: a selected parameter whose norm was exactly 0.0 at every step (the zero
    anomaly's) drew nothing and had no legend entry in the live view; the page says why."""
    from gradviz_widgets.watch.figures import lines_figure
    from gradviz_widgets.watch.store import ParamInfo

    ov = Overview()
    for step in range(5):
        norms = np.array([1.0 + step, 0.0, np.nan])
        codes = np.array([CODE["healthy"], CODE["zero"], CODE["nonfinite"]], dtype=np.uint8)
        ov.add(step, norms, codes)
    params = [ParamInfo(i, n, "", (2,), 2, 0) for i, n in enumerate(["w", "dead", "broken"])]
    fig = lines_figure(ov, params, ["w", "dead", "broken"], Thresholds())
    shown = {t["name"]: t.get("visible", True) for t in fig["data"]}
    assert shown == {
        "w": True,
        "dead (exactly 0.0: off the log axis)": "legendonly",
        "broken (no finite norm)": "legendonly",
    }
    assert lines_figure(Overview(), params, ["w"], Thresholds())["data"][0]["name"] == "w"


def test_the_heat_maps_hover_names_one_step_as_a_step() -> None:
    """From outside: a column of one step hovered as "steps from 200"."""
    from gradviz_widgets.watch.figures import heatmap_figure
    from gradviz_widgets.watch.store import ParamInfo

    ov = Overview()
    for step in range(5):
        ov.add(step, np.array([1.0, 0.0]), np.array([CODE["healthy"], CODE["zero"]], np.uint8))
    params = [ParamInfo(0, "w", "", (2,), 2, 0), ParamInfo(1, "dead", "", (2,), 2, 0)]
    hovers = [t["hovertemplate"] for t in heatmap_figure(ov, params, Thresholds())["data"]]
    assert all("<br>step %{x}<br>" in h for h in hovers) and ov.width == 1
