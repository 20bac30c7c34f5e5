"""A training process killed with SIGKILL loses at most its last second of records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gradviz_widgets.watch import GradWatch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = textwrap.dedent("""
    import sys, time, torch
    from torch import nn
    from gradviz_widgets.watch import GradWatch
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, path=sys.argv[1])
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    step = 0
    while True:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        print(step, time.time(), flush=True)
        step += 1
        time.sleep(0.005)
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_loses_at_most_the_last_second(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(run)], stdout=subprocess.PIPE, text=True, env=env
    )
    printed: list[tuple[int, float]] = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            line = proc.stdout.readline()
            step, at = line.split()
            printed.append((int(step), float(at)))
            if len(printed) > 20 and printed[-1][1] - printed[0][1] > 1.6:
                break
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.time()
    finally:
        proc.kill()
        proc.wait()
    h = GradWatch.open(run).history()
    steps = sorted(h.step.unique())
    assert steps == list(range(len(steps))), "steps are contiguous from 0"
    due = max(s for s, at in printed if at <= killed_at - 1.0)
    assert steps[-1] >= due, (steps[-1], due, printed[-1])
    assert len(h) == len(steps) * 4
