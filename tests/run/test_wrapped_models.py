"""Wrapped and special models (issue 9 item 6): each gives correct numbers or a GradExplorerError
that says what to do, never a raw exception or a silent wrong answer."""

from __future__ import annotations

import math
import os
import tempfile
import warnings

import pytest
import torch
from test_engine_trust import (
    CE,
    assert_norms_match,
    assert_same_state,
    explore_and_check,
    full_state,
    images,
    plain_norms,
    small_cnn,
)
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.run.freeze import CHECKPOINT_NO_GRAD


def test_fsdp2_model_is_refused_with_advice() -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if dist.is_initialized():
        pytest.skip("a process group is already running")
    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            model = small_cnn()
            fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
            with pytest.raises(GradExplorerError, match="FSDP.*unsharded copy"):
                GradExplorer(model, images()[0])
        finally:
            dist.destroy_process_group()


def test_compiled_model_explores_its_original_module() -> None:
    model, (x, y) = small_cnn(), images()
    compiled = torch.compile(model)
    reference = plain_norms(model, lambda m: CE(m(x), y))
    before = full_state(model)
    ex = GradExplorer(compiled, x, loss_fn=CE, target=y)
    ex.toggle_hook("1")  # the wrapper is see-through: names and paths are the module's
    report = ex.run()
    assert_norms_match(report, reference)
    assert not any(n.id.startswith(("_orig_mod", "module:_orig_mod")) for n in ex.graph.nodes)
    assert any("compiled._orig_mod" in f for f in report.notes)
    assert [e.target for e in ex.events] == ["1"]
    ex.close()
    assert_same_state(model, before)
    assert compiled._orig_mod is model


def test_compiled_submodule_is_refused() -> None:
    model = small_cnn()
    model[5] = torch.compile(model[5])
    with pytest.raises(GradExplorerError, match="torch.compile.*_orig_mod"):
        GradExplorer(model, images()[0])


def test_torchscript_models_are_refused_before_anything_runs() -> None:
    """torch.jit.script / trace, whole or as a submodule: a GradExplorerError saying to explore
    the Python module (it was a bare TypeError from the stand-in swap); the model untouched."""
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    scripted, x = torch.jit.script(model), torch.randn(4, 6)
    before = full_state(scripted)
    with pytest.raises(GradExplorerError, match="TorchScript.*Python module it was made from"):
        GradExplorer(scripted, x).run()
    assert_same_state(scripted, before)
    outer = nn.Sequential(torch.jit.trace(nn.Linear(6, 3), torch.randn(1, 6)), nn.Linear(3, 1))
    with pytest.raises(GradExplorerError, match="module '0' is a TorchScript module"):
        GradExplorer(outer, torch.randn(4, 6)).run()


def test_meta_device_model_is_refused() -> None:
    with torch.device("meta"):
        model = nn.Linear(3, 2)
    with pytest.raises(GradExplorerError, match="meta device.*to_empty"):
        GradExplorer(model, torch.randn(2, 3))


def test_uninitialised_lazy_module_is_refused() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(GradExplorerError, match="lazy.*model\\(x\\)"):
        GradExplorer(model, torch.randn(2, 3))
    model(torch.randn(2, 3))  # initialised by the user: fine
    _, report = explore_and_check(model, torch.randn(2, 3), runs=1)
    assert report.param_norms["0.weight"] > 0


def test_leaf_loss_unrelated_to_the_model_is_refused() -> None:
    ex = GradExplorer(
        nn.Linear(3, 1),
        torch.randn(2, 3),
        loss_fn=lambda out: torch.tensor(1.0, requires_grad=True),
    )
    with pytest.raises(GradExplorerError, match="leaf tensor"):
        ex.run()


class ReturnsItsParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.tensor(2.0))
        self.unused = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p


def test_loss_that_is_a_parameter() -> None:
    _, report = explore_and_check(ReturnsItsParameter(), torch.randn(2))
    assert report.param_norms["p"] == 1.0
    assert report.param_status["unused.weight"] == "none"


def test_complex_loss_is_refused_with_advice() -> None:
    model = nn.Linear(3, 2)
    ex = GradExplorer(model, torch.randn(2, 3), loss_fn=lambda out: (out * 1j).sum())
    with pytest.raises(GradExplorerError, match="complex.*abs"):
        ex.run()


class ComplexOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.polar(self.lin(x).abs(), self.lin(x))


def test_complex_output_without_loss_fn_is_refused() -> None:
    with pytest.raises(GradExplorerError, match="complex outputs.*loss_fn"):
        GradExplorer(ComplexOut(), torch.randn(2, 3)).run()
    _, report = explore_and_check(
        ComplexOut(), torch.randn(2, 3), loss_fn=lambda out: out.abs().pow(2).sum(), runs=1
    )
    assert report.param_status["lin.weight"] == "healthy"


class MixedPrecision(nn.Module):
    """A float16 head and a large float32 output (sum ~ 2e5, beyond float16's 65504)."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(4, 2).half()
        self.big = nn.Linear(4, 512)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.small(x.half()), self.big(x) + 400.0


def test_mixed_dtype_outputs_are_summed_without_overflow() -> None:
    torch.manual_seed(0)
    model, x = MixedPrecision(), torch.randn(2, 4)
    reference = plain_norms(model, lambda m: sum(t.sum(dtype=torch.float64) for t in m(x)))
    _, report = explore_and_check(model, x)
    assert math.isfinite(report.loss) and report.loss > 65504
    assert not any("non-finite" in f for f in report.findings)
    assert_norms_match(report, reference)
    assert "float64" in report.loss_description


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_run_under_no_grad(mode: str) -> None:
    model, (x, y) = small_cnn(), images()
    reference = plain_norms(model, lambda m: CE(m(x), y))
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    with getattr(torch, mode)():
        report = ex.run()
    assert_norms_match(report, reference)


def test_target_without_loss_fn_is_refused_at_construction() -> None:
    with pytest.raises(GradExplorerError, match="target=.*loss_fn"):
        GradExplorer(nn.Linear(3, 2), torch.randn(2, 3), target=torch.tensor([0, 1]))


class CheckpointedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(4, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=True))


def test_reentrant_checkpoint_whose_input_needs_no_grad() -> None:
    torch.manual_seed(0)
    model, x = CheckpointedBlock(), torch.randn(5, 4)
    y = torch.tensor([0, 1, 2, 0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = plain_norms(model, lambda m: CE(m(x), y))
        _, report = explore_and_check(model, x, CE, y, runs=1)
    assert_norms_match(report, reference)  # block gets no gradient, as in plain backward
    assert report.none_reasons["block.weight"] == CHECKPOINT_NO_GRAD
    assert any("use_reentrant=False" in f for f in report.findings)
