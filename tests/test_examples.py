"""Fast checks of the example model zoo (tiny sizes; CPU only)."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch
from small_models import SEED_TABLE
from torch import nn

from gradviz_widgets.examples import (
    ZOO_NAMES,
    BertLike,
    FrozenAndDetachedNet,
    UnrolledLSTM,
    bert_like,
    dead_branch_example,
    exploding_example,
    frozen_and_detached_example,
    gpt2_like,
    lstm_model,
    mlp3,
    nan_mid_graph_example,
    relu_residual_mlp,
    resnet18,
    resnet50,
    sigmoid_mlp,
    small_cnn,
    zoo,
)

CE = nn.CrossEntropyLoss()


def test_dead_branch_norm_table() -> None:
    net, x, y = dead_branch_example()
    CE(net(x), y).backward()
    norms = {n: round(p.grad.norm().item(), 4) for n, p in net.named_parameters()}
    assert norms == SEED_TABLE


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_tiny_zoo_forward_backward(name: str) -> None:
    ((model, x, description),) = zoo("tiny", names=[name]).values()
    assert isinstance(model, nn.Module) and description
    out = model(x)
    assert out.shape[0] == x.shape[0] and out.isfinite().all()
    out.float().mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert p.grad.isfinite().all(), pname


def test_zoo_order_seed_and_errors() -> None:
    assert list(zoo("tiny")) == list(ZOO_NAMES)
    a = zoo("tiny", names=["mlp3"])["mlp3"]
    b = zoo("tiny", names=["sigmoid_mlp", "mlp3"])["mlp3"]
    assert torch.equal(a[1], b[1])
    assert all(torch.equal(p, q) for p, q in zip(a[0].parameters(), b[0].parameters()))
    with pytest.raises(ValueError):
        zoo("huge")  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        zoo("tiny", names=["vgg"])


def test_full_sizes_on_meta_device() -> None:
    with torch.device("meta"):
        counts = {
            "resnet18": resnet18(num_classes=1000),
            "resnet50": resnet50(num_classes=1000),
            "gpt2_like": gpt2_like(),
            "bert_like": bert_like(),
        }
    n = {k: sum(p.numel() for p in m.parameters()) for k, m in counts.items()}
    assert n["resnet18"] == 11_689_512  # torchvision's resnet18
    assert n["resnet50"] == 25_557_032  # torchvision's resnet50
    assert n["gpt2_like"] == 124_439_808  # GPT-2 small (tied lm_head)
    assert 100e6 < n["bert_like"] < 120e6


def test_resnet_module_paths() -> None:
    names18 = dict(resnet18(width=4).named_modules())
    for path in ("layer1.0.conv1", "layer2.0.downsample.0", "layer2.0.downsample.1", "fc"):
        assert path in names18
    assert isinstance(names18["layer4.1.relu"], nn.ReLU) and names18["layer4.1.relu"].inplace
    names50 = dict(resnet50(width=4).named_modules())
    assert "layer1.0.conv3" in names50 and "layer1.0.downsample.0" in names50
    assert "layer3.5.bn3" in names50 and "layer3.6" not in names50


def test_gpt2_tied_and_causal() -> None:
    torch.manual_seed(0)
    model = gpt2_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=16)
    assert model.lm_head.weight is model.wte.weight
    assert not any(isinstance(m, nn.MultiheadAttention) for m in model.modules())
    idx = torch.randint(0, 64, (1, 8))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % 64
    a, b = model(idx), model(changed)
    assert torch.allclose(a[:, :-1], b[:, :-1]) and not torch.allclose(a[:, -1], b[:, -1])
    with pytest.raises(ValueError):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_bert_uses_post_ln_encoder_layers() -> None:
    model = bert_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=16)
    assert isinstance(model, BertLike)
    layers = [m for m in model.modules() if isinstance(m, nn.TransformerEncoderLayer)]
    assert len(layers) == 2
    assert all(layer.self_attn.batch_first and not layer.norm_first for layer in layers)


def test_unrolled_lstm_calls_one_cell_per_step() -> None:
    model = UnrolledLSTM(input_size=3, hidden=5, steps=6)
    calls = []
    model.cell.register_forward_hook(lambda *_: calls.append(1))
    assert model(torch.randn(2, 6, 3)).shape == (2, 10)
    assert len(calls) == 6
    with pytest.raises(ValueError):
        model(torch.randn(2, 5, 3))
    assert lstm_model(3, 5)(torch.randn(2, 6, 3)).shape == (2, 10)


def test_small_cnn_gradcam_layer() -> None:
    model = small_cnn()
    conv3 = dict(model.named_modules())["features.conv3"]
    acts: list[torch.Tensor] = []
    conv3.register_forward_hook(lambda _m, _i, out: acts.append(out))
    out = model(torch.randn(1, 3, 32, 32))
    assert out.shape == (1, 10) and acts[0].shape == (1, 64, 8, 8)
    (grad,) = torch.autograd.grad(out[0, 3], acts[0])
    assert grad.abs().sum() > 0


def test_mlp3_shape() -> None:
    assert mlp3(4, 8, 3)(torch.randn(2, 4)).shape == (2, 3)


def test_sigmoid_mlp_vanishes_and_residual_is_healthy() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    sig = sigmoid_mlp(depth=48, width=64)
    CE(sig(x), y).backward()
    first = sig.fc0.weight.grad
    assert first.abs().max().item() < 1e-20
    assert first.double().norm().item() < 1e-20
    assert sig.fc47.weight.grad.norm().item() > 1e-3

    res = relu_residual_mlp(depth=48, width=64)
    CE(res(x), y).backward()
    norms = [p.grad.norm().item() for n, p in res.named_parameters() if n.endswith("weight")]
    assert all(1e-3 < v < 1e2 for v in norms)


def test_exploding_gradients() -> None:
    model, x, y = exploding_example()
    out = model(x)
    assert out.isfinite().all()
    CE(out, y).backward()
    g = model.fc0.weight.grad
    assert g.isfinite().all() and g.norm().item() > 1e4


def test_nan_backward_origin_is_unsafe_module() -> None:
    model, x, y = nan_mid_graph_example("backward")
    seen: dict[str, bool] = {}

    def hook(_m: nn.Module, grad_in: tuple, grad_out: tuple) -> None:
        seen["out_finite"] = bool(grad_out[0].isfinite().all())
        seen["in_nan"] = bool(grad_in[0].isnan().any())

    model.unsafe.register_full_backward_hook(hook)
    out = model(x)
    loss = CE(out, y)
    assert out.isfinite().all() and loss.isfinite()
    loss.backward()
    assert seen == {"out_finite": True, "in_nan": True}
    assert model.fc1.weight.grad.isnan().any()
    assert model.head.weight.grad.isfinite().all() and model.head.bias.grad.isfinite().all()


def test_nan_forward_origin_is_unsafe_module() -> None:
    model, x, y = nan_mid_graph_example("forward")
    h = model.fc1(x)
    assert h.isfinite().all() and model.unsafe(h).isnan().any()
    assert CE(model(x), y).isnan()


def test_frozen_and_detached_reasons() -> None:
    model, x, y = frozen_and_detached_example()
    assert x.sum() <= 0
    assert not any(p.requires_grad for p in model.frozen.parameters())
    CE(model(x), y).backward()
    for name in FrozenAndDetachedNet.REASONS:
        for pname, p in getattr(model, name).named_parameters():
            assert p.grad is None, f"{name}.{pname}"
    assert all(p.grad is not None for p in model.live.parameters())
    # The data-dependent branch is real: a positive input takes it.
    model.zero_grad(set_to_none=True)
    CE(model(-x), y).backward()
    assert model.maybe.weight.grad is not None


@pytest.mark.parametrize(
    "module",
    ["__init__", "cnn", "dead_branch", "mlp", "pathologies", "recurrent", "transformer", "zoo"],
)
def test_docstring_examples(module: str) -> None:
    name = "gradviz_widgets.examples" + ("" if module == "__init__" else f".{module}")
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
