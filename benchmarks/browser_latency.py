"""Click -> updated view latency in real JupyterLab + headless Chromium (issue 20 item 7).

    python -m benchmarks.browser_latency                 # 10 clicks per model
    python -m benchmarks.browser_latency --repeats 3 --out-dir out/latency

Per model (the quickstart's dead-branch network, a 4-layer GPT-2 from a transformers config,
a width-8 ResNet-18, the 1,000-layer Linear chain at full depth), one notebook at 1280x800
with the file browser open: each click on a graph node toggles a backward hook on its
module, so each click re-runs. Per click we record the wall time from the click to the page
showing a new graph and a new status line (the JS in tests/ui/test_readable_ui.py), and the
re-run's own time (`ex.report.duration_s` of the newest report, read from the kernel after the
click). Targets: median <= 250 ms on the quickstart, <= 3 s on the chain (issue 21), <= the
re-run's own time + 250 ms on the others. The result goes into `benchmarks.json` under
"browser_latency" and benchmarks.md is re-rendered from the json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.util import log

ROOT = Path(__file__).resolve().parent.parent
UI = ROOT / "tests" / "ui"
QUICK_LIMIT_MS = 250.0
OVERHEAD_LIMIT_MS = 250.0

SETUP = """import json
import torch
from torch import nn
from gradviz_widgets import GradExplorer
torch.manual_seed(0)
"""
# name -> (notebook cell, module whose op node is clicked, description); the larger models fold
# at depth 2 (their first view at 1280x800 is the depth-0 overview, with no module op to click)
MODELS: dict[str, tuple[str, str, str]] = {
    "quickstart": (
        """from gradviz_widgets.examples import dead_branch_example
net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)""",
        "gate",
        "the quickstart's dead-branch network (`dead_branch_example()`)",
    ),
    "gpt2": (
        """from transformers import GPT2Config, GPT2LMHeadModel
cfg = GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=64, n_positions=16,
                 bos_token_id=0, eos_token_id=0)
net = GPT2LMHeadModel(cfg)
ids = torch.randint(0, 64, (2, 16))
ex = GradExplorer(net, {"input_ids": ids, "labels": ids})""",
        "transformer.wte",
        "transformers `GPT2LMHeadModel`, n_layer=4, n_embd=64, vocab 64, 2x16 tokens, "
        "loss via `labels=`",
    ),
    "resnet18_w8": (
        """from gradviz_widgets.examples.cnn import resnet18
net = resnet18(num_classes=10, width=8)
x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)""",
        "fc",
        "`resnet18(num_classes=10, width=8)`, input 2x3x32x32, CrossEntropyLoss",
    ),
    "chain1000_full": (
        """chain = nn.Sequential(*[nn.Linear(16, 16) for _ in range(1000)])
ex = GradExplorer(chain, torch.randn(4, 16))""",
        "0",
        "`nn.Sequential` of 1,000 `Linear(16, 16)`, input 4x16, drawn at full depth "
        "(every op node: ~4,000 nodes on the page)",
    ),
}
#: fold depth set before the clicks (none: the first view as it opens)
FOLDS: dict[str, str | None] = {"quickstart": None, "chain1000_full": "'full'"}
#: fixed click -> view ceilings (issue 21: the chain at full depth within 3 s); the others are
#: held to their re-run + OVERHEAD_LIMIT_MS
FIXED_LIMIT_MS = {"quickstart": QUICK_LIMIT_MS, "chain1000_full": 3000.0}
CLOSE_ALL = """async () => {
  const app = window.jupyterapp;
  app.shell.closeAll();
  await app.serviceManager.sessions.shutdownAll();
  await new Promise(r => setTimeout(r, 1500));
}"""


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def target_ms(name: str, rerun_ms: float) -> float:
    """The click -> view ceiling: 250 ms on the quickstart, 3 s on the chain at full depth,
    re-run + 250 ms on the others."""
    return FIXED_LIMIT_MS.get(name, rerun_ms + OVERHEAD_LIMIT_MS)


def summarize(name: str, clicks: list[float], reruns: list[float]) -> dict[str, Any]:
    """Medians, the overhead (median of click - re-run per click) and the target check."""
    med_click, med_rerun = statistics.median(clicks), statistics.median(reruns)
    limit = target_ms(name, med_rerun)
    return {
        "click_ms": [round(t, 1) for t in clicks],
        "rerun_ms": [round(t, 1) for t in reruns],
        "median_click_ms": round(med_click, 1),
        "median_rerun_ms": round(med_rerun, 1),
        "overhead_ms": round(statistics.median(c - r for c, r in zip(clicks, reruns)), 1),
        "target_ms": round(limit, 1),
        "target": f"≤ {limit:.0f} ms" if name in FIXED_LIMIT_MS else "≤ re-run + 250 ms",
        "met": med_click <= limit,
    }


def measure_model(browser: Any, server: Any, name: str, repeats: int) -> dict[str, Any]:
    """Open the model's notebook at 1280x800 and click one node ``repeats`` times."""
    from harness import LabPage
    from test_readable_ui import CLICKS, open_and_run, py

    cell, module, description = MODELS[name]
    load_start = load()
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(60_000)
    lab = LabPage(server, context.new_page())
    try:
        depth = FOLDS.get(name, "2")
        fold = "" if depth is None else f"w.controls.depth_box.value = {depth}\n"
        open_and_run(lab, f"latency_{name}.ipynb", [SETUP + cell, f"w = ex.show()\n{fold}w"], 180)
        if depth == "'full'":
            _wait_for_drawing(lab)
        node = py(
            lab,
            f"next((n.id for n in w.view.nodes if n.kind == 'op' and n.module == {module!r}),"
            " None) or next(n.id for n in w.view.nodes if n.kind == 'op'"
            " and n.module in dict(net.named_modules()))",
        )
        key = py(lab, f"next(k for k, v in w.pane.key_map.items() if v == {node!r})")
        clicks, reruns = [], []
        explorers = lab.page.evaluate("() => document.querySelectorAll('.gv-explorer').length")
        if explorers != 1:
            raise RuntimeError(f"{explorers} explorer views on the page, expected 1")
        for i in range(repeats):
            clicks += lab.page.evaluate(CLICKS, [key, 1, 120_000])
            reruns.append(py(lab, "ex.report.duration_s * 1000"))
            log(f"  {name} click {i + 1}: {clicks[-1]:.0f} ms, re-run {reruns[-1]:.0f} ms")
        status = lab.page.evaluate(
            "() => document.querySelector('.gv-explorer .gvw-status').textContent"
        )
    except Exception:
        lab.screenshot(f"browser_latency_{name}_failed")
        raise
    finally:
        lab.save_logs(f"browser_latency_{name}")
        # the next model's page must not restore this notebook (its view would be found first)
        lab.page.evaluate(CLOSE_ALL)
        context.close()
    row = {"description": description, "node": node, "last_status": status}
    return row | {"load_start": load_start, "load_end": load()} | summarize(name, clicks, reruns)


def _wait_for_drawing(lab: Any) -> None:
    """Until the page draws every node of the widget's view (a full-depth chain takes seconds
    to lay out before the first click can be measured)."""
    from test_readable_ui import py

    drawn = py(lab, "sum(1 for n in w.view.nodes if n.kind != 'accumulate')")
    lab.page.wait_for_function(
        f"() => document.querySelectorAll('.gv-explorer svg g.node').length >= {drawn}",
        timeout=180_000,
    )


def run_all(names: list[str], repeats: int) -> tuple[dict[str, Any], dict[str, str]]:
    """One lab server and one browser for every model; returns rows and versions."""
    sys.path.insert(0, str(UI))
    import jupyterlab
    from harness import CHROMIUM, CHROMIUM_ARGS, JupyterLabServer
    from playwright.sync_api import sync_playwright

    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gvw-latency-") as tmp:
        server = JupyterLabServer(Path(tmp))
        server.start()
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                versions = {"chromium": browser.version, "jupyterlab": jupyterlab.__version__}
                for name in names:
                    log(f"browser latency: {name} x{repeats}")
                    rows[name] = measure_model(browser, server, name, repeats)
                browser.close()
        finally:
            server.stop()
    return rows, versions


def markdown_section(section: dict[str, Any]) -> list[str]:
    """The "Click latency in the browser" section of benchmarks.md (nothing when not measured)."""
    if not section:
        return []
    meta, rows = section["meta"], section["models"]
    L = ["## Click latency in the browser", ""]
    L.append(
        f"Generated by `{meta['command']}` on {meta['date']}: real JupyterLab "
        f"{meta['jupyterlab']} in headless Chromium {meta['chromium']} at "
        f"{meta['viewport']} with the file browser open (the quickstart in its first view, the "
        f"chain at full depth, the others folded at depth 2), {meta['repeats']} clicks per model on one graph node (each click toggles a backward hook on its module, so each click "
        "re-runs). *click → view*: from the click to the page showing a new graph and a new "
        "status line; *re-run*: the newest report's `duration_s`, read from the kernel after "
        "each click; *overhead* = median of click − re-run per click. Load average at start / "
        f"end: {meta['load_start']} / {meta['load_end']}."
    )
    L.append("")
    L.append(
        "| model | node clicked | click → view (median) | re-run (median) | overhead | "
        "target | met |"
    )
    L.append("|---|---|--:|--:|--:|--:|---|")
    for name, r in rows.items():
        L.append(
            f"| {name} | `{r['node']}` | **{r['median_click_ms']:.0f} ms** | "
            f"{r['median_rerun_ms']:.0f} ms | {r['overhead_ms']:.0f} ms | "
            f"{r['target']} ({r['target_ms']:.0f} ms) | {'✓' if r['met'] else '✗'} |"
        )
    L.append("")
    L += [f"- {name}: {r['description']}" for name, r in rows.items()]
    L.append("")
    return L


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS)
    )
    ap.add_argument("--repeats", type=int, default=10, help="clicks per model (default 10)")
    ap.add_argument("--out-dir", default=str(ROOT / "docs"))
    args = ap.parse_args(argv)
    from benchmarks.report_md import write_section

    command = "python -m benchmarks.browser_latency " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    load_start = load()
    rows, versions = run_all(args.models.split(","), args.repeats)
    meta = {
        "command": command.strip(),
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "repeats": args.repeats,
        "viewport": "1280x800",
        "load_start": load_start,
        "load_end": load(),
        **versions,
    }
    section = {"meta": meta, "models": rows}
    written = write_section(Path(args.out_dir), "browser_latency", section, markdown_section)
    log(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
