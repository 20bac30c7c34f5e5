"""Readable by default and fast, in real JupyterLab at 1280x800 with the file browser open.

* graph labels >= 10 px on screen in the first view, no sideways scrolling of the output,
  toolbar labels not cut, chart tick labels of a 150-parameter model not overlapping, no
  plotly colour warnings;
* click -> new graph + chart + readout latency (medians to test-artifacts/latency.json);
* wheel zoom frame rate on the 1,000-layer Linear chain at full depth (test-artifacts/fps.json).
"""

from __future__ import annotations

import json
import statistics

import pytest
from harness import ARTIFACTS, LabPage, py

SETUP = """import json
import torch
from torch import nn
from gradviz_widgets import GradExplorer
"""
QUICKSTART = (
    SETUP
    + """from gradviz_widgets.examples import dead_branch_example
net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()
torch.manual_seed(0)
ex150 = GradExplorer(nn.Sequential(*[nn.Linear(4, 4) for _ in range(75)]), torch.randn(2, 4))
w150 = ex150.show()"""
)
CHAIN = (
    SETUP
    + """torch.manual_seed(0)
chain = nn.Sequential(*[nn.Linear(16, 16) for _ in range(1000)])
ex = GradExplorer(chain, torch.randn(4, 16))
w = ex.show()"""
)

# smallest on-screen font size of the graph's node labels (font-size x the svg's scale)
LABEL_PX = """(root) => {
  const svg = root.querySelector('.gvw-viewport > svg');
  const scale = svg.getBoundingClientRect().width / svg.width.baseVal.value;
  const sizes = [...svg.querySelectorAll('g.node text')].map(t => parseFloat(getComputedStyle(t).fontSize));
  return Math.min(...sizes) * scale;
}"""
CUT_LABELS = """(root) => [...root.querySelectorAll(
    '.gv-toolbar .widget-label, .gv-toolbar button, .gv-toolbar .widget-toggle-button')]
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
  .map(e => e.textContent.trim() || e.title)"""
OVERLAPS = """(plot) => {
  const boxes = [...plot.querySelectorAll('.ytick text')].map(t => t.getBoundingClientRect())
    .filter(b => b.height > 0).sort((a, b) => a.top - b.top);
  let bad = 0;
  for (let i = 1; i < boxes.length; i++) if (boxes[i].top < boxes[i - 1].bottom - 0.5) bad++;
  return {count: boxes.length, overlapping: bad};
}"""
# click node `key` n times; time until the page shows a new graph and a new status line
CLICKS = """async ([key, n, limitMs]) => {
  const root = document.querySelector('.gv-explorer');
  const vp = root.querySelector('.gvw-viewport');
  const times = [];
  for (let i = 0; i < n; i++) {
    const renders0 = vp.dataset.renders;
    const status = root.querySelector('.gvw-status');
    const text0 = status.textContent;
    const readout = root.querySelector('.gv-readout').parentElement;
    const el = vp.querySelector(`g.node[data-key="${key}"]`);
    const t0 = performance.now();
    el.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    await new Promise((resolve, reject) => {
      const tick = () => {
        if (vp.dataset.renders !== renders0 && status.textContent !== text0
            && status.dataset.level !== 'busy' && readout.querySelector('.gv-readout')) resolve();
        else if (performance.now() - t0 > limitMs) reject(new Error('no new state'));
        else requestAnimationFrame(tick);
      };
      tick();
    });
    times.push(performance.now() - t0);
    await new Promise(r => setTimeout(r, 50));
  }
  return times;
}"""
# n synthetic wheel events, one per frame, alternating zoom out / in over the middle
WHEEL_FPS = """async (n) => {
  const vp = document.querySelector('.gv-explorer .gvw-viewport');
  const r = vp.getBoundingClientRect();
  const frame = () => new Promise(requestAnimationFrame);
  await frame();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    vp.dispatchEvent(new WheelEvent('wheel', {deltaY: (i % 20) < 10 ? 60 : -60, bubbles: true, ctrlKey: true,
      cancelable: true, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2}));
    await frame();
  }
  const fps = n * 1000 / (performance.now() - t0);
  return {fps, dom: document.getElementsByTagName('*').length,
          heapMB: (performance.memory?.usedJSHeapSize ?? 0) / 1048576};
}"""


def open_and_run(lab: LabPage, name: str, cells: list[str], nodes_timeout: float = 90) -> None:
    lab.notebook(name, cells)
    lab.open_notebook(name)
    lab.page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
    lab.run_all()
    lab.page.wait_for_function(
        "() => document.querySelectorAll('.gv-explorer .gvw-viewport > svg g.node').length > 0",
        timeout=nodes_timeout * 1000,
    )


def record(name: str, values: dict) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, **values}, indent=1))


def median_click_ms(lab: LabPage, node_id: str, n: int, limit_s: float) -> list[float]:
    key = py(lab, f"next(k for k, v in w.pane.key_map.items() if v == {node_id!r})")
    return lab.page.evaluate(CLICKS, [key, n, limit_s * 1000])


@pytest.mark.ui
def test_readable_at_1280x800_and_quick_clicks(small_lab: LabPage) -> None:
    lab = small_lab
    open_and_run(lab, "readable.ipynb", [QUICKSTART, "w", "w150"])
    assert lab.page.locator("#filebrowser").is_visible()
    lab.page.wait_for_function(
        "() => document.querySelectorAll('.gv-explorer').length === 2", timeout=60_000
    )
    first, second = lab.page.locator(".gv-explorer").nth(0), lab.page.locator(".gv-explorer").nth(1)
    second.locator(".gvw-viewport > svg g.node").first.wait_for(timeout=60_000)
    lab.screenshot("readable_1280x800")

    for root in (first, second):
        assert root.evaluate(LABEL_PX) >= 9.95, "graph labels below 10 px"
        assert root.evaluate(CUT_LABELS) == []
        sideways = root.evaluate(
            "(r) => { const o = r.closest('.jp-OutputArea-output');"
            " return [o.scrollWidth, o.clientWidth]; }"
        )
        assert sideways[0] <= sideways[1] + 1, sideways
    # 150 bars: one row each, tick labels apart (Plotly may still be drawing: wait for it)
    plot = second.locator(".js-plotly-plot").first
    plot.wait_for(timeout=60_000)
    plot.evaluate(
        "(p) => new Promise((ok, no) => { const t0 = performance.now(); const tick = () => {"
        " if (p.querySelectorAll('.ytick text').length >= 150) ok();"
        " else if (performance.now() - t0 > 60000) no(new Error('ticks not drawn'));"
        " else requestAnimationFrame(tick); }; tick(); })"
    )
    ticks = plot.evaluate(OVERLAPS)
    assert ticks["count"] >= 150 and ticks["overlapping"] == 0, ticks
    assert not [m for m in lab.console if "Invalid color specifier" in m]

    times = median_click_ms(lab, "gate/AddmmBackward0#0", 6, 30)
    record(
        "latency.json",
        {
            "quickstart_click_ms": [round(t) for t in times],
            "quickstart_median_ms": round(statistics.median(times)),
        },
    )
    assert statistics.median(times) <= 1000, times  # target 250 ms; lenient on a loaded box


@pytest.mark.ui
def test_chain_1000_full_depth_zoom_fps_and_click_latency(small_lab: LabPage) -> None:
    lab = small_lab
    open_and_run(lab, "chain.ipynb", [CHAIN, "w"])
    lab.execute("w.controls.depth_box.value = 'full'")
    drawn = py(lab, "sum(1 for n in w.view.nodes if n.kind != 'accumulate')")
    assert drawn >= 1000
    lab.page.wait_for_function(
        f"() => document.querySelectorAll('.gv-explorer svg g.node').length === {drawn}",
        timeout=120_000,
    )
    assert lab.page.locator(".gv-explorer").first.evaluate(LABEL_PX) >= 9.95
    lab.page.locator(".gv-explorer .gvw-fit").click()  # worst case: every node on screen
    perf = lab.page.evaluate(WHEEL_FPS, 60)
    record("fps.json", {"chain_1000_full_depth": {**perf, "nodes": drawn}})
    assert perf["fps"] >= 10, perf  # target 20; lenient floor on a loaded machine

    target = py(lab, "next(n.id for n in w.view.nodes if n.kind == 'op' and n.module)")
    # three clicks (a hook toggled: the drawing is unchanged, so no new layout); recorded, with a
    # ceiling that catches a hang (target 3 s)
    times = median_click_ms(lab, target, 3, 90)
    record(
        "latency.json",
        {
            "chain_1000_click_ms": [round(t) for t in times],
            "chain_1000_median_ms": round(statistics.median(times)),
        },
    )
    assert statistics.median(times) <= 90_000, times
