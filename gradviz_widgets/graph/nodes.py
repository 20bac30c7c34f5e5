"""The small nouns of a backward graph as frozen plain data: GradNode, GradEdge, ModuleScope.

Edges point the way data flowed forward (producer -> consumer), as torchviz draws them;
gradients flowed the other way, and each edge carries the norm of what flowed along it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..ids import Scope

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class GradNode:
    """One node: an autograd op, a leaf tensor, the loss output, or a collapsed module call.

    `grad_norm` / `grad_max` describe the gradient w.r.t. what this node produced, as it
    arrived in this run (None when no gradient reached it). `grad_max` (max |g|) is read for
    leaves (parameters, inputs, their AccumulateGrad) and is 1.0 at the loss output (d loss /
    d loss); for an op node or a folded module only the norm is measured, so its `grad_max`
    is 0.0 when the norm is 0.0 and None otherwise.
    """

    id: str
    op: str
    kind: str  # "op" | "accumulate" | "param" | "input" | "tensor" | "output" | "module"
    module: str
    label: str
    scope: Scope = ()
    shape: tuple[int, ...] | None = None
    grad_norm: float | None = None
    grad_max: float | None = None
    status: str = "none"
    order: int | None = None  # position in backward execution
    members: tuple[str, ...] = ()  # for kind == "module": the node ids folded into it
    # for kind == "module": the worst status of the parameters folded into it ("" when none)
    # and, when that is not healthy, what it says ("8 params: no gradient (frozen)")
    param_status: str = ""
    param_text: str = ""
    # for kind == "module": the norm of what it passed to its inputs and parameters, when that
    # gave its colour and the status of what entered it (`grad_norm`) differs (None otherwise)
    grad_out: float | None = None
    #: False where this run did not measure what reached it (a run whose flow was measured
    #: only for the edges one view draws: `GradExplorer.run(view=...)`)
    measured: bool = True
    #: what the forward pass left here that no gradient shows: the loss's value where it is
    #: NaN/Inf ("loss = nan") and, on the op whose output first held NaN/Inf, FORWARD_ORIGIN
    #: (a NaN loss sends a finite 1.0 back: every gradient may be healthy); "" otherwise
    forward_note: str = ""


#: `GradNode.forward_note` of the op whose output first held NaN/Inf in the forward pass
FORWARD_ORIGIN = "NaN/Inf first made here (forward)"
#: ... and of a folded module or ×N group holding that op
FORWARD_INSIDE = "NaN/Inf first made inside (forward)"


@dataclasses.dataclass(frozen=True)
class GradEdge:
    """Producer `src` fed consumer `dst` in forward; `grad_norm` flowed dst -> src in backward.

    Along edges only the norm is measured (exactly): `grad_max` is 0.0 when nothing but zeros
    flowed, else None.
    """

    src: str
    dst: str
    grad_norm: float | None = None
    grad_max: float | None = None
    status: str = "none"
    #: on a merged edge: `grad_norm` adds pieces of one producer's gradient in quadrature (no
    #: sum the run measured covers them: a ×N group of some of the blocks reading one bias),
    #: an approximation of the norm of their sum
    approx: bool = False
    #: False where this run did not measure the flow along it (see `GradNode.measured`)
    measured: bool = True


@dataclasses.dataclass(frozen=True)
class ModuleScope:
    """One module of the model (or the "loss" pseudo-module) in the module tree."""

    path: str
    type: str
    calls: int
    parent: str | None
    children: tuple[str, ...]
    params: tuple[str, ...]

    @property
    def depth(self) -> int:
        return 0 if self.path == "" else self.path.count(".") + 1


def built(cls: type[T], *values: Any) -> T:
    """A frozen dataclass (GradNode, GradEdge, ParamRecord) from its field values in order,
    without running the generated `__init__`: for the thousands of nodes and edges of a run. Equal to `cls(*values)`
    in every way (fields, eq, hash, repr, pickle); trailing fields with defaults may be left out.

    Example:
        >>> built(GradEdge, "a", "b", 1.0, 1.0, "healthy") == GradEdge("a", "b", 1.0, 1.0, "healthy")
        True
        >>> built(GradNode, "n", "Op", "op", "", "Op").status
        'none'
    """
    return maker(cls, len(values))(*values)


def maker(cls: type[T], count: int) -> Callable[..., T]:
    """The function `built(cls, ...)` calls for `count` field values: a loop over thousands of
    objects calls it directly, without `built`'s lookups per object.

    Example:
        >>> maker(GradEdge, 2)("a", "b") == GradEdge("a", "b")
        True
    """
    makers = _MAKERS.get(cls) or _MAKERS.setdefault(cls, _makers(cls))
    made: Callable[..., T] = makers[count]
    return made


def _makers(cls: type) -> dict[int, Any]:
    """For each count of leading fields given, a function setting the instance's `__dict__` in one
    step (the rest from their defaults): 1.4 µs a GradNode against 2.4 µs for a `dict.update`
    per field set, which matters at 14,000 objects a click. Written out as source, as `dataclasses` writes `__init__`:
    the names are this module's field names, never user text."""
    fields = dataclasses.fields(cls)
    required = sum(f.default is dataclasses.MISSING for f in fields)
    out: dict[int, Any] = {}
    for given in range(required, len(fields) + 1):
        names = [f.name for f in fields[:given]]
        rest = {f.name: f.default for f in fields[given:]}
        body = ", ".join([*(f"{n!r}: {n}" for n in names), "**rest"])
        source = (
            f"def make({', '.join(names)}):\n"
            f"    o = new(cls)\n    put(o, '__dict__', {{{body}}})\n    return o\n"
        )
        scope = {"new": object.__new__, "put": object.__setattr__, "cls": cls, "rest": rest}
        exec(source, scope)  # noqa: S102
        out[given] = scope["make"]
    return out


_MAKERS: dict[type, dict[int, Any]] = {}

#: kinds never drawn as a box: an AccumulateGrad node is merged into its parameter
#: (render/dot.py), so no count a reader sees may include one
UNDRAWN_KINDS = frozenset({"accumulate"})


def drawn_count(nodes: Iterable[GradNode]) -> int:
    """How many of `nodes` a drawing shows: the one basis of every node count (folded labels,
    the "N of M nodes shown" line, the page).

    Example:
        >>> drawn_count([GradNode("a", "A", "op", "", "A"), GradNode("g", "G", "accumulate", "", "G")])
        1
    """
    return sum(1 for n in nodes if n.kind not in UNDRAWN_KINDS)


__all__ = [
    "FORWARD_INSIDE",
    "FORWARD_ORIGIN",
    "UNDRAWN_KINDS",
    "GradEdge",
    "GradNode",
    "ModuleScope",
    "built",
    "drawn_count",
    "maker",
]
