"""Wrapped models: torch.compile and DistributedDataParallel (world size 1, gloo)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gradviz_widgets import GradExplorer
from gradviz_widgets.errors import GradExplorerError

from .models import Case, ce
from .reference import reference
from .state import diff, optimizer_problems, snapshot

X, Y = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 1])
COMPILE_BUDGET_S = 20


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _norms_match(report, ref: dict, names: list[str]) -> None:
    assert list(report.param_norms) == names
    for name, (n, r) in zip(names, ref.items()):
        got = report.param_norms[name]
        assert (got is None) == (r is None), (n, got, r)
        if r is not None:
            assert math.isclose(got, r[0], rel_tol=1e-5, abs_tol=1e-12), (n, got, r[0])


def test_compiled_model_explores_the_original_or_refuses() -> None:
    """torch.compile wraps the module in OptimizedModule; exploring must not compile or trace it
    into something else, and must leave the wrapper and the original bitwise as they were."""
    model = mlp()
    compiled = torch.compile(model, backend="eager")  # compiles lazily: nothing runs here
    ref, _ = reference(Case(model, X, ce, Y))
    before = snapshot(compiled)
    ex = GradExplorer(compiled, X, loss_fn=ce, target=Y)
    try:
        report = ex.run()
    except GradExplorerError:
        report = None
    assert diff(before, snapshot(compiled)) == []
    ex.close()
    assert diff(before, snapshot(compiled)) == []
    if report is not None:
        names = list(report.param_norms)  # the wrapper is see-through: the module's own names
        assert names == [n for n, _ in model.named_parameters()], report.param_norms
        _norms_match(report, ref, list(report.param_norms))


COMPILED_RUN = textwrap.dedent("""
    import copy, torch
    from torch import nn
    from gradviz_widgets import GradExplorer
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="eager")
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 1])
    nn.functional.cross_entropy(twin(x), y).backward()
    nn.functional.cross_entropy(compiled(x), y).backward()  # compiled before exploring
    first = [p.grad.clone() for p in model.parameters()]
    try:
        GradExplorer(compiled, x, loss_fn=nn.functional.cross_entropy, target=y).run()
    except Exception as e:
        print("explorer:", type(e).__name__)
    for p in model.parameters():
        p.grad = None
    nn.functional.cross_entropy(compiled(x), y).backward()  # and still right afterwards
    for a, b, p in zip(first, twin.parameters(), model.parameters()):
        assert torch.equal(a, p.grad) and torch.allclose(a, b.grad), "compiled grads changed"
    print("OK")
""")


def test_compiled_model_still_trains_after_exploring() -> None:
    """Needs a real torch.compile run (eager backend); skipped where that is too slow here."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", COMPILED_RUN],
            capture_output=True,
            text=True,
            timeout=COMPILE_BUDGET_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        reason = f"torch.compile (eager backend) took over {COMPILE_BUDGET_S} s on this machine"
        print(reason)
        pytest.skip(reason)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr
    assert "explorer:" not in done.stdout or "GradExplorerError" in done.stdout, done.stdout


def test_data_parallel_without_gpus() -> None:
    model = mlp()
    wrapped = nn.DataParallel(model)
    ref, _ = reference(Case(wrapped, X, ce, Y))
    before = snapshot(wrapped)
    ex = GradExplorer(wrapped, X, loss_fn=ce, target=Y)
    _norms_match(ex.run(), ref, [n for n, _ in model.named_parameters()])  # no "module."
    ex.close()
    assert diff(before, snapshot(wrapped)) == []


@pytest.fixture
def process_group(tmp_path):
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_world_size_one(process_group) -> None:
    inner = mlp()
    twin_inner = mlp()  # same seed: same weights
    ddp, twin = DistributedDataParallel(inner), DistributedDataParallel(twin_inner)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    before = snapshot(ddp)
    ex = GradExplorer(ddp, X, loss_fn=ce, target=Y)
    report = ex.run()
    assert diff(before, snapshot(ddp)) + optimizer_problems(opt, ddp) == []
    ex.close()
    assert diff(before, snapshot(ddp)) == []

    with torch.random.fork_rng():
        torch.manual_seed(0)
        ce(twin(X), Y).backward()
    ref = {n: (p.grad.double().norm().item(), False) for n, p in twin.named_parameters()}
    _norms_match(report, ref, [n.removeprefix("module.") for n in ref])  # see-through wrapper
    assert set(report.param_status.values()) == {"healthy"}
    # the reducer still expects exactly one backward per forward: a real step works as before
    ce(ddp(X), Y).backward()
    for (n, p), (_, q) in zip(ddp.named_parameters(), twin.named_parameters()):
        assert torch.equal(p.grad, q.grad), f"{n}: DDP step after exploring differs"
