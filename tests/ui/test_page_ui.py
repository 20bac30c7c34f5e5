"""The exported page in headless Chromium over file://, every other request aborted: the
graph lays out, a bar click selects its node, fold levels switch, user text never runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from harness import settled, wait_until
from offline_page import open_offline_page
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example
from gradviz_widgets.vocabulary import format_norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "render"))  # tests/render/test_page.py
from test_page import Hostile  # noqa: E402


def _open(browser, path: Path):  # noqa: ANN001, ANN202
    return open_offline_page(browser, path, "#graph svg g.node")


@pytest.mark.ui
def test_page_offline_bar_selects_node_and_folds(browser, tmp_path: Path) -> None:
    net, x, y = dead_branch_example()
    path = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y).export_html(
        tmp_path / "index.html"
    )
    page, problems = _open(browser, path)
    assert page.locator("#graph svg g.node").count() >= 20
    bar = page.locator('#chart .bar[data-row="2"]')  # gate.weight: exactly 0.0
    bar.click()
    wait_until(
        lambda: page.locator("#graph g.node.gvw-selected").count() == 1,
        10,
        "the parameter's node selected",
    )
    assert "gate.weight" in page.locator("#detail").text_content()
    assert "zero" in page.locator("#detail").text_content()
    options = page.locator("#depth option").all_text_contents()
    assert options == ["depth 0", "full"]  # in depth order (the first view's came first) ...
    assert page.locator("#depth option:checked").text_content() == "full"  # ... which it opens on
    page.select_option("#depth", label="depth 0")
    wait_until(lambda: page.locator("#graph svg g.node").count() < 20, 20, "folded view drawn")
    assert problems == []
    page.close()


@pytest.mark.ui
def test_page_with_hostile_names_runs_no_script(browser, tmp_path: Path) -> None:
    path = GradExplorer(Hostile(), torch.randn(2, 3)).export_html(tmp_path / "h.html")
    page, problems = _open(browser, path)
    assert page.locator("img").count() == 0
    assert "<img src=x onerror=alert(1)>" in page.locator("#graph svg.gvw-graph").text_content()
    page.locator("#chart .bar").first.click()
    assert problems == []
    page.close()


LABEL_OVERFLOW = """svg => [...svg.querySelectorAll("g.node")].flatMap(g => {
  const shape = g.querySelector(":scope > polygon, :scope > path, :scope > ellipse");
  if (!shape) return [];
  const box = shape.getBBox();
  const stripe = g.querySelector(":scope > .gvw-param-badge") ? 7 : 0;
  return [...g.querySelectorAll(":scope > text")].flatMap(t => {
    const r = t.getBBox();
    return r.x < box.x + stripe - 0.5 || r.x + r.width > box.x + box.width + 0.5
      ? [t.textContent + " (" + r.width.toFixed(1) + " in " + box.width.toFixed(1) + ")"] : [];
  });
})"""


@pytest.mark.ui
def test_every_label_stays_inside_its_node(browser, tmp_path: Path) -> None:
    """Graphviz sizes a node with its own metrics of Helvetica; Chromium draws another sans
    font, wider: the 1,000-layer chain's folded label ran over its box and under its
    parameter stripe (a stranger's screenshot). Every line now fits, stripe included."""
    torch.manual_seed(0)
    chain = nn.Sequential(*[nn.Linear(16, 16) for _ in range(1000)])
    net, x, y = dead_branch_example()
    pages = [
        GradExplorer(chain, torch.randn(8, 16)).export_html(tmp_path / "chain.html"),
        GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y).export_html(
            tmp_path / "seed.html"
        ),
    ]
    for path in pages:
        _assert_labels_fit(browser, path)


def _assert_labels_fit(browser, path: Path) -> None:  # noqa: ANN001
    page, problems = _open(browser, path)
    svg = page.locator("#graph svg.gvw-graph")
    try:
        wait_until(lambda: not svg.evaluate(LABEL_OVERFLOW), 10, "labels fitted")
    except TimeoutError:
        raise AssertionError(svg.evaluate(LABEL_OVERFLOW)) from None
    assert problems == []
    page.close()


#: per drawn node / cluster, the label lines (their drawn boxes, squeezing included) that stick
#: out of the shape's front face (a box3d's outline less the depth its inner edges mark off)
_OUTSIDE = """() => {
  const out = [];
  for (const g of document.querySelectorAll('#graph svg g.node, #graph svg g.cluster')) {
    const shape = g.querySelector(':scope > polygon, :scope > path, :scope > ellipse');
    if (!shape) continue;
    const box = shape.getBBox();
    let right = box.x + box.width;
    for (const l of g.querySelectorAll(':scope > polyline')) {
      const b = l.getBBox(); right = Math.min(right, b.x + b.width);
    }
    for (const t of g.querySelectorAll(':scope > text')) {
      const b = t.getBBox();
      if (b.x < box.x - 0.5 || b.x + b.width > right + 0.5) out.push(t.textContent);
    }
  }
  return out;
}"""


def _labels(page) -> list[str]:  # noqa: ANN001
    return sorted(
        t.split(" · ")[0] for t in page.locator("#graph svg g.node text").all_text_contents()
    )


@pytest.mark.ui
def test_page_labels_stay_inside_their_shapes_and_double_click_unfolds(
    browser, tmp_path: Path
) -> None:
    net, x, y = dead_branch_example()
    path = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y).export_html(
        tmp_path / "index.html"
    )
    page, problems = _open(browser, path)
    assert page.evaluate(_OUTSIDE) == []  # cluster labels too ("main1 · Linear" above its frame)
    page.select_option("#depth", label="depth 0")
    wait_until(lambda: page.locator("#graph svg g.node").count() < 20, 20, "folded view drawn")
    # folded modules: box3d with a parameter stripe ("2 params: exactly 0.0")
    assert page.locator("#graph g.node .gvw-param-badge").count() >= 1
    assert page.evaluate(_OUTSIDE) == []
    folded = page.locator("#graph g.node", has_text="main1 · Linear").first
    folded.locator("text").first.dblclick()
    wait_until(lambda: page.locator("#graph svg g.node").count() >= 20, 20, "unfolded")
    assert page.locator("#depth option:checked").text_content() != "depth 0"  # not folded now
    assert page.evaluate(_OUTSIDE) == []
    cluster = page.locator("#graph g.cluster", has_text="main1").first
    cluster.locator("text").first.dblclick()
    wait_until(lambda: page.locator("#graph svg g.node").count() < 20, 20, "folded again")
    assert problems == []
    page.close()


#: module (cluster) labels the graph pane cuts at its left edge: begun left of it, ending inside
CUT_MODULE_LABELS = """() => {
  const vp = document.querySelector('#graph .gvw-viewport').getBoundingClientRect();
  return [...document.querySelectorAll('#graph .gvw-viewport g.cluster > text')]
    .map(t => [t.textContent, t.getBoundingClientRect()])
    .filter(([_, b]) => b.width > 0 && b.bottom > vp.top && b.top < vp.bottom
      && b.left < vp.left - 0.5 && b.right > vp.left + 0.5)
    .map(([text, b]) => `${text} (from ${Math.round(b.left - vp.left)} px)`);
}"""


@pytest.mark.ui
def test_first_views_keep_module_labels_whole_and_say_the_loss_once(
    browser, tmp_path: Path
) -> None:
    """A stranger's screenshots: the readable first view of a wide graph opened on its busiest
    nodes with their module's label cut at the pane's left edge ("…mer.h.0.ln_1 · LayerNorm",
    ResNet's "…0.conv2 · Conv2d" at depth 3), and the pane's status line repeated the header's
    loss line word for word."""
    from gradviz_widgets.examples.cnn import resnet18

    torch.manual_seed(0)
    ex = GradExplorer(
        resnet18(num_classes=10, width=8),
        torch.randn(2, 3, 32, 32),
        loss_fn=nn.CrossEntropyLoss(),
        target=torch.tensor([1, 2]),
    )
    path = ex.export_html(tmp_path / "resnet.html")
    loss = f"loss {format_norm(ex.report.loss)} ("
    for size in ((1920, 1080), (1280, 800)):
        page, problems = open_offline_page(browser, path, "#graph svg g.node", size)
        assert page.evaluate("() => document.body.innerText").count(loss) == 1
        assert "nodes drawn" in page.locator("#graph .gvw-status").text_content()
        for label in page.locator("#depth option").all_text_contents():
            page.select_option("#depth", label=label)
            status = page.locator("#graph .gvw-status")
            wait_until(
                lambda s=status, t=label: s.text_content().startswith(t),
                20,
                f"the {label} view drawn",
            )
            box = page.locator("#graph svg.gvw-graph")
            view = settled(lambda b=box: b.get_attribute("data-view-box"))
            assert page.evaluate(CUT_MODULE_LABELS) == [], (size, label, view)
        assert problems == []
        page.close()


class _LoopedBlocks(nn.Module):
    """Blocks called in a loop from the root's forward, a root op between calls: folded to
    depth 0 (the page's first view) they are one node with 200 edges into the root's chain,
    which Graphviz takes a long time to lay out."""

    def __init__(self, n: int = 200) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + torch.tanh(block(x))
        return x


@pytest.mark.ui
def test_a_slow_layout_never_freezes_the_page_over_file(browser, tmp_path: Path) -> None:
    """The layout runs in a worker over file:// too (a classic one: Chromium refuses module
    workers from blob: URLs there, and the main-thread fallback froze the tab for minutes)."""
    torch.manual_seed(0)
    path = GradExplorer(_LoopedBlocks(), torch.randn(8, 4)).export_html(tmp_path / "loop.html")
    page, problems = open_offline_page(browser, path, "body[data-ready='1']")
    for _ in range(5):  # the page answers while the layout runs
        page.wait_for_function("() => true", timeout=3_000)
        page.wait_for_timeout(300)
    # past the page's layout budget the next deeper view is shown instead, and said so
    page.wait_for_selector("#graph svg g.node", timeout=60_000)
    status = page.locator(".gvw-status").text_content() or ""
    assert "depth 0 could not be laid out" in status and "showing full: 1202 nodes" in status
    assert page.locator("#depth").input_value() != "0"
    assert problems == []
    page.close()
