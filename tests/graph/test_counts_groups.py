"""A ×N group's numbers match the report's: its parameter line counts parameters (a block
whose worst parameter is exactly 0.0 may hold a vanishing one), its blocks are periods of the
run, and its ‖g‖ is what reaches it from the loss side, apart from its blocks' range."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.ghosts import add_ghosts
from gradviz_widgets.graph.grad_graph import GradGraph
from gradviz_widgets.graph.nodes import GradNode
from gradviz_widgets.render.dot import label_lines
from gradviz_widgets.report.grad_report import GradReport
from gradviz_widgets.vocabulary import combine_norms, format_norm

BLOCKS, DEAD = 150, 140


@pytest.fixture(scope="module")
def chain() -> tuple[GradGraph, GradReport]:
    """300 modules, Linear+ReLU ×150. Block DEAD's bias is so negative its ReLU outputs 0:
    blocks 0..DEAD get exactly 0.0, and block DEAD+1, fed zeros, a 0.0 weight gradient but
    not a 0.0 bias gradient."""
    torch.manual_seed(0)
    net = nn.Sequential(*[m for _ in range(BLOCKS) for m in (nn.Linear(8, 8), nn.ReLU())])
    with torch.no_grad():
        net[2 * DEAD].bias.fill_(-100.0)
    ex = GradExplorer(net, torch.randn(4, 8))
    report = ex.run()
    yield ex.graph, report
    ex.close()


def _group(graph: GradGraph) -> GradNode:
    return graph.view(0, group=True).node(f"group:0-{2 * BLOCKS - 1}")


def test_the_chain_has_a_half_dead_block(chain: tuple[GradGraph, GradReport]) -> None:
    status = chain[1].param_status
    assert status[f"{2 * DEAD + 2}.weight"] == "zero"
    assert status[f"{2 * DEAD + 2}.bias"] != "zero"


def test_the_parameter_line_counts_what_the_report_counts(
    chain: tuple[GradGraph, GradReport],
) -> None:
    graph, report = chain
    zero = [name for name, s in report.param_status.items() if s == "zero"]
    blocks = {int(name.split(".")[0]) // 2 for name in zero}
    assert (len(zero), len(blocks)) == (2 * DEAD + 3, DEAD + 2)
    group = _group(graph)
    assert group.param_status == "zero"
    assert group.param_text == (
        f"{len(zero)} of {len(report.params)} params in {len(blocks)} of {BLOCKS} blocks: "
        "exactly 0.0"
    )


def test_the_group_norm_is_its_inflow(chain: tuple[GradGraph, GradReport]) -> None:
    graph, _ = chain
    plain = graph.view(0, group=False)
    last = f"module:{2 * BLOCKS - 1}"
    into = combine_norms([e.grad_norm for e in plain.edges if e.src == last])
    group = _group(graph)
    assert group.status == "zero"  # its worst block, drawn so
    assert group.grad_norm == into and into is not None and into > 0.0
    assert "‖g‖ per block 0.0–" in group.label
    assert label_lines(group)[1] == f"‖g‖ into group {format_norm(into)}"  # not its status' 0.0


def test_blocks_of_two_modules_count_once() -> None:
    """A block is one period of the run: (Linear, LayerNorm) ×100, pairs 1-50 frozen."""
    torch.manual_seed(0)
    net = nn.Sequential(*[m for _ in range(100) for m in (nn.Linear(8, 8), nn.LayerNorm(8))])
    net[2:102].requires_grad_(False)
    ex = GradExplorer(net, torch.randn(4, 8))
    report = ex.run()
    group = add_ghosts(ex.graph, report.none_reasons).view(0, group=True).node("group:2-101")
    assert "×50" in group.label
    assert group.param_text == "200 params: no gradient (frozen)"
    ex.close()
