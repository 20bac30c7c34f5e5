"""The same checks with device="cuda" (skipped where there is no CUDA)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from model_state import assert_unchanged, model_state
from test_seed_table import TABLE
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example, resnet18, sigmoid_mlp

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CE = nn.CrossEntropyLoss()


def test_dead_branch_table_on_cuda_model_stays_on_cpu() -> None:
    net, x, y = dead_branch_example()
    before = model_state(net)
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state()
    ex = GradExplorer(net, x, loss_fn=CE, target=y, device="cuda")
    reports = [ex.run() for _ in range(2)]
    report = reports[0]
    assert report.device == "cuda:0"
    assert {k: round(v, 4) for k, v in report.param_norms.items()} == TABLE
    assert report.param_status["gate.weight"] == "zero"
    assert report.zero_origins["dead.weight"] == "dead/AddmmBackward0#0"
    assert reports[1].param_norms == report.param_norms
    assert report.host_syncs == 1
    # the model lives on CPU and stays there, untouched
    assert all(p.device.type == "cpu" for p in net.parameters())
    assert_unchanged(net, before)
    assert x.device.type == "cpu" and y.device.type == "cpu"
    assert torch.equal(torch.get_rng_state(), cpu_rng)
    assert torch.equal(torch.cuda.get_rng_state(), cuda_rng)


def test_cuda_model_on_cuda_unchanged_and_matches_backward() -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=3, width=4).cuda().train()
    x = torch.randn(2, 3, 32, 32, device="cuda")
    y = torch.tensor([0, 2], device="cuda")
    twin = copy.deepcopy(model)
    CE(twin(x), y).backward()
    ref = {n: p.grad.double().norm().item() for n, p in twin.named_parameters()}
    before = model_state(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)  # device=None: where the model is
    for _ in range(2):
        report = ex.run()
    assert report.device == "cuda:0"
    for name, norm in ref.items():
        # cuDNN may pick different algorithms run to run: allow float32 noise
        assert math.isclose(report.param_norms[name], norm, rel_tol=1e-4, abs_tol=1e-9), name
    assert_unchanged(model, before)


def test_cuda_vanishing_not_zero() -> None:
    torch.manual_seed(0)
    model = sigmoid_mlp(48, 8)
    report = GradExplorer(model, torch.randn(4, 8), device="cuda").run()
    assert report.param_status["fc0.weight"] == "vanishing"
    assert report.param_norms["fc0.weight"] > 0


def test_switch_device_between_runs() -> None:
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=CE, target=y)
    on_cpu = ex.run()
    on_gpu = ex.run(device="cuda")
    assert on_cpu.device == "cpu" and on_gpu.device == "cuda:0"
    for name, norm in on_cpu.param_norms.items():
        assert math.isclose(on_gpu.param_norms[name], norm, rel_tol=1e-5, abs_tol=1e-12), name
    assert all(p.device.type == "cpu" for p in net.parameters())
