"""The benchmark suite's smoke mode runs end to end and its JSON has every model and column.

Benchmarks are not tests: this only checks that `python -m benchmarks.run --smoke` (tiny zoo,
one repeat, caps of a few seconds) works and writes a complete table, not any timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import COLUMNS, MODES, STATUS_COLUMNS  # noqa: E402
from gradviz_widgets.examples import ZOO_NAMES  # noqa: E402


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--out-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "benchmarks.json").read_text())
    return result, (out / "benchmarks.md").read_text()


def test_every_model_and_column(smoke) -> None:
    result, _ = smoke
    assert result["errors"] == []
    assert result["columns"] == list(COLUMNS)
    assert list(result["models"]) == list(ZOO_NAMES)
    for name, row in result["models"].items():
        missing = [c for c in COLUMNS if c not in row]
        assert not missing, (name, missing)
        for col in STATUS_COLUMNS:
            status = row[f"{col}_status"]
            assert (row[col] is not None) == (status == "ok"), (name, col, status)


def test_core_columns_are_measured(smoke) -> None:
    result, _ = smoke
    for name, row in result["models"].items():
        for col in (
            "bare_ms",
            "run_ms",
            "hooks_ms",
            "run_ratio",
            "hooks_ratio",
            "norms_fused_ms",
            "norms_loop_ms",
            "nodes_full",
            "nodes_default",
            "dot_default_ms",
            "dot_full_ms",
        ):
            assert isinstance(row[col], (int, float)) and row[col] > 0, (name, col, row[col])
        assert row["host_syncs"] == 1 and row["host_syncs_hooks"] == 1, name
        assert row["norms_fused_syncs"] == 1 and row["norms_loop_syncs"] == row["norms_n"], name
        assert row["nodes_default"] <= row["nodes_full"], name
        assert row["mem_run_ratio_status"] == "ok", (name, row["mem_run_ratio_status"])
        for mode in MODES:
            assert row[f"mem_{mode}_peak_mib"] > 0, (name, mode)


def test_markdown_table(smoke) -> None:
    result, text = smoke
    assert text.startswith("# Benchmarks")
    for name in ZOO_NAMES:
        assert f"| {name} |" in text
    keys = {t["key"] for t in result["targets"]}
    assert keys == {
        "run_ratio",
        "hooks_ratio",
        "host_syncs",
        "run_to_svg_default",
        "run_to_svg_full_resnet50",
        "mem_ratio",
    }


def test_where_the_time_goes(smoke) -> None:
    result, text = smoke
    row = result["stages"]["models"]["seed"]
    for clock in ("ms", "cpu_ms"):
        assert set(row[clock]) == {"bare", "run", "view", "noflow", "hooks", "resident"}
        run = row[clock]["run"]
        assert {"prepare", "forward", "walk", "flow_hooks", "backward", "norms", "freeze"} <= set(
            run
        )
        assert "flow_hooks" not in row[clock]["noflow"]  # track_flow=False registers none
    assert row["paired_run_ratio"] > 0 and row["cpu_run_ratio"] > 0
    assert len(row["load"]) == 2
    assert set(row["faults"]) == {"bare", "run", "view", "noflow", "hooks", "resident"}
    assert row["paired_view_ratio"] > 0 and row["cpu_view_ratio"] > 0  # a click's re-run
    assert row["paired_resident_ratio"] > 0
    assert all(n >= 0 for n in row["faults"].values())
    assert "## Where the time goes" in text and "| seed |" in text.split("## Graph")[0]
    assert "a click's re-run" in text.split("## Graph")[0]
    # one thread whatever the suite runs under: the table the analysis quotes
    assert result["stages"]["meta"]["threads"] == 1 and "(1 torch thread," in text
