"""Registry cases: forwards that write state (in-place renorm, counters, caches), dtypes and
memory formats, and transformers' own gradient checkpointing."""

from __future__ import annotations

import torch
from torch import nn

from .models import Case, case, ce
from .models_hf import VOCAB, _gpt2


def _y():
    return torch.tensor([0, 1])


class EmbeddingMaxNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4, max_norm=0.5)  # forward renormalises rows in place
        self.head = nn.Linear(4, 3)

    def forward(self, idx):
        return self.head(self.emb(idx).mean(1))


@case("embedding_max_norm")
def _emb_max_norm():
    torch.manual_seed(0)
    return Case(
        EmbeddingMaxNorm(),
        torch.tensor([[1, 2, 3], [3, 4, 5]]),
        ce,
        _y(),
        "nn.Embedding(max_norm=...): forward writes the weight in place (no_grad renorm)",
    )


class ClampsWeight(nn.Module):
    """WGAN-style weight clipping inside forward: an in-place write to a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.out = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.clamp_(-0.1, 0.1)
        return self.out(torch.tanh(self.lin(x)))


@case("forward_clamps_weight")
def _clamps():
    torch.manual_seed(0)
    return Case(
        ClampsWeight(),
        torch.randn(2, 4),
        ce,
        _y(),
        "forward clamps lin.weight in place under no_grad (weight clipping)",
    )


class StatefulForward(nn.Module):
    """A step-counter buffer, a Python call counter and a cached activation, all written in
    forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.calls = 0
        self.last = torch.zeros(1)

    def forward(self, x):
        self.steps += 1
        self.calls += 1
        h = self.lin(x)
        self.last = h.detach()
        return h


@case("forward_writes_state")
def _stateful():
    torch.manual_seed(0)
    return Case(
        StatefulForward(),
        torch.randn(2, 4),
        ce,
        _y(),
        "forward does self.steps += 1 (buffer), self.calls += 1, self.last = h.detach()",
    )


class AutocastNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = torch.relu(self.a(x))
        return self.b(h.float())


@case("autocast_bf16_region")
def _autocast():
    torch.manual_seed(0)
    return Case(AutocastNet(), torch.randn(2, 4), ce, _y(), "torch.autocast(cpu, bf16) in forward")


class Bf16Params(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8).bfloat16(), nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x.bfloat16())).float())


@case("bf16_parameters")
def _bf16():
    torch.manual_seed(0)
    return Case(Bf16Params(), torch.randn(2, 4), ce, _y(), "bfloat16 parameters next to float32")


@case("float64_mlp")
def _float64():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    return Case(
        model,
        torch.randn(2, 4, dtype=torch.float64),
        ce,
        _y(),
        "float64 throughout: norms must agree to 1e-12",
        rtol=1e-12,
    )


@case("channels_last_cnn")
def _channels_last():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )
    model = model.to(memory_format=torch.channels_last).train()
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    return Case(model, x, ce, _y(), "channels_last conv weights and input (strides kept)")


@case("hf_gpt2_gradient_checkpointing")
def _gpt2_ckpt():
    c = _gpt2(True)
    c.model.config.use_cache = False
    enable = getattr(c.model, "activation_checkpointing_enable", None)  # transformers >= 5.x
    (enable or c.model.gradient_checkpointing_enable)()
    c.notes = f"{c.notes}; transformers' own activation checkpointing (vocab {VOCAB})"
    return c
