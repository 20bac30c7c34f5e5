"""Exact norms of the part of a producer's gradient that one module call's consumers sent it.

A tensor read inside a module call and outside it (BERT's hidden state: by the query, key and
value projections inside the self-attention and by the residual outside) gets the sum of its
consumers' pieces. A folded module shows what it passed on to that tensor: the sum of the
pieces from its own consumers, whose norm no sum of norms gives (pieces cancel in part). For
every module call holding some but not all of a producer's consumers, and every container (a
ModuleList of blocks, never called itself, which a ×N group of its blocks stands for: a bias
made once and read by every block and by the head), the pieces are added up
as they arrive (in their dtype, as autograd adds them), one output of the producer at a time,
and the sum is measured exactly
(`PartialSums`); graph/flows.py uses the result where a view takes exactly those edges
together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import torch

from ..ids import Scope
from ..stats.norms import NormBatch
from ..vocabulary import combine_norms

#: partial sums a run keeps at most (each holds one sum while its pieces arrive)
MAX_PARTIALS = 1024


@dataclasses.dataclass(eq=False)
class _Sum:
    """The pieces sent to one output of a producer by some of its consumers, added up."""

    expected: int
    got: int = 0
    total: torch.Tensor | None = None
    slot: int | None = None

    def add(self, g: torch.Tensor | None, batch: NormBatch) -> None:
        self.got += 1
        if g is not None:  # added in its own dtype, as autograd adds the pieces it gets
            self.total = g if self.total is None else self.total + g
        if self.got == self.expected:
            self.finish(batch)

    def finish(self, batch: NormBatch) -> None:
        """Measure what arrived (no piece arrives from a consumer that got no gradient)."""
        if self.total is not None and self.slot is None:
            self.slot = batch.add([self.total], norms_only=True)[0]
        self.total = None


@dataclasses.dataclass(eq=False)
class Part:
    """The pieces of producer `src` from the consumers `dsts` (sorted, with repeats)."""

    src: str
    dsts: tuple[str, ...]
    sums: list[_Sum]


@dataclasses.dataclass(frozen=True)
class Piece:
    """One edge of the plan: its producer, consumer, the producer's output it feeds, and the
    scope of its consumer."""

    key: int  # id() of the edge
    src: str
    dst: str
    out_nr: int
    scope: Scope
    visible: bool = True  # its consumer's flow hook sees the piece


class PartialSums:
    """The partial sums of one run: planned from the graph before backward, fed by the flow
    hooks (`add`), measured as each completes or at `finish` (before the run's one sync).

    Example:
        >>> batch = NormBatch(torch.device("cpu"))
        >>> pieces = [Piece(1, "h", "q", 0, (("attn", 0),)), Piece(2, "h", "k", 0, (("attn", 0),)),
        ...           Piece(3, "h", "res", 0, ())]
        >>> sums = PartialSums.plan(pieces, batch)
        >>> sums.add(1, torch.tensor([3.0, 0.0])); sums.add(2, torch.tensor([-3.0, 4.0]))
        >>> values = batch.resolve()
        >>> [(p.src, p.dsts, norm) for p, norm in sums.norms(values)]
        [('h', ('k', 'q'), 4.0)]
    """

    def __init__(self, parts: list[Part], by_edge: dict[int, list[_Sum]], batch: NormBatch):
        self.parts = parts
        self.by_edge = by_edge
        self.batch = batch

    @classmethod
    def plan(
        cls, pieces: Iterable[Piece], batch: NormBatch, made_in: Mapping[str, Scope] | None = None
    ) -> PartialSums:
        """A partial sum for each module call that holds at least two but not all of a
        producer's consumer edges (`pieces`: every edge; a set with an edge whose piece no
        hook sees is left out), for each container that does (a ModuleList of blocks: a ×N
        group of them all takes its edges), and for each call the producer was made in
        (`made_in`: its scope) whose outside holds two or more but not all of them: what
        entered that call from the loss side (T5's position bias, made in block 0 and read by
        every block)."""
        by_src: dict[str, list[Piece]] = {}
        for p in pieces:
            by_src.setdefault(p.src, []).append(p)
        parts: list[Part] = []
        by_edge: dict[int, list[_Sum]] = {}
        made_in = made_in or {}
        for src, mine in by_src.items():
            for inside in _inside_calls(mine, made_in.get(src, ())):
                if len(parts) >= MAX_PARTIALS:
                    return cls(parts, by_edge, batch)
                parts.append(_part(src, inside, by_edge))
        return cls(parts, by_edge, batch)

    def __bool__(self) -> bool:
        return bool(self.parts)

    def add_exit(self, src: str, dsts: tuple[str, ...]) -> int | None:
        """A sum that arrives whole: what left a module's hook node toward `src`, for the
        consumers `dsts` (sorted, with repeats) whose pieces entered it. It follows the planned
        sums, so a view taking exactly those edges shows what the module passed back after its
        hook. Returns the key to `add` it under (None past MAX_PARTIALS).

        Example:
            >>> batch = NormBatch(torch.device("cpu"))
            >>> sums = PartialSums.plan((), batch)
            >>> key = sums.add_exit("h", ("k", "q"))
            >>> sums.add(key, torch.tensor([1.5, 2.0]))
            >>> [(p.dsts, norm) for p, norm in sums.norms(batch.resolve())]
            [(('k', 'q'), 2.5)]
        """
        if len(self.parts) >= MAX_PARTIALS:
            return None
        key = -len(self.parts) - 1  # never an edge's id(), which is positive
        whole = _Sum(1)
        self.parts.append(Part(src, dsts, [whole]))
        self.by_edge[key] = [whole]
        return key

    def wants(self, key: int) -> bool:
        return key in self.by_edge

    def add(self, key: int, g: torch.Tensor | None) -> None:
        """The piece that flowed along edge `key` (None: it carried no gradient)."""
        for s in self.by_edge.get(key, ()):
            s.add(g, self.batch)

    def finish(self) -> None:
        """Measure the sums whose last pieces never came (their consumers got no gradient)."""
        for part in self.parts:
            for s in part.sums:
                s.finish(self.batch)
        self.by_edge = {}

    def norms(self, values: Sequence[float]) -> list[tuple[Part, float | None]]:
        """Each part with the norm of its sum (outputs of the producer are distinct tensors:
        their sums combine in quadrature, which is exact for them); None where no piece came."""
        out = []
        for part in self.parts:
            measured = [values[s.slot] for s in part.sums if s.slot is not None]
            out.append((part, combine_norms(measured) if measured else None))
        return out


def _inside_calls(mine: list[Piece], made_in: Scope = ()) -> list[list[Piece]]:
    """The distinct sets of `mine` (one producer's edges) that one module call's consumers
    hold, or one container's (`_holders`), or the consumers outside one of the calls the
    producer was made in (`made_in`), with at least two edges and not all of them."""
    holders: dict[object, list[Piece]] = {}
    keys_of: dict[Scope, list[object]] = {}
    for p in mine:
        found = keys_of.get(p.scope)
        if found is None:
            found = keys_of[p.scope] = _holders(p.scope)
        for key in found:
            holders.setdefault(key, []).append(p)
    outside = [[p for p in mine if entry not in p.scope] for entry in made_in]
    seen: set[frozenset[int]] = set()
    out = []
    for inside in [*holders.values(), *outside]:
        keys = frozenset(p.key for p in inside)
        usable = all(p.visible for p in inside)
        if usable and 2 <= len(keys) < len(mine) and keys not in seen:
            seen.add(keys)
            out.append(inside)
    return out


def _holders(scope: Scope) -> list[object]:
    """What holds a consumer made in `scope`: each module call of it, and each container
    between two of them, a module never called itself (a ModuleList of blocks), keyed by the
    calls above it. A ×N group of all a container's blocks takes the container's edges
    together, which no call holds.

    Example:
        >>> _holders((("blocks.3", 0), ("blocks.3.f", 0)))
        [((), 'blocks'), ('blocks.3', 0), ('blocks.3.f', 0)]
        >>> _holders((("enc", 0), ("enc.layer.1", 0)))
        [('enc', 0), ((('enc', 0),), 'enc.layer'), ('enc.layer.1', 0)]
    """
    out: list[object] = []
    outer = ""
    for i, entry in enumerate(scope):
        path = entry[0]
        if path.startswith(outer):  # a call of a module outside the caller has no container
            parts = path.split(".")
            out += [
                (scope[:i], ".".join(parts[:k])) for k in range(outer.count(".") + 1, len(parts))
            ]
        out.append(entry)
        outer = path + "."
    return out


def _part(src: str, inside: list[Piece], by_edge: dict[int, list[_Sum]]) -> Part:
    by_out: dict[int, list[Piece]] = {}
    for p in inside:
        by_out.setdefault(p.out_nr, []).append(p)
    sums = []
    for group in by_out.values():
        s = _Sum(len(group))
        sums.append(s)
        for p in group:
            by_edge.setdefault(p.key, []).append(s)
    return Part(src, tuple(sorted(p.dst for p in inside)), sums)
