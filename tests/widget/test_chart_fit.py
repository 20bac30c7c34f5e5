"""The per-parameter chart of a transformers model fits the box it is shown in (an outside
tester's GPT-2: 28 bars in a 636 px figure, cut off in a 560 px box with no visible scrollbar;
BERT's 41 showed ~24): up to ~40 bars are seen whole, rows as tight as still readable; more
bars scroll in readable rows, with a hint at the box's bottom that more rows follow."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.render.chart import figure_dict
from gradviz_widgets.render.chart_compare import compare_figure
from gradviz_widgets.widget.explorer_widget import CHART_MAX_HEIGHT

WIDTHS = (440, 600, 760, 850)  # beside the graph 440-760, under it about the cell's width
LABEL_PX = 11  # the name ticks' font size


def run(model: nn.Module, *args: Any, **kwargs: Any) -> GradExplorer:
    ex = GradExplorer(model, *args, **kwargs)
    ex.run()
    return ex


@pytest.fixture(scope="module")
def gpt2() -> GradExplorer:
    from small_models import tiny_gpt2_config
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 16))
    return run(GPT2LMHeadModel(tiny_gpt2_config()), dict(input_ids=ids, labels=ids))


@pytest.fixture(scope="module")
def bert() -> GradExplorer:
    from small_models import tiny_bert_config
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 16))
    model = BertForSequenceClassification(tiny_bert_config())
    return run(model, dict(input_ids=ids, labels=torch.tensor([0, 1])))


def box_px() -> int:
    """The max height of the widget's chart box, px, less its 1 px border each side."""
    assert CHART_MAX_HEIGHT.endswith("px")
    return int(CHART_MAX_HEIGHT[:-2]) - 2


def row_px(fig: dict) -> float:
    layout, bar = fig["layout"], fig["data"][0]
    rows = bar["y"] if bar["orientation"] == "h" else bar["x"]
    plot = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    return plot / len(rows)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_a_transformer_chart_is_seen_whole_in_its_box(model, width, request):
    ex = request.getfixturevalue(model)
    count = {"gpt2": 28, "bert": 41}[model]
    assert len(ex.report.params) == count
    fig = figure_dict(ex.report, "param", None, width)
    assert fig["data"][0]["orientation"] == "h"  # these names do not fit under upright bars
    assert fig["layout"]["height"] <= box_px()  # every bar shows, nothing to scroll
    assert row_px(fig) >= 14 and row_px(fig) >= 1.3 * LABEL_PX  # labels never overprint
    assert not fig["layout"]["annotations"]  # no "more below" hint when nothing is below
    assert fig["layout"]["title"]["y"] * fig["layout"]["height"] > 0


def test_few_flat_rows_keep_their_roomy_height(gpt2):
    fig = figure_dict(gpt2.report, "param", None, 440)
    assert row_px(fig) >= 18  # 28 rows fit the box at the roomy height: not squeezed


def test_more_bars_than_the_box_shows_say_so_at_its_bottom():
    torch.manual_seed(0)
    ex = run(nn.Sequential(*[nn.Linear(4, 4) for _ in range(40)]), torch.randn(2, 4))
    fig = figure_dict(ex.report, "param", None, 600)
    layout = fig["layout"]
    assert layout["height"] > box_px() and row_px(fig) >= 18  # scrolls, in readable rows
    (hint,) = layout["annotations"]
    plot = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    top = layout["margin"]["t"] + (1 - hint["y"]) * plot  # px from the figure's top
    assert box_px() - 30 < top < box_px()  # at the box's bottom edge: seen without scrolling
    visible = int((box_px() - layout["margin"]["t"]) // row_px(fig))
    assert hint["text"] == f"▼ {80 - visible} more below: scroll the chart"


def test_compare_mode_fits_the_same_box(bert):
    fig = compare_figure(bert.report, bert.report, "param", width=600)
    assert fig["layout"]["height"] <= box_px() or fig["layout"]["annotations"]
    assert row_px(fig) >= 1.3 * LABEL_PX
