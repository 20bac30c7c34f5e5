"""GradWatch's live view while a loop trains, in real JupyterLab + headless Chromium at 1280x800
and 1920x1080, measured in the DOM: the figures fill the cell's width at their first draw
(Plotly drew them at its default 700 px before the view was in the page, and, as an anywidget,
was never told to resize), a step stands at the same x in both, labels of anomalies a few
steps apart do not overlap, and the lines list shows GPT-2-like names whole without pushing the
figures off screen."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from harness import LabPage, sized_page, wait_until

SETUP = """
import torch
from torch import nn
from gradviz_widgets import GradWatch

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.ModuleDict({"c_attn": nn.Linear(8, 8), "c_proj": nn.Linear(8, 8)})
    def forward(self, x, dead=False):
        out = self.attn["c_proj"](torch.tanh(self.attn["c_attn"](x)))
        return x + (out * 0.0 if dead else out)  # dead: its gradients are exactly zero

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict({"h": nn.ModuleList([Block() for _ in range(3)])})
        self.odd = nn.ModuleDict({"<img src=x onerror=__pwned=1>": nn.Linear(8, 8)})
    def forward(self, x, dead=-1):
        for k, block in enumerate(self.transformer["h"]):
            x = block(x, dead == k)
        odd = self.odd["<img src=x onerror=__pwned=1>"](x)
        return x + (odd * 0.0 if dead == 3 else odd)

torch.manual_seed(0)
model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
watch = GradWatch(model, optimizer=opt, path="runs/live_layout")
view = watch.show()
view
"""
TRAIN = """
import time
for step in range(300):
    # a block, then the next, then the hostile-named layer cut off a few steps apart:
    # zero-gradient anomalies at steps 40-46
    dead = (step - 40) // 2 if step in (40, 42, 44, 46) else -1
    loss = model(torch.randn(4, 8), dead=dead).pow(2).mean()
    opt.zero_grad(); loss.backward()
    opt.step()
    time.sleep(0.01)
watch.history(); view.refresh(force=True)
print("trained")
"""
MEASURE = """() => {
  const box = [...document.querySelectorAll('.gvw-watch-live')].pop();
  if (!box) return null;
  const plots = [...box.querySelectorAll('.js-plotly-plot')].map(gd => {
    const x = gd._fullLayout?.xaxis;
    return {width: gd.clientWidth, traces: (gd.data || []).length,
      svg: Number(gd.querySelector('.main-svg')?.getAttribute('width')),
      // where a step lands: the step axis's page offset, length and range
      axis: x ? [gd.getBoundingClientRect().left + x._offset, x._length, ...x.range] : null};
  });
  const sel = box.querySelector('select');
  const r = sel.getBoundingClientRect();
  const notes = [...box.querySelectorAll('.annotation')].map(a => {
    const b = a.getBoundingClientRect();
    return {text: a.textContent, box: [b.left, b.top, b.right, b.bottom]};
  });
  return {plots, notes, select: {client: sel.clientWidth, scroll: sel.scrollWidth, right: r.right},
          boxRight: box.getBoundingClientRect().right, pwned: window.__pwned ?? null};
}"""


def _overlaps(notes: list[dict]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(notes):
        for b in notes[i + 1 :]:
            p, q = a["box"], b["box"]
            if p[0] < q[2] - 0.5 and q[0] < p[2] - 0.5 and p[1] < q[3] - 0.5 and q[1] < p[3] - 0.5:
                out.append((a["text"], b["text"]))
    return out


@pytest.fixture(params=[(1280, 800), (1920, 1080)], ids=["1280x800", "1920x1080"])
def sized_lab(lab_server, browser, request) -> Iterator[LabPage]:  # noqa: ANN001
    with sized_page(lab_server, browser, request.param, request.node.name) as lab_page:
        yield lab_page


@pytest.mark.ui
def test_live_view_fills_its_cell_and_labels_stay_readable(sized_lab: LabPage) -> None:
    lab, page = sized_lab, sized_lab.page
    width = page.viewport_size["width"]
    name = f"live_layout_{width}.ipynb"
    lab.notebook(name, [SETUP, TRAIN])
    lab.open_notebook(name, timeout=120)
    lab.run_all()

    def drawn() -> dict | None:
        m = page.evaluate(MEASURE)
        return m if m and len(m["plots"]) == 2 and all(p["traces"] for p in m["plots"]) else None

    wait_until(drawn, 120, "the live figures drawn")
    # first draw, no resize of the window: each figure as wide as its cell (not Plotly's 700 px)
    try:
        fitted = wait_until(
            lambda: (
                (m := drawn()) and all(abs(p["svg"] - p["width"]) <= 2 for p in m["plots"]) and m
            ),
            10,
            "the figures fitted to the cell",
        )
    except TimeoutError as e:
        raise AssertionError(f"figures not fitted: {drawn()}") from e
    assert all(p["width"] > 700 for p in fitted["plots"])
    wait_until(lambda: "trained" in page.evaluate("document.body.innerText"), 180, "training")
    m = wait_until(lambda: (m := drawn()) and len(m["notes"]) >= 2 and m, 20, "anomaly labels")
    assert all(abs(p["svg"] - p["width"]) <= 2 for p in m["plots"])
    # a step stands at the same x in both figures (each had its own margins: ~130 px apart)
    heat, lines = (p["axis"] for p in m["plots"])
    for step in (heat[2], (heat[2] + heat[3]) / 2, heat[3]):
        at = [a[0] + (step - a[2]) / (a[3] - a[2]) * a[1] for a in (heat, lines)]
        assert abs(at[0] - at[1]) <= 2, (step, heat, lines)
    texts = [n["text"] for n in m["notes"]]
    merged = [t for t in texts if re.fullmatch(r"\d+ anomalies, steps 40-4\d", t)]
    assert len(merged) == 2, texts  # those at steps 40-46, one label on each figure
    assert _overlaps(m["notes"]) == []
    # the lines list: whole names, inside the view (the figures keep their width)
    sel = m["select"]
    assert sel["scroll"] <= sel["client"], sel
    assert sel["right"] <= m["boxRight"] + 1 <= width
    assert m["pwned"] is None  # a parameter's name is text everywhere
    lab.screenshot(f"live_layout_{width}")
    lab.screenshot(f"live_box_{width}", ".gvw-watch-live")
