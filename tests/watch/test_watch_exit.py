"""A script that ends without `watch.close()` (its end, an uncaught exception, Ctrl-C) still
records every step it took: the writer's queue is written at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.page import page_data

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from gradviz_widgets.watch import GradWatch
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    GradWatch(model, optimizer=opt, path=sys.argv[1], flush_s=30.0)  # no close(), no name
    how, steps = sys.argv[2], int(sys.argv[3])
    for i in range(steps):
        x = torch.randn(8, 10)
        if how == "nan" and i == steps - 1:
            x[0, 0] = float("nan")
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    if how == "raise":
        raise RuntimeError("the loop crashed")
    if how == "interrupt":
        raise KeyboardInterrupt
""")


@pytest.mark.parametrize("how", ["end", "raise", "interrupt", "nan"])
def test_every_step_is_written_without_close(tmp_path: Path, how: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(script), str(run), how, "120"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (done.returncode == 0) == (how in ("end", "nan")), done.stderr[-2000:]
    assert "could not finish" not in done.stderr
    recorded = GradWatch.open(run)
    h = recorded.history()
    assert sorted(h.step.unique()) == list(range(120))  # the queue held them all (flush_s=30)
    if how == "nan":  # the step that broke the run is there, and said
        assert [a.step for a in recorded.anomalies if a.kind == "nonfinite"] == [119]
    # a script an uncaught exception ended says so (it read as one that finished)
    crashed = {"raise": "RuntimeError: the loop crashed", "interrupt": "KeyboardInterrupt"}.get(
        how, ""
    )
    assert recorded.crashed == crashed and recorded.ended is True
    (info,) = recorded.runs
    assert info.crashed == crashed
    assert (f"ended by an uncaught {crashed}" in repr(info)) == bool(crashed)
    assert (f"(ended by an uncaught {crashed})" in page_data(recorded)["name"]) == bool(crashed)
    recorded.close()
