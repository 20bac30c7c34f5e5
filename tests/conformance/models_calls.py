"""Registry cases: models as people call them (issue 19): forwards that draw from numpy and
Python's `random`, parameters that carry attributes or are of a Parameter subclass, tensors that
require grad without being parameters under reentrant checkpoint, gradients taken inside the loss
(WGAN-GP's penalty over the input, a penalty over a parameter list made before, MAML's inner step).
The transformers models called with `labels=` are in models_hf.py."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .models import Case, case, ce


def _xy():
    return torch.randn(4, 8), torch.tensor([0, 1, 2, 0])


# ---- every RNG ---------------------------------------------------------------------------------
class NumpyMasking(nn.Module):
    """wav2vec2-style time masking in training: the mask drawn from numpy, a jitter from random."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.training:
            mask = torch.from_numpy(np.random.rand(*h.shape) < 0.3)
            h = h.masked_fill(mask, 0.0) * (1.0 + random.random())
        return self.b(h)


@case("numpy_and_random_in_forward")
def _numpy_masking():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(NumpyMasking().train(), x, ce, y, "mask from np.random, scale from random.random")


class OwnedNumpyRng(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(7)
        self.legacy = np.random.RandomState(8)
        self.py = random.Random(9)
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        keep = torch.from_numpy(self.rng.random(h.shape) > 0.3).to(h.dtype)
        noise = torch.from_numpy(self.legacy.standard_normal(h.shape)).to(h.dtype)
        return self.b(h * keep + 0.01 * noise * self.py.random())


@case("owned_numpy_and_python_generators")
def _owned_numpy():
    torch.manual_seed(0)
    x, y = _xy()
    return Case(OwnedNumpyRng(), x, ce, y, "numpy Generator, RandomState, random.Random owned")


@case("hf_wav2vec2_time_masking_train")
def _wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    cfg = Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2,
        mask_time_prob=0.5,
        mask_time_length=2,
        mask_time_min_masks=1,
    )
    model = Wav2Vec2Model(cfg).train()
    audio = torch.randn(2, 400)
    return Case(
        model,
        audio,
        lambda out: out.last_hidden_state.pow(2).mean(),
        None,
        "Wav2Vec2 training: time mask drawn from np.random",
    )


def _seeded(build):
    """The reference twin built again from the same seed (deepcopy drops a Parameter's
    Python attributes)."""

    def twin() -> nn.Module:
        torch.manual_seed(0)
        return build()

    return twin


# ---- parameters that carry more than data ---------------------------------------------------------
class HintedScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 3)
        self.a.weight.scale_hint = 0.5  # a Python attribute the forward reads

    def forward(self, x):
        return self.b(torch.tanh(self.a(x) * self.a.weight.scale_hint))


@case("param_python_attribute")
def _hinted():
    torch.manual_seed(0)
    model = HintedScale()  # first: the twin is built again from the seed
    x, y = _xy()
    return Case(model, x, ce, y, "forward reads p.scale_hint", twin=_seeded(HintedScale))


class ScaledParameter(nn.Parameter):
    """A Parameter subclass with state set after construction and a method using it."""

    def scaled(self) -> torch.Tensor:
        return self * self.gain


class ScaledLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = ScaledParameter(torch.randn(8, 8) * 0.3)
        self.weight.gain = 2.0
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(torch.tanh(x @ self.weight.scaled().T))


@case("param_subclass_with_state")
def _subclass():
    torch.manual_seed(0)
    model = ScaledLinear()  # first: the twin is built again from the seed
    x, y = _xy()
    return Case(
        model,
        x,
        ce,
        y,
        "ScaledParameter(nn.Parameter) with .gain and .scaled()",
        twin=_seeded(ScaledLinear),
    )


# ---- reentrant checkpoint and tensors that are no parameters -------------------------------------
class TensorAttrCheckpoint(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(8, 8), nn.Linear(8, 3)
        self.scale = torch.full((8,), 0.5, requires_grad=True)  # requires grad, not registered

    def forward(self, x):
        h = checkpoint(lambda t: torch.tanh(self.inp(t)) * self.scale, x, use_reentrant=True)
        return self.out(h)


@case("checkpoint_reentrant_tensor_attribute")
def _ckpt_tensor_attr():
    torch.manual_seed(0)
    x, y = _xy()
    x.requires_grad_(True)  # the reentrant checkpoint needs an input that requires grad
    return Case(TensorAttrCheckpoint(), x, ce, y, "reentrant checkpoint over a tensor attribute")


# ---- gradients inside the loss -------------------------------------------------------------------
def _critic() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


@case("wgan_gp_penalty_over_input")
def _wgan_gp():
    critic = _critic()
    x = torch.randn(4, 8, requires_grad=True)

    def loss_fn(out):  # closes over the user's x, as a training script does
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        return -out.mean() + 10.0 * ((g.norm(2, dim=1) - 1) ** 2).mean()

    return Case(
        critic, x, loss_fn, None, "WGAN-GP: d critic / d input, create_graph", input_as_is=True
    )


@case("wgan_gp_interpolates")
def _wgan_interp():
    critic = _critic()
    real = torch.randn(4, 8)

    def twin_loss(model):
        def loss_fn(out):
            alpha = torch.rand(4, 1)
            mixed = (alpha * real + (1 - alpha) * out.detach().mean()).requires_grad_(True)
            (g,) = torch.autograd.grad(model(mixed).sum(), mixed, create_graph=True)
            return -out.mean() + 10.0 * ((g.norm(2, dim=1) - 1) ** 2).mean()

        return loss_fn

    return Case(
        critic,
        torch.randn(4, 8),
        twin_loss(critic),
        None,
        "WGAN-GP on interpolates drawn in the loss",
        twin_loss_fn=twin_loss,
    )


@case("gradient_penalty_over_captured_params")
def _param_penalty():
    model = _critic()

    def twin_loss(m):
        params = list(m.parameters())  # made before the run, as a training script does

        def loss_fn(out):
            grads = torch.autograd.grad(out.sum(), params, create_graph=True)
            return out.mean() + 0.1 * sum(g.pow(2).sum() for g in grads)

        return loss_fn

    return Case(
        model,
        torch.randn(4, 8),
        twin_loss(model),
        None,
        "penalty on d out / d params",
        twin_loss_fn=twin_loss,
    )


@case("maml_inner_step")
def _maml():
    model = _critic()
    support, query = torch.randn(4, 8), torch.randn(4, 8)

    def twin_loss(m):
        def loss_fn(out):
            named = dict(m.named_parameters())
            inner = out.pow(2).mean()
            grads = torch.autograd.grad(inner, list(named.values()), create_graph=True)
            fast = {n: p - 0.1 * g for (n, p), g in zip(named.items(), grads)}
            return torch.func.functional_call(m, fast, (query,)).pow(2).mean()

        return loss_fn

    return Case(
        model,
        support,
        twin_loss(model),
        None,
        "MAML: one inner SGD step, second order",
        twin_loss_fn=twin_loss,
    )
