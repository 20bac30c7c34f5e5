"""The first view of a real model, in real JupyterLab (file browser open) at 1280x800 and
1920x1080: a GPT-2 from a transformers config, a ResNet-style CNN with a frozen stage and a
model with hostile module names.

Measured facts of the first view, each asserted: how many graph nodes are on screen (all of
them, not an empty corner), the smallest label on screen (>= 10 px), no overlapping texts in
the chart header, the graph pane's width as a share of the cell's, and, for the ResNet, the
frozen stage's parameter health on its folded node, the chart toggle's label beside it, no module
label cut at the pane's left edge and, with the chart under the graph, the hook readout above
the graph. Facts go to
test-artifacts/first_view.json, screenshots to test-artifacts/first_view_<model>_<size>.png.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from harness import ARTIFACTS, JupyterLabServer, LabPage

SETUP = """import json
import torch
from torch import nn
from gradviz_widgets import GradExplorer
torch.manual_seed(0)
"""
MODELS = {
    "gpt2": SETUP
    + """from transformers import GPT2Config, GPT2LMHeadModel
cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=4, n_head=2)
model = GPT2LMHeadModel(cfg).train()
ids = torch.randint(0, 64, (2, 8))
def lm_loss(out, target):
    return nn.functional.cross_entropy(out.logits.reshape(-1, 64), target.reshape(-1))
ex = GradExplorer(model, {"input_ids": ids}, loss_fn=lm_loss, target=ids)
w = ex.show()""",
    "resnet": SETUP
    + """from gradviz_widgets.examples.cnn import resnet18
model = resnet18(num_classes=10, width=8)
model.layer2.requires_grad_(False)   # a frozen stage
x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
ex = GradExplorer(model, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()""",
    "hostile": SETUP
    + r"""NAMES = ["<img src=x onerror=alert(1)>", "q\"uo'te", "back\\slash", "new\nline",
         "cr\rret", "&amp;lt;", "rtl\u202eevil", "at@1", "br{a}ce;", "中文", "-->",
         "a_very_long_module_name_that_goes_on_and_on_block_0"]
class Hostile(nn.Module):
    def __init__(self):
        super().__init__()
        for name in NAMES:
            self.add_module(name, nn.Linear(3, 3))
    def forward(self, x):
        for m in self._modules.values():
            x = torch.tanh(m(x))
        return x.square().mean()
ex = GradExplorer(Hostile(), torch.randn(2, 3))
w = ex.show()""",
}
SIZES = {"1280x800": (1280, 800), "1920x1080": (1920, 1080)}

# the graph's viewport, its svg and the svg's scale, as both measurements below start
VIEWPORT = """
  const vp = root.querySelector('.gvw-viewport');
  const v = vp.getBoundingClientRect();
  const svg = vp.querySelector(':scope > svg');
  const scale = svg.getBoundingClientRect().width / svg.width.baseVal.value;
"""

# facts of the first view, measured in the page
FACTS = (
    "(root) => {"
    + VIEWPORT
    + """  const nodes = [...svg.querySelectorAll('g.node')];
  const inside = nodes.filter(n => { const b = n.getBoundingClientRect();
    return b.left >= v.left - 1 && b.right <= v.right + 1 && b.top >= v.top - 1 && b.bottom <= v.bottom + 1; });
  const sizes = [...svg.querySelectorAll('g.node text')].map(t => parseFloat(getComputedStyle(t).fontSize));
  const cell = root.closest('.jp-OutputArea-output') || root.parentElement;
  const plot = root.querySelector('.js-plotly-plot');
  const header = plot ? [...plot.querySelectorAll('.infolayer text, .annotation-text, .g-gtitle text')]
    .map(t => t.getBoundingClientRect()).filter(b => b.width > 0 && b.height > 0) : [];
  let overlaps = 0;
  for (let i = 0; i < header.length; i++) for (let j = i + 1; j < header.length; j++) {
    const a = header[i], b = header[j];
    if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) overlaps++;
  }
  const c = cell.getBoundingClientRect();
  const pr = plot ? plot.getBoundingClientRect() : null;
  const right = Math.max(v.right, pr ? pr.right : 0);
  const tb = root.querySelector('.gv-chart-mode');
  const tl = tb.querySelector('.widget-label').getBoundingClientRect();
  const bt = tb.querySelector('button').getBoundingClientRect();
  const ro = root.querySelector('.gv-readout').closest('.widget-html').getBoundingClientRect();
  const cut = [...svg.querySelectorAll('g.cluster > text')].map(t => t.getBoundingClientRect())
    .filter(b => b.width > 0 && b.bottom > v.top && b.top < v.bottom && b.left < v.left - 0.5 && b.right > v.left + 0.5);
  return {nodes: nodes.length, chart_label_inline: tl.top >= bt.top - 2 && tl.bottom <= bt.bottom + 2,
          readout_above: ro.bottom <= v.top, readout_bottom: ro.bottom - root.getBoundingClientRect().top,
          cut_module_labels: cut.length, visible: inside.length, min_label_px: Math.min(...sizes) * scale,
          pane_share: v.width / c.width, pane_w: v.width, pane_h: v.height, cell_w: c.width,
          chart_w: pr ? pr.width : 0, chart_below: pr ? pr.top >= v.bottom - 2 : false,
          empty_right_px: c.right - right, header_texts: header.length, header_overlaps: overlaps,
          status: root.querySelector('.gvw-status').textContent,
          badges: [...svg.querySelectorAll('.gvw-param-badge')].map(b => b.textContent)};
}"""
)


@pytest.fixture(params=list(SIZES))
def sized_lab(
    lab_server: JupyterLabServer, browser: Any, request: pytest.FixtureRequest
) -> Iterator[tuple[str, LabPage]]:
    width, height = SIZES[request.param]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(30_000)
    lab = LabPage(lab_server, context.new_page())
    try:
        yield request.param, lab
    finally:
        lab.save_logs(request.node.name.replace("[", "_").replace("]", ""))
        context.close()


def record(key: str, facts: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "first_view.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, key: facts}, indent=1, ensure_ascii=False))


def settled_facts(lab: LabPage) -> dict[str, Any]:
    """The facts once the widget stopped changing (auto folding may lay out more than once)."""
    root = lab.page.locator(".gv-explorer").first
    last: dict[str, Any] = {}
    for _ in range(60):
        lab.page.wait_for_timeout(500)
        renders = root.locator(".gvw-viewport").get_attribute("data-renders")
        facts = root.evaluate(FACTS)
        facts["renders"] = renders
        busy = root.locator(".gvw-status").get_attribute("data-level") == "busy"
        if not busy and facts == last:
            return facts
        last = facts
    return last


def draw(lab: LabPage, name: str, cells: list[str]) -> None:
    """Run `cells` in a new notebook with the file browser open, until graph and chart drew."""
    lab.notebook(name, cells)
    lab.open_notebook(name)
    lab.page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
    lab.run_all()
    lab.page.wait_for_function(
        "() => document.querySelectorAll('.gv-explorer .gvw-viewport > svg g.node').length > 0"
        " && document.querySelector('.gv-explorer .js-plotly-plot .bars')",
        timeout=300_000,
    )


def drawn_facts(sized: tuple[str, LabPage], name: str, cell: str, script: str) -> dict[str, Any]:
    """`script`'s facts of the settled first view of `cell`'s widget, recorded and shot."""
    size, lab = sized
    draw(lab, f"first_view_{name}_{size}.ipynb", [cell, "w"])
    settled_facts(lab)
    facts: dict[str, Any] = lab.page.locator(".gv-explorer").first.evaluate(script)
    record(f"{name}_{size}", facts)
    lab.screenshot(f"first_view_{name}_{size}")
    return facts


@pytest.mark.ui
@pytest.mark.parametrize("model", list(MODELS))
def test_first_view(sized_lab: tuple[str, LabPage], model: str) -> None:
    size, lab = sized_lab
    draw(lab, f"first_view_{model}_{size}.ipynb", [MODELS[model], "w"])
    facts = settled_facts(lab)
    record(f"{model}_{size}", facts)
    lab.screenshot(f"first_view_{model}_{size}")
    width = SIZES[size][0]
    lab.page.set_viewport_size({"width": width, "height": 2600})  # the whole widget in view
    lab.page.wait_for_timeout(800)
    lab.screenshot(f"first_view_{model}_{size}_widget", ".gv-explorer")
    if model == "hostile" and facts["pane_w"] < 1000:
        # known limit: 12 Linear calls chained by root-level tanh ops are 27 top-level ranks,
        # taller than the window at 10 px labels with nothing left to fold; the first view is
        # then the readable top of the graph (never an empty corner)
        assert facts["visible"] >= 8, facts
    else:
        assert facts["visible"] == facts["nodes"] > 0, facts  # the whole graph
    assert facts["min_label_px"] >= 9.95, facts  # readable
    assert facts["header_overlaps"] == 0, facts
    assert facts["pane_share"] >= (0.9 if facts["chart_below"] else 0.5), facts
    assert facts["empty_right_px"] <= 40, facts  # the widget fills the cell
    assert facts["chart_label_inline"], facts  # "chart" beside its toggle, not above it
    assert facts["cut_module_labels"] == 0, facts  # no module name cut at the pane's left
    if facts["chart_below"]:  # the readout of a click shows without scrolling: above the graph
        assert facts["readout_above"], facts
        assert facts["readout_bottom"] <= SIZES[size][1] - 300, facts
    if model == "resnet":  # the frozen stage says so on its folded node
        assert any("no gradient" in b for b in facts["badges"]), facts


DEEP = (
    SETUP
    + """layers = []
for _ in range(300):
    layers += [nn.Linear(8, 8), nn.Tanh()]
model = nn.Sequential(*layers)
ex = GradExplorer(model, torch.randn(4, 8))
ex.show()"""
)

# every drawn node against the viewport's box and the part of it inside the window
PLACES = """(root) => {
  const vp = root.querySelector('.gvw-viewport');
  const v = vp.getBoundingClientRect();
  const svg = vp.querySelector(':scope > svg');
  const nodes = [...svg.querySelectorAll('g.node')].map(n => n.getBoundingClientRect());
  const inBox = (b, t, bottom) => b.left >= v.left - 1 && b.right <= v.right + 1 && b.top >= t - 1
    && b.bottom <= bottom + 1;
  // what is on screen: the window, less what the notebook's scrolling panels clip (status bar)
  let bottom = Math.min(v.bottom, window.innerHeight);
  for (let a = vp.parentElement; a; a = a.parentElement) {
    const r = a.getBoundingClientRect();
    if (r.height > 0 && getComputedStyle(a).overflowY !== 'visible') bottom = Math.min(bottom, r.bottom);
  }
  return {nodes: nodes.length, inside: nodes.filter(b => inBox(b, v.top, v.bottom)).length,
          on_screen: nodes.filter(b => inBox(b, v.top, bottom)).length,
          pane_top: v.top, pane_h: v.height, window_h: window.innerHeight, screen_bottom: bottom,
          boxes: nodes.map(b => [b.left, b.top, b.right, b.bottom].map(Math.round)),
          hint: !vp.parentElement.querySelector('.gvw-hint')?.hidden,
          status: root.querySelector('.gvw-status').textContent};
}"""


@pytest.mark.ui
def test_first_view_deep_chain_opens_whole(sized_lab: tuple[str, LabPage]) -> None:
    """A chain of 300 Linear+Tanh blocks folds to one 'x300' group and the loss: that 2-node
    graph (a wide, many-line group label) opens whole, at the top of the pane, every node inside
    the viewport and on screen (the tester saw the group cut at the window's bottom edge and
    the loss below it, the pane above them blank)."""
    size, lab = sized_lab
    # one cell ending in show(), as the tester ran it
    draw(lab, f"first_view_deep_{size}.ipynb", [DEEP])
    settled_facts(lab)
    root = lab.page.locator(".gv-explorer").first
    places = root.evaluate(PLACES)
    record(f"deep_{size}", places)
    lab.screenshot(f"first_view_deep_{size}")
    assert places["nodes"] <= 4, places  # folded to the group and the loss
    assert places["inside"] == places["nodes"], places  # the whole graph, none cut
    assert places["on_screen"] == places["nodes"], places  # none below the window's edge
    assert not places["hint"], places  # not 'zoomed to readable labels'


STATUSES = (
    SETUP
    + """class Statuses(nn.Module):
    # one layer per gradient status: healthy, zero, vanishing, exploding, NaN, never called, frozen
    def __init__(self):
        super().__init__()
        self.healthy = nn.Linear(4, 4)
        self.zero_gate = nn.Linear(4, 4)
        nn.init.zeros_(self.zero_gate.weight); nn.init.constant_(self.zero_gate.bias, -1.0)
        self.vanish = nn.Linear(4, 4)
        self.explode = nn.Linear(4, 4)
        self.nanp = nn.Linear(4, 1)
        self.never = nn.Linear(4, 4)
        self.frozen = nn.Linear(4, 4); self.frozen.requires_grad_(False)
    def forward(self, x):
        h = self.frozen(self.healthy(x))
        z = torch.relu(self.zero_gate(h))
        v = self.vanish(x) * 1e-12
        e = self.explode(x) * 1e8
        n = torch.sqrt(self.nanp(x) - 100.0)  # negative: NaN
        return h.sum() + z.sum() + v.sum() + e.sum() + n.sum()
ex = GradExplorer(Statuses(), torch.randn(3, 4))
w = ex.show()"""
)

# nodes against the viewport: whole inside, cut at its left or right edge, the NaN ones shown
EDGES = (
    "(root) => {"
    + VIEWPORT
    + """  const all = [...svg.querySelectorAll('g.node')];
  const box = (n) => n.getBoundingClientRect();
  const inside = (b) => b.left >= v.left - 1 && b.right <= v.right + 1 && b.top >= v.top - 1
    && b.bottom <= v.bottom + 1;
  const rows = (b) => b.bottom > v.top + 1 && b.top < v.bottom - 1;
  const cut = all.filter(n => { const b = box(n); return rows(b)
    && ((b.left < v.left - 1 && b.right > v.left + 1) || (b.left < v.right - 1 && b.right > v.right + 1)); });
  const nan = all.filter(n => n.classList.contains('gvw-status-nonfinite'));
  const sizes = [...svg.querySelectorAll('g.node text')].map(t => parseFloat(getComputedStyle(t).fontSize));
  return {nodes: all.length, inside: all.filter(n => inside(box(n))).length,
          cut: cut.map(n => n.textContent.trim().slice(0, 40)),
          nan: nan.length, nan_inside: nan.filter(n => inside(box(n))).length,
          min_label_px: Math.min(...sizes) * scale,
          hint: !vp.parentElement.querySelector('.gvw-hint')?.hidden};
}"""
)


@pytest.mark.ui
def test_first_view_shows_the_worst_findings_on_whole_nodes(sized_lab: tuple[str, LabPage]) -> None:
    """A 7-layer model with one layer per status (40 nodes: never folded for the screen) is
    wider than its pane at readable labels. Its first view showed the top row (frozen, healthy,
    never called) with the NaN and exploding layers out of view, and nodes cut in half at the
    pane's left edge ("ckward0 6e-12"); it opens on the NaN nodes, no node cut at either side."""
    facts = drawn_facts(sized_lab, "statuses", STATUSES, EDGES)
    assert facts["nan"] > 0, facts
    assert facts["nan_inside"] > 0, facts  # the worst finding is in view, whole
    assert facts["cut"] == [], facts  # no node cut at the pane's left or right edge
    assert facts["min_label_px"] >= 9.95, facts  # still readable


GHOSTS = (
    SETUP
    + """from gradviz_widgets.examples import frozen_and_detached_example
model, x, y = frozen_and_detached_example()
ex = GradExplorer(model, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()"""
)

# the nodes a gradient reached (no ✂ reason in their label) and the ghosts; which live ones are
# across the viewport's width (the path runs on below a pane shorter than the graph)
LIVE = (
    "(root) => {"
    + VIEWPORT
    + """  const inside = (n) => { const b = n.getBoundingClientRect();
    return b.left >= v.left - 1 && b.right <= v.right + 1 && b.top >= v.top - 1 && b.bottom <= v.bottom + 1; };
  const nodes = [...svg.querySelectorAll('g.node')];
  const live = nodes.filter(n => !n.textContent.includes('\u2702'));
  const across = (n) => { const b = n.getBoundingClientRect();
    return b.left >= v.left - 1 && b.right <= v.right + 1; };
  return {live: live.length, live_inside: live.filter(inside).length,
          live_across: live.filter(across).length,
          ghosts: nodes.length - live.length, min_label_px: Math.min(...[...svg.querySelectorAll(
            'g.node text')].map(t => parseFloat(getComputedStyle(t).fontSize))) * scale};
}"""
)


@pytest.mark.ui
def test_first_view_keeps_the_live_path_in_view(sized_lab: tuple[str, LabPage]) -> None:
    """Lesson 02's model: one live path and five modules whose parameters get no gradient, a
    row of ghosts wider than the pane at readable labels. The first view opened on that row and
    cut the live path off at the pane's left edge (the ghosts were the busiest part of the top
    band, and the "worst status" to find); it opens on the live path, none of it cut off."""
    facts = drawn_facts(sized_lab, "ghosts", GHOSTS, LIVE)
    assert facts["ghosts"] == 10 and facts["live"] > 0, facts
    assert facts["live_across"] == facts["live"], facts  # none off to the left or right
    assert facts["live_inside"] >= facts["live"] - 2, facts  # the top of the path in view
    assert facts["min_label_px"] >= 9.95, facts
