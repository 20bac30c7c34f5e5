"""Chart layout choices: upright bars for few parameters, flat rows that grow the figure for
many (tick labels never overlap), one colour for outlines and patterns (no per-bar colour
arrays where plotly wants one colour)."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.render.chart import ROW_PX, UPRIGHT_MAX, chart_shape, figure_dict, label_plan


def many_params_explorer(layers: int = 75) -> GradExplorer:
    """A Linear chain with 2 * layers parameters (weight and bias each)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)])
    return GradExplorer(model, torch.randn(2, 4))


def test_shape_upright_until_the_limit_then_flat_and_growing():
    assert chart_shape(UPRIGHT_MAX) == {"orientation": "v", "height": 460}
    flat = chart_shape(UPRIGHT_MAX + 1)
    assert flat["orientation"] == "h"
    assert chart_shape(150)["height"] >= 150 * ROW_PX
    assert chart_shape(300)["height"] > chart_shape(150)["height"]


def test_few_parameters_stay_upright_with_two_level_ticks(dead_explorer):
    fig = figure_dict(dead_explorer.report)
    bar = fig["data"][0]
    assert bar["orientation"] == "v"
    assert isinstance(bar["x"][0], list) and len(bar["x"]) == 2  # (module, name) levels
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert fig["layout"]["height"] == 460


def test_150_parameters_lie_flat_one_labelled_row_each():
    ex = many_params_explorer(75)
    ex.run()
    fig = figure_dict(ex.report)
    bar, layout = fig["data"][0], fig["layout"]
    assert bar["orientation"] == "h"
    assert len(bar["y"]) == 150 and len(bar["x"]) == 150
    assert bar["y"][0] == "0.weight"  # full names, one row each, first on top
    assert layout["yaxis"]["dtick"] == 1 and layout["yaxis"]["autorange"] == "reversed"
    assert layout["xaxis"]["type"] == "log"
    assert layout["height"] >= 150 * ROW_PX  # >= 18 px per row: 11 px labels cannot overlap
    assert all(s["yref"] == "paper" for s in layout["shapes"])  # thresholds as vertical lines
    assert "vanishing" in layout["title"]["text"]


def test_module_mode_flat_too_when_many_modules():
    ex = many_params_explorer(40)
    ex.run()
    fig = figure_dict(ex.report, "module")
    assert fig["data"][0]["orientation"] == "h" and len(fig["data"][0]["y"]) == 40


def test_outline_and_pattern_colours_are_single_colours(dead_explorer):
    """plotly logs "Invalid color specifier: Array(8)" for arrays in these places."""
    for ex_fig in (figure_dict(dead_explorer.report), figure_dict(dead_explorer.report, "module")):
        marker = ex_fig["data"][0]["marker"]
        assert isinstance(marker["line"]["color"], str)
        assert isinstance(marker["pattern"]["fgcolor"], str)
        assert isinstance(marker["color"], list)  # the fill still says the status per bar
        # plotly's default template sets fillmode "overlay", whose background colour defaults
        # to the whole per-bar fill array (the Array(8) warning): replace mode, explicitly
        assert marker["pattern"]["fillmode"] == "replace"


def test_selected_module_outlined_wider(dead_explorer):
    fig = figure_dict(dead_explorer.report, "param", "gate")
    widths = fig["data"][0]["marker"]["line"]["width"]
    assert widths.count(3) == 2


def test_modules_elided_alike_keep_their_bars_in_model_order():
    """Plotly groups upright bars by their module label: GPT-2's four `c_proj` modules, elided
    alike, had their bars gathered out of order. Each module now has a label of its own, so
    every module's bars form one run, in the model's order."""
    from gradviz_widgets.render.chart import label_plan

    modules = [f"transformer.h.{i}.{part}.c_proj" for i in range(2) for part in ("attn", "mlp")]
    rows = [{"module": m, "name": f"{m}.{p}"} for m in modules for p in ("weight", "bias")]
    plan = label_plan(rows, "param", 1600)  # wide enough for the two-level axis
    assert plan["shape"]["orientation"] == "v"
    groups, names = plan["names"]
    assert len(set(groups)) == len(modules)
    runs = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
    assert len(runs) == len(modules)  # one contiguous run per module, none split or merged
    assert names == ["weight", "bias"] * len(modules)


def test_flat_labels_keep_each_blocks_index_and_need_no_suffix() -> None:
    """T5's names in the widget's chart width: cutting the middle of
    "encoder.block.0.layer.0.SelfAttention.q.weight" left out the block's index, and the
    blocks' rows read alike but for a "(2)"."""
    names = [
        f"{stack}.block.{b}.layer.0.SelfAttention.{w}.weight"
        for stack in ("encoder", "decoder")
        for b in range(4)
        for w in "qkvo"
    ]
    rows = [{"name": n, "module": n.rpartition(".")[0]} for n in names]
    shown = label_plan(rows, "param", 443)["names"]
    assert len(set(shown)) == len(shown) and not any(s.endswith(")") for s in shown)
    for name, label in zip(names, shown):
        stack, _, block = name.split(".")[:3]
        assert label.startswith(f"{stack}.") and f".{block}." in label, (name, label)
        assert label.endswith(name[-8:]) and len(label) < len(name)
