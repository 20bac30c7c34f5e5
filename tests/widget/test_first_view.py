"""The first view without a browser: the page's fit and resize messages, simulated, drive the
fold depth and the arrangement; folded modules carry their parameters' health; search finds
every module and parameter and unfolds to it; ×N blocks fold back from their frame."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples.cnn import resnet18
from gradviz_widgets.graph.ghosts import add_ghosts
from gradviz_widgets.graph.search import search_index
from gradviz_widgets.render.chart import elide_middle, figure_dict
from gradviz_widgets.vocabulary import format_norm
from gradviz_widgets.widget.explorer_widget import ExplorerWidget
from gradviz_widgets.widget.first_view import FOLD_ABOVE, MIN_OVERVIEW, READOUT_HEIGHT, arrange


def page(w: ExplorerWidget, msg: dict[str, Any]) -> None:
    """A message from the page, as the pane's comm delivers it."""
    w.pane._on_frontend_msg(w.pane, msg, [])


def fit(
    w: ExplorerWidget, width: int, cell: int, fits: bool, height: int = 520, across: int = 0
) -> None:
    """The page's fit report on the revision drawn now, measured at `width` x `height`, for a
    graph `across` px wide at readable labels."""
    page(w, {"kind": "fit", "revision": w.pane.revision, "fits": fits, "width": width,
             "height": height, "cell": cell, "across": across})  # fmt: skip


def too_big(w: ExplorerWidget, width: int, cell: int, height: int = 520) -> None:
    fit(w, width, cell, False, height)


@pytest.fixture
def frozen_resnet() -> ExplorerWidget:
    torch.manual_seed(0)
    model = resnet18(num_classes=10, width=4)
    model.layer2.requires_grad_(False)
    ex = GradExplorer(model, torch.randn(2, 3, 32, 32), loss_fn=nn.CrossEntropyLoss(),
                      target=torch.tensor([1, 2]))  # fmt: skip
    return ex.show()


def deep_mlp() -> ExplorerWidget:
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(30)]
    ex = GradExplorer(nn.Sequential(nn.Sequential(*blocks), nn.Linear(4, 1)), torch.randn(3, 4))
    return ex.show()


def test_the_cell_width_decides_the_arrangement_and_the_chart_follows() -> None:
    w = deep_mlp()
    assert w.pane.layout.width == "100%"  # the pane fills its box (it stopped at ~680 px)
    page(w, {"kind": "resize", "cell": 848})
    assert w.first_view.shape.stacked and w.chart.layout.width == 846
    assert w.children[2].layout.flex_flow == "column"
    page(w, {"kind": "resize", "cell": 1500})
    assert not w.first_view.shape.stacked and w.chart.layout.width == 600
    assert w.children[2].layout.flex_flow == "row nowrap"
    assert arrange(3000).chart_width == 760


def test_stacked_the_readout_sits_above_the_graph_in_a_fixed_box() -> None:
    """With the chart under the graph (cells under 1,100 px: 1280x800 with the file browser
    open), a click's readout under both was below the fold; it moves above the graph, in a box
    whose height does not change with its text (the graph never moves under the pointer)."""
    w = deep_mlp()
    page(w, {"kind": "resize", "cell": 848})
    body = w.children[2]
    assert w.children[3] is w.readout  # the same widgets: only their order on the page moves
    assert w.readout.layout.order == "1" and body.layout.order == "2"
    # until a module is chosen the readout is a one-line hint: no empty 136 px box
    assert "Click a node" in w.readout.value and w.readout.layout.height is None
    w.click_node(next(n.id for n in w.view.nodes if n.kind == "op" and n.module))
    assert w.readout.layout.overflow == "auto"
    assert "grad_output" in w.readout.value and w.readout.layout.height == READOUT_HEIGHT
    page(w, {"kind": "resize", "cell": 1500})  # side by side: under graph and chart again
    assert w.readout.layout.order is None and body.layout.order is None
    assert w.readout.layout.height is None


def test_the_chart_toggle_keeps_its_label_on_its_line() -> None:
    """The "chart" label of the per parameter / per module toggle stood on a line of its own
    above its buttons (the toggle's box is a block): its box is a one-row flex box now."""
    w = deep_mlp()
    lay = w.controls.mode_box.layout
    assert (lay.display, lay.flex_flow, lay.align_items) == ("flex", "row nowrap", "center")
    assert w.controls.mode_box.description == "chart"


def small_cnn() -> ExplorerWidget:
    """Two conv stages, the first frozen: 19 nodes, never folded for the screen."""
    torch.manual_seed(0)

    def block(i: int, o: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    net = nn.Sequential(block(3, 8), block(8, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(16, 10))  # fmt: skip
    net[0].requires_grad_(False)
    return GradExplorer(net, torch.randn(2, 3, 32, 32)).show()


def test_a_graph_wider_than_the_room_beside_the_chart_gets_the_chart_under_it() -> None:
    """Notebook 7's cell is ~1,108 px at any window size: beside a 443 px chart the graph had
    665 px, and a small CNN 736 px wide at readable labels was cut at the pane's edge. Drawn
    for good (never folded for the screen), the chart goes under it and the graph takes the
    cell's width; a graph that fits beside the chart, or is wider than the cell, stays there."""
    w = small_cnn()
    page(w, {"kind": "resize", "cell": 1108})
    assert not w.first_view.shape.stacked and w.chart.layout.width == 443
    revision, before = w.pane.revision, len(w.view.nodes)
    too_big(w, 665, 1108)  # measured without across (an older page): nothing known to change
    assert not w.first_view.shape.stacked
    w.first_view.reset()
    fit(w, 665, 1108, False, across=736)
    assert w.pane.revision == revision and len(w.view.nodes) == before  # not folded
    assert w.first_view.shape.stacked and w.chart.layout.width == 1106
    assert w.children[2].layout.flex_flow == "column"
    # the page's scrollbar (the stacked widget is taller) does not move the chart back beside
    page(w, {"kind": "resize", "cell": 1093})
    assert w.first_view.shape.stacked
    page(w, {"kind": "resize", "cell": 1500})  # room enough beside a 600 px chart
    assert not w.first_view.shape.stacked and w.chart.layout.width == 600
    for across in (600, 1500):  # fits beside the chart; wider than the whole cell
        w = small_cnn()
        page(w, {"kind": "resize", "cell": 1108})
        fit(w, 665, 1108, False, across=across)
        assert not w.first_view.shape.stacked, across


def test_a_graph_that_still_folds_keeps_the_chart_beside_it() -> None:
    """Only a graph drawn for good moves the chart: one folded further is measured again."""
    w = deep_mlp()
    page(w, {"kind": "resize", "cell": 1500})
    fit(w, 892, 1500, False, across=1200)
    assert w.first_view.fold_leaves and not w.first_view.shape.stacked


def test_a_graph_too_big_for_the_pane_folds_step_by_step_until_it_fits() -> None:
    w = deep_mlp()
    page(w, {"kind": "resize", "cell": 848})
    drawn = [len(w.view.nodes)]
    for _ in range(6):
        too_big(w, 848, 848)
        drawn.append(len(w.view.nodes))
    assert drawn[0] > FOLD_ABOVE and drawn[1] < drawn[0]  # leaf modules became boxes
    assert drawn[-1] < drawn[1] and drawn[-1] <= FOLD_ABOVE  # then a level, until small
    assert all(a >= b for a, b in zip(drawn, drawn[1:]))  # never unfolds by itself
    assert "folded at depth" in w.controls.loss_label.value
    # a report measured before the new arrangement reached the page changes nothing
    before = w.pane.revision
    too_big(w, 300, 848)
    assert w.pane.revision == before
    # a fold chosen by hand starts over
    w.controls.depth_box.value = "full"
    assert w.first_view.cap is None


def test_folding_for_the_screen_never_leaves_a_whole_model_as_one_box() -> None:
    """A transformers GPT-2 in a stacked cell that never fits: it folds step by step, but not
    to depth 0 (the whole transformer as one box beside its head and the loss: 4 nodes), and
    opens on the readable top of the last view with at least MIN_OVERVIEW nodes."""
    from small_models import tiny_gpt2_config
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(tiny_gpt2_config(n_layer=4))
    tokens = torch.randint(0, 64, (2, 16))
    w = GradExplorer(model, tokens, loss_fn=lambda out: out.logits.float().pow(2).mean()).show()
    assert len(w.explorer.graph.view(0).nodes) < MIN_OVERVIEW  # what the old rule ended on
    page(w, {"kind": "resize", "cell": 848})
    drawn = [len(w.view.nodes)]
    for _ in range(8):
        too_big(w, 848, 848)
        drawn.append(len(w.view.nodes))
    assert drawn[-1] < drawn[0]  # it did fold
    assert min(drawn) >= MIN_OVERVIEW and w.first_view.shown not in (None, 0)


def test_a_folded_frozen_stage_says_its_weights_get_no_gradient(frozen_resnet: Any) -> None:
    w = frozen_resnet
    w.controls.depth_box.value = 0
    node = w.view.node("module:layer2")
    assert node.status == "healthy"  # its input gradient flows through
    assert node.param_status == "none"
    assert node.param_text.endswith("params: no gradient (frozen)")
    info = w.pane.nodes["module:layer2"]
    assert info["param_text"] == node.param_text and info["param_color"]
    assert node.param_text in w.pane.dot  # also written on the node's box
    assert w.view.node("module:layer1").param_text == ""  # healthy weights: nothing added


def test_frozen_and_trained_stages_are_never_grouped(frozen_resnet: Any) -> None:
    w = frozen_resnet
    graph = add_ghosts(w.explorer.graph, w.explorer.report.none_reasons)
    view = graph.view(0, group=True)
    assert not any(n.id.startswith("group:") for n in view.nodes)  # layer2..4 differ


def test_search_finds_folded_parameters_and_unfolds_to_them() -> None:
    w = deep_mlp()
    w.controls.depth_box.value = 0
    index = {e[0]: e for e in w.pane.search_index}
    assert index["0.3.0.weight"][2] == "module:0" and index["0.3.0.weight"][3] == "folded"
    assert index["1.bias"][3] == "folded" and index["0.3"][1] == "module"
    page(w, {"kind": "reveal", "name": "0.3.0.weight"})
    assert w.selected == "param:0.3.0.weight" and "param:0.3.0.weight" in w.view
    own = {e[0]: e for e in search_index(w.explorer.graph, w.view)}
    assert own["0.3.0.weight"][3] == ""


def test_clicking_a_container_outlines_all_its_bars() -> None:
    w = deep_mlp()
    fig = figure_dict(w.explorer.report, "param", selected_module="0.3")
    names = fig["data"][0]["customdata"]
    widths = fig["data"][0]["marker"]["line"]["width"]
    outlined = {n[0] for n, wd in zip(names, widths) if wd > 1}
    assert outlined == {"0.3.0.weight", "0.3.0.bias"}


def test_unfolded_blocks_fold_back_from_their_frame() -> None:
    torch.manual_seed(0)
    blocks = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(160)])
    w = GradExplorer(blocks, torch.randn(2, 4)).show()
    w.controls.depth_box.value = 0
    group = next(n for n in w.view.nodes if n.id.startswith("group:"))
    w.toggle_scope(group.module)  # the page's double-click on the ×N node
    assert not any(n.id.startswith("group:") for n in w.view.nodes)
    w.toggle_scope("")  # the frame around the blocks
    assert any(n.id == group.id for n in w.view.nodes)
    w.click_node(group.id)
    assert "␊" not in w.status_text and "×" in w.status_text


def test_numbers_read_the_same_everywhere() -> None:
    assert format_norm(float("-inf")) == "-Inf" and format_norm(float("inf")) == "Inf"
    assert elide_middle("a" * 30 + "b" * 30, 21) == "a" * 10 + "…" + "b" * 10


def test_a_healthy_status_line_names_the_key_fact() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    w = GradExplorer(net, torch.randn(3, 4)).show()
    assert "all 4 gradients healthy, ‖g‖ from" in w.status_text


def settle(w: ExplorerWidget, width: int = 893, cell: int = 1488, room: int = 20) -> int | None:
    """The first view at a real size: the page reports each fresh layout, "fits" once at
    most `room` nodes are drawn, until nothing changes any more; the depth it settled at."""
    page(w, {"kind": "resize", "cell": cell})
    for _ in range(12):
        before = w.pane.revision
        fit(w, width, cell, len(w.view.nodes) <= room)
        if w.pane.revision == before:
            break
    return w.first_view.shown


def test_a_rerun_keeps_the_depth_shown_wherever_it_is_measured(frozen_resnet: Any) -> None:
    w = frozen_resnet
    depth = settle(w)
    assert depth == 1 and w.first_view.cap == 1  # folded for the screen
    shown = {n.id for n in w.view.nodes}
    # the same graph again (the Run button, ex.run()): its fresh layout, measured anywhere
    # (a cell scrolled away, a scrollbar more), folds nothing
    w.rerun()
    too_big(w, 893, 1488)
    too_big(w, 860, 1488)
    assert w.first_view.shown == depth and {n.id for n in w.view.nodes} == shown
    # a bigger graph (the frozen stage unfrozen in another cell, then ex.run()): same depth
    w.explorer.model.layer2.requires_grad_(True)
    w.explorer.run()
    assert w.runs == 3 and w.first_view.shown == depth
    revision = w.pane.revision
    too_big(w, 893, 1488)
    assert w.pane.revision == revision and f"folded at depth {depth}" in w.controls.loss_label.value


def test_no_depth_is_chosen_from_a_pane_without_a_size(frozen_resnet: Any) -> None:
    w = frozen_resnet
    page(w, {"kind": "resize", "cell": 1488})
    revision = w.pane.revision
    too_big(w, 0, 1488, height=0)  # not laid out / hidden: says nothing
    too_big(w, 893, 1488, height=0)
    fit(w, 0, 0, True, height=0)
    assert w.pane.revision == revision and not w.first_view.measured
    w.rerun()  # re-run before any real size: the depth is still to be chosen
    assert w.first_view.settling
    assert settle(w) is not None and w.pane.revision > revision + 1  # the real size folds it


def test_only_a_real_resize_chooses_the_depth_again(frozen_resnet: Any) -> None:
    w = frozen_resnet
    depth = settle(w)
    revision = w.pane.revision
    page(w, {"kind": "resize", "cell": 1470})  # a scrollbar: the same room
    too_big(w, 878, 1470)
    assert w.pane.revision == revision and w.first_view.shown == depth
    page(w, {"kind": "resize", "cell": 1250})  # really narrower: choose again
    assert w.first_view.cap is None and w.pane.revision == revision + 1
    settle(w, 655, 1250)
    assert w.first_view.measured_at == 1250
    # a depth picked by hand is never re-chosen
    w.controls.depth_box.value = 1
    revision = w.pane.revision
    page(w, {"kind": "resize", "cell": 848})
    too_big(w, 848, 848)
    assert w.pane.revision == revision and "folded at depth 1" in w.controls.loss_label.value


def frozen_first_stages() -> ExplorerWidget:
    """A ResNet-style CNN whose stem and first stage are frozen: at depth 4 and at depth 3
    (leaf modules as boxes) it draws the same 46 nodes."""
    torch.manual_seed(0)

    def stage(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()
        )

    def deep(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Sequential(stage(cin, cout), stage(cout, cout)), stage(cout, cout))

    model = nn.Sequential(
        stage(3, 8), deep(8, 8), deep(8, 16), deep(16, 16), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip
    model[0].requires_grad_(False)
    model[1].requires_grad_(False)
    ex = GradExplorer(model, torch.randn(2, 3, 16, 16), loss_fn=nn.CrossEntropyLoss(),
                      target=torch.tensor([1, 2]))  # fmt: skip
    return ex.show()


def test_each_fold_step_draws_a_new_view() -> None:
    """A step whose view is the one that did not fit is drawn by the page unchanged (no new
    layout, so no fit report): the auto view stalled on the graph that did not fit (a CNN with
    frozen first stages opened 2,950 px wide on three frozen nodes). A step skips such depths."""
    w = frozen_first_stages()
    page(w, {"kind": "resize", "cell": 1488})
    for _ in range(6):
        before, revision = w.pane.dot, w.pane.revision
        too_big(w, 893, 1488)
        if w.pane.revision == revision:
            break  # nothing left worth folding
        assert w.pane.dot != before, f"fold step to depth {w.first_view.shown} drew the same view"
    assert w.first_view.shown is not None and w.first_view.shown <= 2
