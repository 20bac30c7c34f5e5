"""The textbook reference: a deep copy of the model, torch.manual_seed(seed), forward, plain
`loss.backward()`, float64 norms of every `.grad`."""

from __future__ import annotations

import copy
import math

import torch
from torch.utils._pytree import tree_map

from .models import Case


def call(model, sample):
    if isinstance(sample, dict):
        return model(**sample)
    if isinstance(sample, (tuple, list)):
        return model(*sample)
    return model(sample)


def grad_norm_and_zero(g: torch.Tensor) -> tuple[float, bool, float]:
    """Float64 L2 norm of a reference .grad (dense, sparse or complex), whether all elements
    are 0, and the largest |element|."""
    v = g.coalesce().values() if g.is_sparse else g
    v = v.to(torch.complex128 if v.is_complex() else torch.float64)
    top = v.abs().max().item() if v.numel() else 0.0
    return torch.linalg.vector_norm(v).item(), bool((v == 0).all()), top


def expected_status(ref, thresholds) -> str:
    """What the explorer's status must be for a reference gradient (the documented rules)."""
    if ref is None:
        return "none"
    norm, _, top = ref
    if not (math.isfinite(norm) and math.isfinite(top)):
        return "nonfinite"
    if top == 0.0:
        return "zero"
    if norm < thresholds.vanishing:
        return "vanishing"
    return "exploding" if norm > thresholds.exploding else "healthy"


def reference(c: Case, seed: int = 0) -> tuple[dict, float]:
    """name -> (norm, all_zero, max_abs) or None, and the loss, from the textbook recipe on a deep copy."""
    twin = c.twin() if c.twin else copy.deepcopy(c.model)
    for (n, p), (_, q) in zip(c.model.named_parameters(), twin.named_parameters()):
        assert torch.equal(p, q), f"the reference twin differs at {n}"
    for p in twin.parameters():
        p.grad = None  # deepcopy copies .grad; backward must start from nothing
    sample = tree_map(
        lambda t: (
            t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        ),
        c.sample,
    )
    loss_fn = c.twin_loss_fn(twin) if c.twin_loss_fn else c.loss_fn
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        out = call(twin, sample)
        if loss_fn is None:
            loss = out if out.numel() == 1 else out.sum()
        else:
            loss = loss_fn(out) if c.target is None else loss_fn(out, c.target)
        loss.backward()
    grads = {
        n: None if p.grad is None else grad_norm_and_zero(p.grad)
        for n, p in twin.named_parameters()
    }
    return grads, loss.item()
