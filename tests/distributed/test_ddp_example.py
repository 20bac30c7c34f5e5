"""The DDP lesson runs as a script: DDP raises, then the explorer names parameters, ranks, reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

TIMEOUT_S = 150


def test_ddp_unused_example_names_parameters_ranks_and_reason() -> None:
    cmd = [
        sys.executable,
        "-W",
        "ignore",
        "-m",
        "gradviz_widgets.examples.ddp_unused",
        "--start-method",
        "forkserver",
        "--timeout",
        str(TIMEOUT_S - 30),
    ]
    out = run_ranks_command(cmd, {"OMP_NUM_THREADS": "1"}, "the example")
    for rank in (0, 1):
        assert (
            f"rank {rank}, step 1: RuntimeError: Expected to have finished reduction in the "
            "prior iteration"
        ) in out
        assert f"did not receive grad for rank {rank}" in out
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line.startswith("   ") and line.split()[0].endswith((".weight", ".bias"))
    }
    assert rows["pos_head.weight"][0] == "healthy"
    assert rows["pos_head.weight"][2:] == ["none", "(never", "called)"]
    assert rows["neg_head.weight"][:3] == ["none", "(never", "called)"]
    assert rows["stem.weight"][0] == rows["stem.weight"][2] == "healthy"
    assert (
        "pos_head.weight, pos_head.bias get no gradient on rank 1 (never called: a "
        "data-dependent branch"
    ) in out
    assert "neg_head.weight, neg_head.bias get no gradient on rank 0 (never called" in out
    assert "find_unused_parameters=False: it raises" in out


def test_ddp_watch_example_under_torchrun(tmp_path) -> None:
    """GradWatch on 2 ranks started by torchrun, as users start them: per-rank folders, the
    rank column, norms equal across ranks, the heads named in a rank_divergence anomaly."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("no torchrun next to this Python")
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", "-m"]
    cmd += ["gradviz_widgets.examples.ddp_watch", "--folder", str(tmp_path), "--timeout", "60"]
    out = run_ranks_command(cmd, {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}, "torchrun")
    (run,) = tmp_path.iterdir()  # one run, both ranks in it
    assert run.name.startswith("run-") and sorted(p.name for p in run.iterdir()) == [
        "rank0",
        "rank1",
    ]
    assert "ranks [0, 1], 48 rows" in out
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("stem.weight"))
    assert row[1] == row[2]  # DDP averaged: the same norm on both ranks
    assert "pos_head.weight: a gradient of its own on rank 0, none on rank 1" in out
    assert "neg_head.weight: a gradient of its own on rank 1, none on rank 0" in out


def run_ranks_command(cmd: list[str], env: dict[str, str], what: str) -> str:
    """Run `cmd` (which starts ranks) and return its output; it has its own session, so on a
    timeout the command and every rank it started are killed together."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{what} did not finish in {TIMEOUT_S} s")
    assert proc.returncode == 0, out[-3000:]
    return out
