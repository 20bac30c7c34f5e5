"""Explanations: why a gradient is None, where a gradient died, where NaN/Inf first appeared."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence

from .graph import GradGraph
from .report import ParamRecord

#: share of exactly-zero gradient elements from which a parameter is called "mostly dead"
MOSTLY_DEAD = 0.9


def none_reason(
    name: str, requires_grad: bool, calls: Mapping[str, int], grad_enabled: Mapping[str, list[bool]]
) -> str:
    """Why parameter `name` got no gradient in this run.

    Example:
        >>> none_reason("frozen.weight", False, {}, {})
        'requires_grad=False (frozen): autograd does not track it'
    """
    if not requires_grad:
        return "requires_grad=False (frozen): autograd does not track it"
    module = name.rpartition(".")[0]
    where = f"module '{module}'" if module else "the root module"
    if module and calls.get(module, 0) == 0:
        return (f"not reached from the loss: {where} was never called in this forward "
                "(an unused module, or a data-dependent branch that was not taken)")
    flags = grad_enabled.get(module, [])
    if flags and not any(flags):
        return (f"not reached from the loss: {where} ran under torch.no_grad() "
                "(or inference_mode), so no graph was recorded")
    return (f"not reached from the loss: {where} ran, but its result was detached "
            "(.detach() / .data) or did not feed the loss")


def zero_origin(graph: GradGraph, leaf_id: str) -> str | None:
    """The node nearest leaf `leaf_id` (toward the loss) whose gradient turned all zeros.

    That is a consumer that received a non-zero gradient but passed exactly zeros along the
    path back to the leaf: e.g. the ReluBackward0 after a gate whose inputs are all negative.
    """
    consumers: dict[str, list] = {}
    for e in graph.edges:
        consumers.setdefault(e.src, []).append(e)
    seen = {leaf_id}
    queue = deque([leaf_id])
    while queue:
        current = queue.popleft()
        for e in consumers.get(current, ()):
            if e.grad_max != 0.0 or e.dst in seen:
                continue
            dst = graph.node(e.dst)
            if dst.grad_max not in (None, 0.0):
                return dst.id
            seen.add(e.dst)
            queue.append(e.dst)
    return None


def nonfinite_origin(graph: GradGraph, loss: float | None = None) -> str | None:
    """The first node in backward order whose outgoing gradient is NaN/Inf while its incoming
    gradient was finite; "output" when the loss itself is not finite (the NaN/Inf came from the
    forward pass, so no backward node is to blame)."""
    if (loss is not None and not math.isfinite(loss)) or graph.node("output").status == "nonfinite":
        return "output"
    outgoing: dict[str, list[str]] = {}
    for e in graph.edges:
        outgoing.setdefault(e.dst, []).append(e.status)
    executed = sorted((n for n in graph.nodes if n.order is not None), key=lambda n: n.order)
    for n in executed:
        if n.status != "nonfinite" and "nonfinite" in outgoing.get(n.id, ()):
            return n.id
    return None


def findings(
    params: Sequence[ParamRecord], nonfinite_at: str | None, loss: float
) -> tuple[str, ...]:
    """Short sentences for the status line, most severe first."""
    out: list[str] = []
    if loss != loss or loss in (float("inf"), float("-inf")):
        out.append(f"the loss is {loss}: the forward pass produced non-finite values "
                   "(check the inputs and ops like log, sqrt, division)")
    by: dict[str, list[ParamRecord]] = {}
    for p in params:
        by.setdefault(p.status, []).append(p)
    if by.get("nonfinite"):
        where = f", first at {nonfinite_at}" if nonfinite_at else ""
        out.append(f"{_count(by['nonfinite'])} with NaN/Inf gradients{where}: {_names(by['nonfinite'])}")
    if by.get("exploding"):
        out.append(f"{_count(by['exploding'])} with exploding gradients: {_names(by['exploding'])}")
    if by.get("none"):
        out.append(f"{_count(by['none'])} get no gradient: " + ", ".join(
            f"{p.name} ({p.none_reason.split(':')[0]})" for p in by["none"][:4])
            + ("…" if len(by["none"]) > 4 else ""))
    if by.get("zero"):
        origins = sorted({p.zero_origin for p in by["zero"] if p.zero_origin})
        where = f", the gradient dies at {', '.join(origins[:3])}" if origins else ""
        out.append(f"{_count(by['zero'])} with gradient exactly 0.0{where}: {_names(by['zero'])}")
    mostly = [p for p in params if p.status not in ("zero", "none", "nonfinite")
              and p.zero_fraction is not None and p.zero_fraction >= MOSTLY_DEAD]
    if mostly:
        out.append(f"{_count(mostly)} mostly dead (≥{MOSTLY_DEAD:.0%} of gradient elements exactly "
                   "0.0): " + ", ".join(f"{p.name} {p.zero_fraction:.0%}" for p in mostly[:4])
                   + ("…" if len(mostly) > 4 else ""))
    if by.get("vanishing"):
        out.append(f"{_count(by['vanishing'])} with vanishing gradients: {_names(by['vanishing'])}")
    return tuple(out)


def _count(items: Sequence) -> str:
    return f"{len(items)} parameter{'s' if len(items) != 1 else ''}"


def _names(items: Sequence[ParamRecord], limit: int = 4) -> str:
    names = ", ".join(p.name for p in items[:limit])
    return names + ("…" if len(items) > limit else "")
