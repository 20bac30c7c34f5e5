"""`GradExplorer.show()`'s options: each wrong value is a GradExplorerError naming the option
(they were traitlets' "Invalid selection: value not found", a TraitError naming GraphPane's
trait, a ValueError naming `mode`, or accepted: `height="big"`)."""

from __future__ import annotations

import pytest

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.examples import dead_branch_example


@pytest.fixture(scope="module")
def ex() -> GradExplorer:
    net, x, _ = dead_branch_example()
    return GradExplorer(net, x)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"depth": -1}, "depth must be 'auto', 'full' or a fold depth"),
        ({"depth": "x"}, "depth must be 'auto', 'full' or a fold depth"),
        ({"depth": True}, "depth must be 'auto', 'full' or a fold depth"),
        ({"height": "big"}, "height must be a CSS length"),
        ({"height": 0}, "height must be a CSS length"),
        ({"chart_mode": "bogus"}, "chart_mode must be one of"),
        ({"max_nodes": 0}, "max_nodes must be an int >= 1"),
        ({"dpeth": 1}, "show\\(\\) takes no option 'dpeth'; its options: depth, max_nodes"),
    ],
)
def test_a_wrong_option_names_itself(ex: GradExplorer, options: dict, said: str) -> None:
    with pytest.raises(GradExplorerError, match=said):
        ex.show(**options)


def test_a_pixel_height_and_a_depth_past_the_graph_are_taken(ex: GradExplorer) -> None:
    """An int height is pixels; a depth deeper than the graph folds draws every node."""
    w = ex.show(height=600, depth=99)
    assert w.pane.height == "600px" and w.depth is None
    assert w.controls.depth_box.value == "full"
    w.close()
