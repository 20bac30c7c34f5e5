"""Hostile names through every surface: user text is data, and every drawn node and cluster
resolves to its Python id, whatever the names of modules, output keys and loss functions."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.render.chart import figure_dict, plotly_text
from gradviz_widgets.render.dot import render_dot, svg_with_dot
from gradviz_widgets.render.readout import readout_html
from gradviz_widgets.vocabulary import html_text, plain_text

MARKUP = "<img src=x onerror=alert(1)>"
# every name torch's add_module accepts (it refuses only "" and names with ".")
HOSTILE = [
    MARKUP,
    "q\"uo'te",
    "back\\slash",
    "new\nline",
    "cr\rret",
    "nul\x00x",
    "esc\x1bx",
    "vt\x0bx",
    "&amp;lt;",
    "rtl\u202eevil",
    "at@1",
    "br{a}ce;",
    "中文",
    "\\N",
    "-->",
    "<!--<script>",  # would keep a <script> element open past its end tag, were it raw
]
# names torch refuses in add_module, but a model can still hold (self._modules[name] = ...)
FORCED = ["dot.ted"]
OUT_KEY = "<b>out</b><script>alert(2)</script>"


class Hostile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name in HOSTILE:
            self.add_module(name, nn.Linear(3, 3))
        self.nested = nn.ModuleDict({MARKUP: nn.Linear(3, 3), "new\nline": nn.Linear(3, 3)})
        for name in FORCED:
            self._modules[name] = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        for name, module in self._modules.items():
            if name != "nested":
                x = torch.tanh(module(x))
        for module in self.nested.values():
            x = module(x)
        return {OUT_KEY: x.square().mean(), "other": x.sum()}


def hostile_loss(out):
    return out[OUT_KEY]


hostile_loss.__name__ = "<svg onload=alert(3)>"


@pytest.fixture(scope="module")
def hostile():
    ex = GradExplorer(Hostile(), torch.randn(4, 3), loss_fn=hostile_loss)
    ex.run()
    yield ex
    ex.close()


def titles(svg: str, kind: str) -> list[tuple[str, str]]:
    return re.findall(rf'<g id="([^"]*)" class="{kind}">\s*<title>([^<]*)</title>', svg)


@pytest.mark.parametrize("depth", [None, 0, 1])
@pytest.mark.skipif(shutil.which("dot") is None, reason="system Graphviz not installed")
def test_dot_parses_and_every_element_resolves_to_its_python_id(hostile, depth):
    view = hostile.graph.view(depth)
    r = render_dot(view)
    svg = svg_with_dot(r.dot)
    nodes, clusters = titles(svg, "node"), titles(svg, "cluster")
    drawn = {n.id for n in view.nodes if n.kind != "accumulate"}
    assert {r.keys[gid] for gid, title in nodes} == drawn
    assert all(gid == title for gid, title in nodes)  # <title> is our key, never user text
    # a folded module's node sits in its parent's cluster: its own path is no cluster
    scopes = {
        path for n in view.nodes for path, _ in (n.scope[:-1] if n.kind == "module" else n.scope)
    }
    assert {r.keys[gid] for gid, _ in clusters} == scopes
    assert all(title == f"cluster_{gid}" for gid, title in clusters)
    if depth is None:
        assert {r.keys[gid] for gid, _ in clusters} >= {*HOSTILE, f"nested.{MARKUP}"}


def test_dot_has_no_control_or_bidi_characters(hostile):
    dot = render_dot(hostile.graph).dot
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", dot)
    assert not re.search(r'label="\\n', dot)
    assert "nul␀x" in dot and "esc␛x" in dot and "new␊line" in dot and "[U+202E]" in dot
    assert "&amp;amp;lt;" in dot  # Graphviz decodes entities in labels: shown as typed


def test_text_helpers():
    assert plain_text("a\x00b\x1b\x0b\r\n\u202e") == "a␀b␛␋␍␊[U+202E]"
    assert html_text(MARKUP) == "&lt;img src=x onerror=alert(1)&gt;"
    assert "<" not in html_text("<b>x</b><br>") and html_text("&amp;") == "&amp;amp;"


def no_markup(text: str) -> None:
    for bad in ("<img", "<svg onload", "<script", "<b>out", "<lambda>", "<br"):
        assert bad not in text, (bad, text)


def test_chart_ticks_and_hover_are_escaped(hostile):
    for mode in ("param", "module"):
        bar = figure_dict(hostile.report, mode)["data"][0]
        axis = bar["y"] if bar.get("orientation") == "h" else bar["x"]  # flat past 30 bars
        two_level = axis and isinstance(axis[0], list)
        ticks = axis[0] + axis[1] if two_level else axis
        for tick in ticks:
            no_markup(tick)
            assert not re.search("[\x00-\x1f\u202e]", tick)
        shown = [c[3] + c[4] for c in bar["customdata"]]
        for text in shown:
            no_markup(text)
        if mode == "param":  # the raw name stays for the bar-click lookup
            assert {c[0] for c in bar["customdata"]} == {p.name for p in hostile.report.params}
            assert plotly_text(f"{MARKUP}.weight") in {c[4] for c in bar["customdata"]}
            assert any("q\"uo'te" in t for t in ticks)  # Plotly shows &quot; literally


def test_readout_escapes_target_and_names(hostile):
    text = readout_html([], MARKUP, {MARKUP: "<i>x</i>"})
    no_markup(text)
    assert "&lt;img" in text


def click(w, node_id=None, key=None):
    msg = {
        "kind": "node_click",
        **({"id": node_id} if node_id is not None else {}),
        **({"key": key} if key is not None else {}),
    }
    w.pane._on_frontend_msg(w.pane, msg, [])


def test_widget_toolbar_status_and_clicks(hostile):
    hostile.clear_hooks()
    w = hostile.show(depth=None)
    no_markup(w.controls.loss_label.value)
    assert "&lt;svg onload=alert(3)&gt;" in w.controls.loss_label.value
    # every drawn node has info under its Python id, and its key maps to that id
    keyed = {k: v for k, v in w.pane.key_map.items() if k.startswith("n")}
    assert set(keyed.values()) == set(w.pane.nodes)
    for name in [*HOSTILE, *FORCED]:
        node = next(n for n in w.view.nodes if n.module == name and n.kind == "op")
        key = next(k for k, v in keyed.items() if v == node.id)
        click(w, key=key)  # a message naming only the key resolves too
        assert (name, "backward") in hostile.hooks, name
        assert w.pane.nodes[node.id]["hooked"] is True
        no_markup(w.readout.value)
    assert w.pane.status_level != "error", w.status_text
    hostile.clear_hooks()


def test_fold_and_unfold_by_module_path(hostile):
    w = hostile.show(depth=None)
    for name in ("at@1", MARKUP, "new\nline", "nul\x00x", "dot.ted"):
        w.pane._on_frontend_msg(w.pane, {"kind": "toggle_scope", "module": name}, [])
        folded = [n for n in w.view.nodes if n.kind == "module" and n.module == name]
        assert folded, name
        key = next(k for k, v in w.pane.key_map.items() if v == folded[0].id)
        assert w.pane.nodes[folded[0].id]["expandable"] == name and key.startswith("n")
        w.pane._on_frontend_msg(w.pane, {"kind": "toggle_scope", "module": name}, [])
        assert not any(n.kind == "module" and n.module == name for n in w.view.nodes), name


def test_lambda_loss_name_survives_in_the_loss_line():
    model = nn.Linear(3, 2)
    ex = GradExplorer(model, torch.randn(4, 3), loss_fn=lambda out: out.sum())
    w = ex.show()
    assert "&lt;lambda&gt;" in w.controls.loss_label.value
    no_markup(w.controls.loss_label.value)


def test_offline_pages_keep_every_script_element_closed(hostile, tmp_path):
    """Inside <script>, `<!--` then `<script` puts the HTML tokenizer in its escaped states,
    where the next `</script>` no longer ends the element: the page's data and the scripts
    after it are swallowed. Names reach the explorer's and the watch's page as data only."""
    from gradviz_widgets import GradWatch

    explorer_page = tmp_path / "explorer.html"
    hostile.export_html(explorer_page)
    model = Hostile()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with GradWatch(model, optimizer=opt, path=tmp_path / "runs") as watch:
        hostile_loss(model(torch.randn(4, 3))).backward()
        opt.step()
        watch_page = watch.export_html(tmp_path / "watch.html")
    for page in (explorer_page, watch_page):
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"<script[^>]*>(.*?)</script>", text, flags=re.S)
        assert blocks and text.count("<script") == len(blocks), page
        assert not any("<!--" in b.lower() for b in blocks), page
        assert not any("<script" in b.lower() for b in blocks), page
