"""`ex.export_html`: one self-contained page of any model, offline; user text stays text."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example, gpt2_like
from gradviz_widgets.render.page import BUNDLE, views
from gradviz_widgets.render.page_chart import chart_svg
from gradviz_widgets.vocabulary import Thresholds, format_norm

pytestmark = pytest.mark.skipif(not BUNDLE.is_file(), reason="front-end bundle not built")

HOSTILE = '<img src=x onerror=alert(1)>"\\&amp;'


class Hostile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({HOSTILE: nn.Linear(3, 3), "ok": nn.Linear(3, 1)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks["ok"](torch.tanh(self.blocks[HOSTILE](x)))


def test_quickstart_page_is_small_and_offline(tmp_path) -> None:
    net, x, y = dead_branch_example()
    path = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y).export_html(
        tmp_path / "page.html"
    )
    text = path.read_text(encoding="utf-8")
    assert path.stat().st_size < 3_000_000
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", text)  # nothing fetched
    assert "https://" not in text.replace("http://www.w3.org/", "")
    assert text.count('class="bar"') == 8 and "exactly 0.0" in text


def test_user_text_is_escaped_everywhere(tmp_path) -> None:
    text = GradExplorer(Hostile(), torch.randn(2, 3)).export_html(tmp_path / "p.html").read_text()
    markup = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
    assert "<img" not in markup and "&lt;img src=x" in markup  # shown, as text
    state = text.split('id="gvw-state">')[1].split("</script>")[0]
    assert "</" not in state  # the JSON data cannot close its script element


def test_views_shallow_to_deep_and_distinct() -> None:
    torch.manual_seed(0)
    model = gpt2_like(n_layer=2, d_model=16, n_head=2, vocab=50, seq=8)
    graph = GradExplorer(model, torch.randint(0, 50, (2, 8))).graph
    vs = views(graph)
    labels = [v["label"] for v in vs]
    assert "full" in labels and "depth 0" in labels and len({v["dot"] for v in vs}) == len(vs) > 2
    # the fold menu in depth order, full last; the auto depth's view is the one opened on
    depths = [v["depth"] for v in vs]
    assert depths[-1] is None and depths[:-1] == sorted(depths[:-1])
    assert [v["depth"] for v in vs if v["default"]] == [graph.auto_depth()]
    for v in vs:
        assert set(v["key_map"].values()) <= set(v["nodes"]) | {
            n.module for n in graph.nodes
        } | set(graph.modules)


def test_chart_svg_pins_none_zero_and_nonfinite() -> None:
    rows = [
        {"name": "a", "norm": None, "status": "none", "reason": "frozen"},
        {"name": "b", "norm": 0.0, "status": "zero"},
        {"name": "c", "norm": float("nan"), "status": "nonfinite"},
        {"name": "<b>d</b>", "norm": 1e-30, "status": "vanishing"},
    ]
    svg = chart_svg(rows, Thresholds())
    assert "no gradient (None)" in svg and "exactly 0.0" in svg and "NaN / Inf" in svg
    assert "<b>" not in svg and "&lt;b&gt;d&lt;/b&gt;" in svg
    assert svg.count('class="bar"') == 4


def test_every_bar_selects_a_drawn_node_frozen_and_unused_included(tmp_path) -> None:
    """A bar of the page's chart selects its parameter's node in some view; a parameter the
    gradient never reached selects its ghost, whose text says why (it showed a raw id)."""
    import json

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
            self.unused = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    torch.manual_seed(0)
    net = Net()
    net.body[0].weight.requires_grad_(False)
    text = GradExplorer(net, torch.randn(3, 4)).export_html(tmp_path / "p.html").read_text()
    state = json.loads(text.split('id="gvw-state">')[1].split("</script>")[0])
    nodes = [v["nodes"] for v in state["views"]]
    for pid in state["params"]:
        assert any(pid in n for n in nodes), pid
    frozen = next(n["ghost:param:body.0.weight"] for n in nodes if "ghost:param:body.0.weight" in n)
    unused = next(n["ghost:param:unused.weight"] for n in nodes if "ghost:param:unused.weight" in n)
    assert "ghost:param:body.0.weight" in state["params"] and "(frozen)" in frozen["status_text"]
    assert "ghost:param:unused.weight" in state["params"] and "(" in unused["status_text"]


def test_the_loss_line_is_written_once(tmp_path) -> None:
    """The header shows the run's loss line; the page's data does not carry it again for the
    graph pane's status line (which said the same words under it, a stranger's screenshot)."""
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    text = ex.export_html(tmp_path / "page.html").read_text(encoding="utf-8")
    head = f"loss {format_norm(ex.report.loss)} ("
    assert text.count(head) == 1, text.count(head)


def test_each_view_counts_the_nodes_its_drawing_shows() -> None:
    """The pane's status line says how many nodes a view draws: its DOT's, not its node info's
    (which also covers AccumulateGrad nodes the DOT leaves out: a 300-layer chain said "1802
    nodes drawn" with 1202 on the page)."""
    torch.manual_seed(0)
    ex = GradExplorer(nn.Sequential(*[nn.Linear(4, 4) for _ in range(5)]), torch.randn(2, 4))
    ex.run()
    full = next(v for v in views(ex.graph) if v["depth"] is None)
    assert full["drawn"] < len(full["nodes"])  # 10 AccumulateGrad nodes are not drawn
    for view in views(ex.graph):
        shown = len(re.findall(r"(?m)^\s*n\d+ \[id=", view["dot"]))
        assert view["drawn"] == shown, (view["label"], view["drawn"], shown)


def test_the_page_marks_the_hooks_in_force_as_the_widget_does(tmp_path) -> None:
    """The page's legend has "hooked", but no node of an exported page was ever marked: a hook
    on `gate` and a modifier on `main2` were named nowhere on it."""
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.toggle_hook("gate")
    ex.set_modifier("main2", scale=0.5)
    ex.run()
    for view in views(ex.graph, (ex.hooks, ex.modifiers)):
        marked = {i: n["hooked_text"] for i, n in view["nodes"].items() if n["hooked"]}
        assert any("backward at gate" in t for t in marked.values()), view["label"]
        assert any("at main2" in t for t in marked.values()), view["label"]
        assert view["dot"].count("peripheries=") == len(
            [i for i in marked if i in view["key_map"].values()]
        )
    plain = views(ex.graph)[0]
    assert not any(n["hooked"] for n in plain["nodes"].values())
    page = ex.export_html(tmp_path / "p.html").read_text()
    assert "hooked: backward at gate" in page
    assert "<li>hooks on: backward at gate, scale by 0.5 at main2</li>" in page
    ex.close()
