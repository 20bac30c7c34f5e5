"""Large parameter gradients measured as they reach their parameter, and then not kept.

`torch.autograd.grad` holds every gradient it was asked for until it returns, so a run held a
second full set of parameter gradients at its peak: memory a bare step does not need beside
the model's own `.grad` (a model after a training step), which the allocator maps afresh on
every run (ResNet-50: ~45k page faults, ~6 % of the step). Instead, a hook on each large
stand-in (the run's own tensor, never the user's) measures the gradient in full as it reaches
the leaf, norm, max |g| and non-zero count (`NormBatch.add_leaf`, sharing what the flow hooks
measured of the same tensor on its way), and hands autograd one zero expanded to the same
shape in its place: the gradient is freed as soon as it is measured, as `.backward()` frees
nothing but keeps one set.

The hook sees what `.backward()` would accumulate into `.grad` at that moment: the sum of every
part, after the model's own hooks on the way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

import torch

from ..stats.norms import NormBatch
from .walk import RawGraph, RawNode

#: slots of a gradient measured on arrival: (its (norm, max |g|) pair, its non-zero count)
Slots = tuple[int, int]


def measured_on_arrival(graph: RawGraph, ours: Collection[int]) -> list[RawNode]:
    """The leaves whose gradient is measured as it arrives: large parameters of this run (their
    tensor's id in `ours`: stand-ins) met once in the graph, so what reaches them is all of it
    (a parameter the forward also uses directly is a second leaf, summed after backward)."""
    seen = Counter(leaf.id for leaf in graph.leaves)
    return [
        leaf
        for leaf in graph.leaves
        if leaf.kind == "param"
        and seen[leaf.id] == 1
        and leaf.tensor is not None
        and id(leaf.tensor) in ours
        and leaf.tensor.requires_grad
        and leaf.tensor.numel() > NormBatch.SMALL
    ]


def measure_on_arrival(leaves: list[RawNode], batch: NormBatch) -> dict[str, Slots]:
    """Hook each leaf's tensor; the dict fills, leaf id -> slots, as their gradients arrive."""
    slots: dict[str, Slots] = {}
    for leaf in leaves:
        assert leaf.tensor is not None  # `measured_on_arrival` keeps leaves with a tensor
        leaf.tensor.register_hook(_arrival(leaf.id, batch, slots))
    return slots


def _arrival(leaf_id: str, batch: NormBatch, slots: dict[str, Slots]):
    def hook(g: torch.Tensor) -> torch.Tensor | None:
        if type(g) is not torch.Tensor or g.layout is not torch.strided:
            return None  # sparse or a subclass: kept for the read-back, as before
        slots[leaf_id] = batch.add_leaf(g)
        # the same shape, dtype and device (autograd checks them), one element of memory
        return torch.zeros((), dtype=g.dtype, device=g.device).expand(g.shape)

    return hook
