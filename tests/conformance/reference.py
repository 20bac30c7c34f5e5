"""The textbook reference: a deep copy of the model, torch.manual_seed(seed), forward, plain
`loss.backward()`, float64 norms of every `.grad`."""

from __future__ import annotations

import contextlib
import copy
import math
import random

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_map

from .models import Case


@contextlib.contextmanager
def every_rng_seeded(seed: int):
    """torch's, numpy's and Python's global RNG seeded as the explorer seeds them; numpy and
    Python put back afterwards (torch's is forked by the caller)."""
    np_state, py_state = np.random.get_state(), random.getstate()
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


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
    if c.input_as_is:
        sample = c.sample
        held = [(t, t.grad) for t in tree_flatten(c.sample)[0] if isinstance(t, torch.Tensor)]
    loss_fn = c.twin_loss_fn(twin) if c.twin_loss_fn else c.loss_fn
    with torch.random.fork_rng(), every_rng_seeded(seed):
        out = call(twin, sample)
        if loss_fn is None and getattr(out, "loss", None) is not None:
            loss = out.loss  # what `model(**batch, labels=y).loss.backward()` differentiates
        elif loss_fn is None:
            loss = out if out.numel() == 1 else out.sum()
        else:
            loss = loss_fn(out) if c.target is None else loss_fn(out, c.target)
        loss.backward()
    if c.input_as_is:
        for t, g in held:
            t.grad = g
    grads = {
        n: None if p.grad is None else grad_norm_and_zero(p.grad)
        for n, p in twin.named_parameters()
    }
    return grads, loss.item()
