"""Registry cases: parametrizations, checkpointing, owned generators, complex values, losses
that close over the model's parameters, weights reached through plain Python containers."""

from __future__ import annotations

import warnings

import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn
from torch.nn.utils import parametrizations
from torch.utils.checkpoint import checkpoint

from .models import Case, case, ce


def _mlp_with(first: nn.Module) -> nn.Sequential:
    return nn.Sequential(first, nn.Tanh(), nn.Linear(8, 3))


def _xy():
    return torch.randn(4, 8), torch.tensor([0, 1, 2, 0])


# ---- parametrizations ---------------------------------------------------------------------------
@case("parametrize_orthogonal")
def _orthogonal():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(
        _mlp_with(parametrizations.orthogonal(nn.Linear(8, 8))),
        x,
        ce,
        y,
        "parametrize.orthogonal: params are parametrizations.weight.original",
    )


@case("parametrize_weight_norm")
def _weight_norm():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(
        _mlp_with(parametrizations.weight_norm(nn.Linear(8, 8))),
        x,
        ce,
        y,
        "parametrizations.weight_norm: original0 (g) and original1 (v)",
    )


@case("parametrize_spectral_norm_train")
def _spectral_new():
    torch.manual_seed(0)
    x, y = _xy()
    model = _mlp_with(parametrizations.spectral_norm(nn.Linear(8, 8))).train()
    return Case(model, x, ce, y, "parametrizations.spectral_norm: power iteration updates _u/_v")


@case("parametrize_cached")
def _cached():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(
        _mlp_with(parametrizations.orthogonal(nn.Linear(8, 8))),
        x,
        ce,
        y,
        "the run happens inside `with parametrize.cached():`",
        context=parametrize.cached,
    )


def _legacy(fn) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(nn.Linear(8, 8))


def _legacy_wn_model() -> nn.Module:
    torch.manual_seed(0)
    return _mlp_with(_legacy(torch.nn.utils.weight_norm))


@case("legacy_weight_norm")
def _legacy_wn():
    model = _legacy_wn_model()
    x, y = _xy()
    return Case(
        model,
        x,
        ce,
        y,
        "torch.nn.utils.weight_norm: forward pre-hook sets module.weight (plain attr); "
        "deepcopy refuses it, the twin is rebuilt",
        twin=_legacy_wn_model,
    )


@case("legacy_spectral_norm_train")
def _legacy_sn():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(
        _mlp_with(_legacy(torch.nn.utils.spectral_norm)).train(),
        x,
        ce,
        y,
        "torch.nn.utils.spectral_norm: pre-hook updates weight_u in place, sets weight",
    )


# ---- checkpointing ----------------------------------------------------------------------------
class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Dropout(0.2)) for _ in range(2)
        )
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + checkpoint(block, h, use_reentrant=self.reentrant)
        return self.out(h)


@case("checkpoint_non_reentrant")
def _ckpt_nr():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(
        Checkpointed(False).train(),
        x,
        ce,
        y,
        "checkpoint(use_reentrant=False) with dropout inside (RNG replayed)",
    )


@case("checkpoint_reentrant")
def _ckpt_r():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(
        Checkpointed(True).train(),
        x,
        ce,
        y,
        "checkpoint(use_reentrant=True) with dropout inside (RNG replayed)",
    )


# ---- owned RNG, complex ------------------------------------------------------------------------
class NoisyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(1234)
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        keep = (torch.rand(h.shape, generator=self.gen) > 0.3).to(h.dtype)
        return self.b(h * keep / 0.7)


@case("owned_generator_noise")
def _generator():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(NoisyNet(), x, ce, y, "dropout-like noise from a torch.Generator the model owns")


class ComplexInputNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.re, self.im = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 3)

    def forward(self, z):
        w = torch.complex(self.re.weight, self.im.weight)
        return self.head((z @ w.T).abs())


@case("complex_input")
def _complex_input():
    torch.manual_seed(0)
    z = torch.randn(4, 8, dtype=torch.complex64)
    return Case(
        ComplexInputNet(),
        z,
        ce,
        torch.tensor([0, 1, 2, 0]),
        "complex64 input, real parameters combined into a complex weight",
    )


class ComplexParamNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8, dtype=torch.complex64) * 0.3)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head((x.to(torch.complex64) @ self.w).abs())


@case("complex_parameter")
def _complex_param():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(ComplexParamNet(), x, ce, y, "a complex64 parameter (conjugate Wirtinger grad)")


# ---- losses and containers that hold the real parameters -----------------------------------------
def _penalised(params: list[nn.Parameter]):
    def loss_fn(out, target):
        return ce(out, target) + 1e-2 * sum(p.pow(2).sum() for p in params)

    return loss_fn


@case("l2_penalty_captured_params")
def _l2():
    torch.manual_seed(0)
    x, y = _xy()
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
    return Case(
        model,
        x,
        _penalised(list(model.parameters())),
        y,
        "loss_fn adds an L2 penalty over list(model.parameters()) captured before the run",
        twin_loss_fn=lambda twin: _penalised(list(twin.parameters())),
    )


class ListWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.head = nn.Linear(8, 3)
        self.weights = [self.w]  # a plain list: not a ParameterList

    def forward(self, x):
        return self.head(torch.tanh(x @ self.weights[0]))


@case("weight_in_python_list")
def _python_list():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(ListWeight(), x, ce, y, "a registered parameter read through a plain Python list")
