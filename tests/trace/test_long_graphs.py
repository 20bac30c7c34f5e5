"""Long autograd graphs: any graph the user's own backward survives, a run survives.

Each case runs in a subprocess, so a segfault fails the test instead of killing pytest. The
subprocess gets a 2 MiB stack (a quarter of the usual 8 MiB main-thread stack) so that a C-level
recursion over the graph (releasing a long chain's Python references leaf side first) crashes
at these sizes on every platform; the user's own forward + backward + release of the same graph
runs first in the same process, under the same limit, and must survive it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")  # POSIX only: the stack limit

STACK_BYTES = 2 * 1024 * 1024

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from torch import nn
    from gradviz_widgets import GradExplorer

    class Chain(nn.Module):
        '''x * w, then `n` elementwise multiplications: one autograd chain of n + 2 ops.'''
        def __init__(self, n):
            super().__init__()
            self.n = n
            self.w = nn.Parameter(torch.full((4,), 0.5))
        def forward(self, x):
            h = x * self.w
            for _ in range(self.n):
                h = h * 1.0001
            return h.sum()

    class Unrolled(nn.Module):
        '''One small RNNCell called `steps` times on the same input.'''
        def __init__(self, steps):
            super().__init__()
            self.cell = nn.RNNCell(2, 3)
            self.steps = steps
        def forward(self, x):
            h = x.new_zeros(x.shape[0], 3)
            for _ in range(self.steps):
                h = self.cell(x, h)
            return h.sum()

    kind = sys.argv[1]
    for flow, size in ((False, int(sys.argv[2])), (True, int(sys.argv[3]))):
        torch.manual_seed(0)
        model = Chain(size) if kind == "chain" else Unrolled(size)
        x = torch.randn(1, 4) if kind == "chain" else torch.randn(1, 2)
        loss = model(x)
        loss.backward()
        del loss  # the user's own release of the graph
        expected = {n: p.grad.norm().item() for n, p in model.named_parameters()}
        print(json.dumps({"user": expected, "flow": flow}), flush=True)
        ex = GradExplorer(model, x, track_flow=flow)
        report = ex.run()
        print(json.dumps({"flow": flow, "norms": report.param_norms,
                          "nodes": len(ex.graph.nodes)}), flush=True)
        ex.close()
""")


def _limit_stack() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    limit = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (limit, hard))


#: (kind, size without flow tracking, size with it): per-edge flow costs ~1 ms per node on a
#: CPU, so the unrolled cell is shorter with it on (still far past what recursion survives)
CASES = [("chain", 20_000, 20_000), ("rnn_cell", 12_000, 4_000)]


@pytest.mark.parametrize(("kind", "size", "flow_size"), CASES)
def test_long_graph_survives_and_norms_match_backward(kind: str, size: int, flow_size: int) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, kind, str(size), str(flow_size)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        preexec_fn=_limit_stack,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    users = [line for line in lines if "user" in line]
    runs = [line for line in lines if "norms" in line]
    assert done.returncode == 0 or len(users) > len(runs), (
        f"the user's own backward did not complete (rc {done.returncode}): {done.stderr[-2000:]}"
    )
    assert done.returncode == 0, (
        f"the run died (rc {done.returncode}, -11 is a segfault) on a graph the user's own "
        f"backward survived, after {len(runs)} of 2 runs: {done.stderr[-2000:]}"
    )
    assert [r["flow"] for r in runs] == [False, True]
    for user, run, n in zip(users, runs, (size, flow_size)):
        assert run["nodes"] > n
        assert run["norms"].keys() == user["user"].keys()
        for name, norm in user["user"].items():
            assert run["norms"][name] == pytest.approx(norm, rel=1e-4), (run["flow"], name)
