"""The conformance registry: name -> builder of a Case (model, sample input, loss, target, notes).

Everything is built from code or small configs (no downloads). Vision, recurrent, routing and
sharing cases live here; parametrizations, checkpointing and other special cases in
models_special.py; transformers models in models_hf.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from gradviz_widgets.examples import dead_branch_example, resnet18
from gradviz_widgets.examples.pathologies import frozen_and_detached_example


@dataclasses.dataclass
class Case:
    model: nn.Module
    sample: Any
    loss_fn: Callable | None = None
    target: Any = None
    notes: str = ""
    rtol: float = 1e-5
    #: the loss for the deep-copied reference model when loss_fn closes over the model itself
    twin_loss_fn: Callable[[nn.Module], Callable] | None = None
    #: builds the reference twin where copy.deepcopy cannot (legacy weight_norm)
    twin: Callable[[], nn.Module] | None = None
    #: a context both the reference and the explorer run inside (e.g. parametrize.cached)
    context: Callable[[], Any] = nullcontext
    #: the reference calls the model with the sample itself, not a copy (a loss_fn that takes
    #: gradients with respect to the user's input tensor)
    input_as_is: bool = False


CASES: dict[str, Callable[[], Case]] = {}


def case(name: str):
    def register(builder: Callable[[], Case]) -> Callable[[], Case]:
        assert name not in CASES, name
        CASES[name] = builder
        return builder

    return register


def ce(out, target):
    return nn.functional.cross_entropy(out, target)


def _images(batch=2, size=16):
    return torch.randn(batch, 3, size, size), torch.randint(0, 5, (batch,))


# ---- CNNs -----------------------------------------------------------------------------------
@case("resnet_bn_inplace_relu")
def _resnet():
    torch.manual_seed(0)
    x, y = _images(2, 32)
    return Case(
        resnet18(num_classes=5, width=4).train(),
        x,
        ce,
        y,
        "torchvision-layout ResNet-18: BatchNorm (train), ReLU(inplace=True)",
    )


class InvertedResidual(nn.Module):
    def __init__(self, c: int, expand: int = 3) -> None:
        super().__init__()
        h = c * expand
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False),
            nn.BatchNorm2d(h),
            nn.ReLU6(inplace=True),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False),
            nn.BatchNorm2d(h),
            nn.ReLU6(inplace=True),
            nn.Conv2d(h, c, 1, bias=False),
            nn.BatchNorm2d(c),
        )

    def forward(self, x):
        return x + self.block(x)


@case("mobilenet_depthwise")
def _mobilenet():
    torch.manual_seed(0)
    x, y = _images()
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU6(inplace=True),
        InvertedResidual(8),
        InvertedResidual(8),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )
    return Case(model.train(), x, ce, y, "MobileNetV2 inverted residuals, depthwise conv")


class DenseLayer(nn.Module):
    def __init__(self, c: int, growth: int = 4) -> None:
        super().__init__()
        self.bn, self.relu = nn.BatchNorm2d(c), nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(c, growth, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.cat([x, self.conv(self.relu(self.bn(x)))], 1)


@case("densenet_concat")
def _densenet():
    torch.manual_seed(0)
    x, y = _images()
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        DenseLayer(8),
        DenseLayer(12),
        DenseLayer(16),
        nn.BatchNorm2d(20),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(20, 5),
    )
    return Case(model.train(), x, ce, y, "DenseNet-style concatenation, BN-ReLU(inplace)-conv")


class DropPathBlock(nn.Module):
    def __init__(self, c: int, p: float) -> None:
        super().__init__()
        self.p = p
        self.branch = nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True)
        )

    def forward(self, x):
        out = self.branch(x)
        if self.training:
            keep = (torch.rand(x.shape[0], 1, 1, 1) >= self.p).to(x.dtype) / (1 - self.p)
            out = out * keep
        return x + out


@case("stochastic_depth")
def _stochastic_depth():
    torch.manual_seed(0)
    x, y = _images(4)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        DropPathBlock(8, 0.5),
        DropPathBlock(8, 0.5),
        DropPathBlock(8, 0.5),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )
    return Case(model.train(), x, ce, y, "drop-path via torch.rand in train mode: seed alignment")


class TinyViT(nn.Module):
    def __init__(self, dim: int = 32, patch: int = 4, size: int = 16) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 1 + (size // patch) ** 2, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, 4, 2 * dim, dropout=0.1, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 5)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1) + self.pos
        return self.head(self.norm(self.encoder(t))[:, 0])


@case("vit_train_dropout")
def _vit():
    torch.manual_seed(0)
    x, y = _images()
    return Case(TinyViT().train(), x, ce, y, "ViT: cls token + pos embedding params, dropout 0.1")


# ---- recurrent --------------------------------------------------------------------------------
class PackedRNN(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[kind]
        self.rnn = rnn(4, 8, num_layers=2, batch_first=True, bidirectional=kind == "lstm")
        self.head = nn.Linear(16 if kind == "lstm" else 8, 3)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return self.head(padded.sum(1))


def _packed(kind: str) -> Case:
    torch.manual_seed(0)
    sample = (torch.randn(3, 6, 4), torch.tensor([4, 6, 2]))
    return Case(
        PackedRNN(kind),
        sample,
        ce,
        torch.tensor([0, 2, 1]),
        f"{kind.upper()} over pack_padded_sequence (unsorted lengths)",
    )


case("lstm_packed_bidirectional")(lambda: _packed("lstm"))
case("gru_packed")(lambda: _packed("gru"))


# ---- routing, sharing, sparse ------------------------------------------------------------------
class MoE(nn.Module):
    """Top-1 router; experts 0-2 run on their (maybe empty) share, expert 3 only when routed to."""

    def __init__(self, d: int = 16, n: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(d, n)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
        self.head = nn.Linear(d, 3)
        with torch.no_grad():
            self.router.bias.copy_(torch.tensor([8.0, 8.0, -100.0, -100.0]))

    def forward(self, x):
        gate = self.router(x).softmax(-1)
        idx = gate.argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            mask = idx == e
            if e < 3 or bool(mask.any()):
                out = out.index_put((mask,), expert(x[mask]) * gate[mask, e : e + 1])
        return self.head(out)


@case("moe_unused_experts")
def _moe():
    torch.manual_seed(0)
    return Case(
        MoE(),
        torch.randn(6, 16),
        ce,
        torch.tensor([0, 1, 2, 0, 1, 2]),
        "expert 2 called on an empty batch (zero), expert 3 never called (None)",
    )


class SharedBackbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.features = self.backbone
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        a = self.backbone(x)
        b = self.features(x.flip(-1))
        return self.head((a + b).mean((2, 3)))


@case("shared_module_two_names_bn")
def _shared():
    torch.manual_seed(0)
    x, y = _images()
    return Case(
        SharedBackbone().train(),
        x,
        ce,
        y,
        "self.features = self.backbone (with BatchNorm, called under both names)",
    )


class SparseEmb(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = nn.Embedding(50, 16, sparse=True)
        self.dense = nn.Embedding(50, 16, padding_idx=0)
        self.head = nn.Linear(16, 4)

    def forward(self, idx):
        return self.head(self.sparse(idx).mean(1) + self.dense(idx).mean(1))


@case("sparse_embedding")
def _sparse():
    torch.manual_seed(0)
    idx = torch.tensor([[1, 2, 2, 0], [3, 0, 1, 49]])
    return Case(
        SparseEmb(),
        idx,
        ce,
        torch.tensor([0, 3]),
        "nn.Embedding(sparse=True): plain backward gives a sparse .grad (duplicates)",
    )


class Reused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.shared, self.out = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.out(self.shared(torch.tanh(self.shared(self.inp(x)))))


@case("reused_linear")
def _reused():
    torch.manual_seed(0)
    return Case(
        Reused(),
        torch.randn(4, 8),
        ce,
        torch.tensor([0, 1, 2, 0]),
        "the same Linear called twice in one forward",
    )


@case("dropout_mlp_train")
def _dropout():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))
    return Case(
        model.train(),
        torch.randn(4, 8),
        ce,
        torch.tensor([0, 1, 2, 0]),
        "dropout in train mode: norms agree only with seed alignment",
    )


@case("frozen_and_detached")
def _frozen():
    torch.manual_seed(0)
    net, x, y = frozen_and_detached_example()
    return Case(net, x, ce, y, "frozen params, detached and no_grad branches: None with reasons")


@case("dead_branch_zero")
def _dead():
    net, x, y = dead_branch_example()
    return Case(net, x, ce, y, "a gate with zero weights: exact-zero gradients")
