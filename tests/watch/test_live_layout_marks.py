"""The live view's layout in Python: nearby anomalies share one label that lists them all (their
own labels overlapped), every anomaly stays findable, and the lines list is as wide as its
longest name (it cut GPT-2's names at ~160 px)."""

from __future__ import annotations

import numpy as np

from gradviz_widgets.vocabulary import STATUSES, Thresholds
from gradviz_widgets.watch.anomalies import Anomaly
from gradviz_widgets.watch.figures import LABEL_GAP, heatmap_figure, lines_figure
from gradviz_widgets.watch.history import Overview
from gradviz_widgets.watch.store import ParamInfo
from gradviz_widgets.watch.widget import picker_width

GPT2 = [
    "transformer.wte.weight",
    "transformer.h.0.attn.c_attn.weight",
    "transformer.h.0.mlp.c_proj.weight",
    "transformer.h.11.attn.c_proj.bias",
]


def _run(steps: int = 300) -> tuple[Overview, list[ParamInfo]]:
    params = [ParamInfo(i, n, n.rsplit(".", 1)[0], (2,), 2, 0) for i, n in enumerate(GPT2)]
    ov = Overview()
    for step in range(steps):
        ov.add(
            step, np.full(len(GPT2), 1.0), np.full(len(GPT2), STATUSES.index("healthy"), np.uint8)
        )
    return ov, params


def _labels(fig: dict) -> list[dict]:
    return fig["layout"]["annotations"]


def test_anomalies_a_few_steps_apart_share_one_label_that_lists_them() -> None:
    ov, params = _run()
    close = [Anomaly(s, "zero", [GPT2[k]]) for k, s in enumerate((40, 42, 44))]
    far = Anomaly(200, "exploding", ["<b>x</b>"])  # user text: escaped in the hover
    for fig in (
        heatmap_figure(ov, params, Thresholds(), [*close, far]),
        lines_figure(ov, params, GPT2[:2], Thresholds(), [*close, far]),
    ):
        labels = _labels(fig)
        assert [n["text"] for n in labels] == ["3 anomalies, steps 40-44", "exploding"]
        assert [n["x"] for n in labels] == [40, 200]
        hover = labels[0]["hovertext"]
        for k, s in enumerate((40, 42, 44)):  # each one findable by its step and parameter
            assert f"step {s}: zero in {GPT2[k]}" in hover
        assert "<b>" not in labels[1]["hovertext"]
        lines = [s for s in fig["layout"]["shapes"] if s.get("yref") == "paper"]
        assert {s["x0"] for s in lines} >= {40, 42, 44, 200}  # one dotted line each


def test_labels_stand_apart_and_count_every_anomaly() -> None:
    """Many anomalies (more than the 40 drawn before, silently): labels at least LABEL_GAP of
    the axis apart, and their counts add up to all of them."""
    ov, params = _run(1000)
    many = [Anomaly(s, "vanishing", [GPT2[s % 4]]) for s in range(0, 1000, 7)]
    labels = _labels(heatmap_figure(ov, params, Thresholds(), many))
    xs = [n["x"] for n in labels]
    assert all(b - a >= 1000 * LABEL_GAP for a, b in zip(xs, xs[1:]))
    counted = sum(int(n["text"].split()[0]) if "anomalies" in n["text"] else 1 for n in labels)
    assert counted == len(many) > 40
    dense = [Anomaly(s, "zero", [GPT2[0]]) for s in range(20)]  # one label; hover counts the rest
    (note,) = _labels(heatmap_figure(ov, params, Thresholds(), dense))
    assert note["text"] == "20 anomalies, steps 0-19"
    assert (
        note["hovertext"].count("<br>step ") == 11
        and "and 8 more (watch.anomalies" in note["hovertext"]
    )


def test_a_lone_anomaly_keeps_its_kind_as_label() -> None:
    ov, params = _run(30)
    (note,) = _labels(heatmap_figure(ov, params, Thresholds(), [Anomaly(4, "nonfinite", ["w"])]))
    assert note["text"] == "nonfinite" and note["x"] == 4
    assert note["hovertext"].startswith("step 4: nonfinite in w")


def test_the_lines_list_is_as_wide_as_its_longest_name() -> None:
    width = picker_width(GPT2)
    longest = max(len(n) for n in GPT2)
    assert width.startswith("min(100%, ")  # never wider than its row
    chars = int(width.split("+ ")[1].split("ch")[0])
    assert chars >= longest
    assert picker_width([]) == picker_width(["w"])  # a short list keeps a usable width


def test_many_parameters_keep_the_heat_map_within_a_screen() -> None:
    """212 rows of 16 px drew a 3,500 px heat map, its step axis three screens down (an outside
    try-out): thinner rows, every k-th labelled, every row still drawn."""
    names = [f"layers.{i // 2}.{'weight' if i % 2 == 0 else 'bias'}" for i in range(212)]
    params = [ParamInfo(i, n, n.rsplit(".", 1)[0], (2,), 2, 0) for i, n in enumerate(names)]
    ov = Overview()
    for step in range(50):
        ov.add(step, np.full(212, 1.0), np.full(212, STATUSES.index("healthy"), np.uint8))
    heat = heatmap_figure(ov, params, Thresholds())
    assert heat["layout"]["height"] <= 900
    ticks = heat["layout"]["yaxis"]["tickvals"]
    assert 40 <= len(ticks) < 212 and ticks[0] == "layers.0.weight"
    assert len(heat["data"][0]["y"]) == 212
    small = heatmap_figure(*_run(), Thresholds())  # a few rows: each labelled, 16 px
    assert len(small["layout"]["yaxis"]["tickvals"]) == len(GPT2)


def test_both_figures_share_their_margins_and_step_axis() -> None:
    """Each figure had its own margins: a step stood up to ~130 px apart in the two."""
    ov, params = _run()
    heat = heatmap_figure(ov, params, Thresholds())
    lines = lines_figure(ov, params, GPT2[:2], Thresholds())
    for side in ("l", "r"):
        assert heat["layout"]["margin"][side] == lines["layout"]["margin"][side]
    assert lines["layout"]["xaxis"]["range"] == [-0.5, 299.5]  # the map's columns
    assert lines["layout"]["legend"]["orientation"] == "h"  # under the plot, not beside it


def test_each_heat_block_after_the_first_overlaps_its_neighbour_by_one_column() -> None:
    """From outside: the live heat map had light seams every 32 steps, where two of its
    blocks met; each block after the first starts one column early, on the same colours."""
    from gradviz_widgets.watch.live import BLOCK, layered

    z = np.arange(3 * (2 * BLOCK + 5), dtype=float).reshape(3, -1)
    heat = {"type": "heatmap", "z": z, "x": list(range(0, 2 * (2 * BLOCK + 5), 2))}
    blocks = layered([heat], 2.0)
    assert [b["x0"] for b in blocks] == [0, 2 * (BLOCK - 1), 2 * (2 * BLOCK - 1)]
    assert np.array_equal(blocks[1]["z"][:, 0], blocks[0]["z"][:, -1])
    assert np.array_equal(blocks[2]["z"][:, 1:], z[:, 2 * BLOCK :])
