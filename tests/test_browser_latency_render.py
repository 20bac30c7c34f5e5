"""benchmarks/browser_latency.py: the target check and the benchmarks.md section (no browser).

The measurement itself needs JupyterLab + Chromium and minutes: it is a benchmark, run by hand
(`python -m benchmarks.browser_latency`), not part of the suite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.browser_latency import markdown_section, summarize  # noqa: E402
from benchmarks.report_md import markdown  # noqa: E402


def test_targets_quickstart_absolute_others_relative_to_rerun() -> None:
    quick = summarize("quickstart", [240.0, 260.0, 230.0], [20.0, 25.0, 30.0])
    assert quick["median_click_ms"] == 240.0 and quick["target_ms"] == 250.0 and quick["met"]
    assert quick["overhead_ms"] == 220.0  # median of the per-click differences
    gpt2 = summarize("gpt2", [700.0, 500.0, 600.0], [300.0, 300.0, 400.0])
    assert gpt2["target_ms"] == 550.0 and not gpt2["met"]
    chain = summarize("chain1000_full", [2900.0, 3100.0, 2800.0], [400.0, 500.0, 450.0])
    assert chain["target_ms"] == 3000.0 and chain["met"] and chain["target"] == "≤ 3000 ms"


def test_section_renders_and_leaves_the_other_sections_alone() -> None:
    result = json.loads((ROOT / "docs" / "benchmarks.json").read_text())
    result.pop("browser_latency", None)
    before = markdown(result)
    row = summarize("quickstart", [200.0], [20.0])
    row |= {"description": "the quickstart", "node": "gate/AddmmBackward0#0"}
    meta = {
        "command": "python -m benchmarks.browser_latency",
        "date": "2026-12-02 03:00",
        "repeats": 1,
        "viewport": "1280x800",
        "load_start": "1.00 1.00 1.00",
        "load_end": "1.00 1.00 1.00",
        "chromium": "1.0",
        "jupyterlab": "4.0",
    }
    section = {"meta": meta, "models": {"quickstart": row}}
    lines = markdown_section(section)
    assert lines[0] == "## Click latency in the browser"
    assert "| quickstart | `gate/AddmmBackward0#0` | **200 ms** | 20 ms | 180 ms |" in "\n".join(
        lines
    )
    after = markdown({**result, "browser_latency": section})
    assert after.replace("\n".join(lines) + "\n", "") == before
