"""Per-parameter gradient norms of FSDP2 (`fully_shard`) models from the local shards.

Each rank holds a shard of each gradient (a DTensor placed Shard(0) on the mesh). The norm of
the full gradient is the square root of the sum over ranks of each shard's sum of squares, so
`fsdp_param_stats` sends ONE all_reduce (SUM) of a float64 vector: the squared sums and the
non-zero counts of every parameter. No gradient is all-gathered. Squares of float32 / bfloat16 /
float16 values cannot overflow or underflow in float64 (float32's max squared is ~1.2e77), and
the non-zero counts decide "zero" exactly, whatever the dtype.

The explorer's own run cannot measure an FSDP2 model: it swaps stand-ins into each module's
`_parameters`, while FSDP2's forward hooks all-gather the shards and install their own unsharded
parameters, and its backward reduce-scatters into the user's `.grad`. `fsdp_gradients` instead
runs the model's own forward + backward (all of FSDP2's collectives, on every rank) with each
`.grad` set aside and put back afterwards, and the buffers and the RNG restored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import GradExplorerError
from ..run.inputs import CallArgs, make_loss
from ..vocabulary import Thresholds, classify


@dataclasses.dataclass(frozen=True)
class ShardedParamStat:
    """The full gradient of one parameter: L2 norm, non-zero share, status (None: no gradient)."""

    norm: float | None
    zero_fraction: float | None
    status: str


def local_and_weight(grad: torch.Tensor, world: int) -> tuple[torch.Tensor, float]:
    """This rank's part of `grad` and the weight of its sums: a Shard placement counts once; a
    Replicate mesh dimension holds the same values on each of its ranks (counted 1/size each);
    a plain tensor is taken as replicated on every rank of the group."""
    placements = getattr(grad, "placements", None)
    if placements is None:
        return grad.detach(), 1.0 / world
    if any(p.is_partial() for p in placements):
        raise GradExplorerError(
            "a gradient DTensor is Partial (not reduced yet); call this "
            "after backward has finished (FSDP2 reduce-scatters it then)"
        )
    weight = 1.0
    mesh = grad.device_mesh  # type: ignore[attr-defined]  # a DTensor
    for dim, p in enumerate(placements):
        if p.is_replicate():
            weight /= mesh.size(dim)
    return grad.to_local().detach(), weight  # type: ignore[attr-defined]


def fsdp_param_stats(
    named_grads: Mapping[str, torch.Tensor | None],
    group: dist.ProcessGroup | None = None,
    thresholds: Thresholds | None = None,
) -> dict[str, ShardedParamStat]:
    """Norm, zero share and status of each full gradient, with ONE all_reduce (every rank of
    `group`, the mesh's ranks, calls it with the same names). A name whose gradient is None on
    every rank gets status "none"."""
    thresholds = thresholds or Thresholds()
    names = list(named_grads)
    world = dist.get_world_size(group)
    present = [g for g in named_grads.values() if g is not None]
    device = present[0].device if present else torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    squares = torch.zeros(3 * len(names), dtype=torch.float64, device=device)
    for i, name in enumerate(names):
        grad = named_grads[name]
        if grad is None:
            continue
        local, weight = local_and_weight(grad, world)
        squares[i] = local.to(device, torch.float64).square().sum() * weight
        squares[len(names) + i] = torch.count_nonzero(local).to(torch.float64) * weight
        squares[2 * len(names) + i] = weight  # sums to 1 where any rank has a gradient
    dist.all_reduce(squares, op=dist.ReduceOp.SUM, group=group)
    values = squares.tolist()
    out = {}
    for i, name in enumerate(names):
        grad = named_grads[name]
        if values[2 * len(names) + i] == 0.0:
            out[name] = ShardedParamStat(None, None, "none")
            continue
        norm = math.sqrt(values[i])
        total = _full_numel(grad)
        nonzero = round(values[len(names) + i])
        max_abs = 0.0 if nonzero == 0 else None
        out[name] = ShardedParamStat(
            norm, 1.0 - nonzero / total if total else 0.0, classify(norm, max_abs, thresholds)
        )
    return out


def _full_numel(grad: torch.Tensor | None) -> int:
    return 0 if grad is None else grad.numel()  # a DTensor's numel is the full tensor's


def fsdp_param_norms(
    named_grads: Mapping[str, torch.Tensor | None], group: dist.ProcessGroup | None = None
) -> dict[str, float | None]:
    """name -> L2 norm of the full gradient (None: no gradient on any rank), from the local
    shards with ONE all_reduce of float64 squared sums; every rank calls it."""
    return {n: s.norm for n, s in fsdp_param_stats(named_grads, group).items()}


def total_norm(norms: Mapping[str, float | None]) -> float:
    """What torch.nn.utils.clip_grad_norm_ returns as the total norm (L2 of all gradients)."""
    return math.sqrt(sum(n * n for n in norms.values() if n is not None))


@contextlib.contextmanager
def _grads_set_aside(model: nn.Module, seed: int | None) -> Iterator[None]:
    params = list(model.parameters())
    cuda = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    saved_grads = [p.grad for p in params]
    saved_buffers = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        for p in params:
            p.grad = None
        with torch.random.fork_rng(devices=cuda):
            if seed is not None:
                torch.manual_seed(seed)
            yield
    finally:
        for p, g in zip(params, saved_grads):
            p.grad = g
        with torch.no_grad():
            for b, copy in saved_buffers:
                b.copy_(copy)


def fsdp_gradients(
    model: nn.Module,
    sample_input: Any,
    *,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    target: Any = None,
    seed: int | None = 0,
) -> dict[str, torch.Tensor | None]:
    """name -> the gradient (a sharded DTensor) one forward + backward of the FSDP2 `model`
    gives, on every rank together (FSDP2's all-gathers and reduce-scatters run as in training).

    The user's `.grad` and buffers are put back afterwards and the global RNG is forked, so the
    next training step is as if this had not run. The gradients are FSDP2's reduced ones (the
    average over ranks of each rank's gradient), as the optimizer would see them.
    """
    _check_syncing(model)
    call = CallArgs.from_sample(sample_input)
    with torch.inference_mode(False), torch.enable_grad(), _grads_set_aside(model, seed):
        output = model(*call.args, **call.kwargs)
        loss, _ = make_loss(output, loss_fn, target)
        del output
        loss.backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
    return grads


def _check_syncing(model: nn.Module) -> None:
    """Refuse while gradient sync is off (gradient accumulation): FSDP2 would add this run's
    unsharded gradients to the ones it is accumulating for the user."""
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        state = get_state() if get_state else None
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:  # torch versions with one group per state
            groups = [g for g in [getattr(state, "_fsdp_param_group", None)] if g is not None]
        if any(not getattr(g, "reduce_grads", True) for g in groups):
            raise GradExplorerError(
                "gradient sync is off on this FSDP2 model (set_requires_gradient_sync(False), "
                "gradient accumulation): run this after the optimizer step, with sync on"
            )


__all__ = [
    "ShardedParamStat",
    "fsdp_gradients",
    "fsdp_param_norms",
    "fsdp_param_stats",
    "total_norm",
]
