"""Recorder: the events one run's hooks fill in, their statistics and the time spent in them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ..errors import GradExplorerError
from ..stats.norms import NormBatch
from ..stats.tensor import StatsCache, read_stats
from .events import HookEvent, Pending
from .modifiers import Modifier
from .plan import HookPlan


class Recorder:
    """Per-run recording state: pending events, the event a running hook records into, call
    counters, one StatsCache (each tensor measured once) and the seconds spent inside hooks."""

    def __init__(self, plan: HookPlan, batch: NormBatch) -> None:
        self.plan, self.batch = plan, batch
        self.pending: list[Pending] = []
        self.current: Pending | None = None  # the event the hook running now records into
        self.calls: Counter[tuple[str, str]] = Counter()
        self.stats = StatsCache()
        self.phase = "forward"  # "backward" once the graph is built: forward hooks recompute
        self.seconds = 0.0

    def new(self, target: str, kind: str, mechanism: str, call: int, queue: bool = True) -> Pending:
        """A new event; `queue=False` leaves it out of this run's events until `use(event)`."""
        if kind in ("forward_pre", "forward"):
            phase = "recompute" if self.phase == "backward" else "forward"
        else:
            phase = "backward"
        m = self.modifier(target, kind)
        p = Pending(target, kind, call, phase, mechanism, {}, modifier=m.describe() if m else None)
        if self.plan.keep_tensors:
            p.raw = {}
        return self.use(p) if queue else p

    def use(self, p: Pending) -> Pending:
        """Make `p` the event the running hook records into (and its time is charged to)."""
        if not p.queued:
            p.queued = True
            self.pending.append(p)
        self.current = p
        return p

    def next_call(self, target: str, kind: str) -> int:
        """The index of this call of `target`'s `kind` hook in the run (0, 1, ...)."""
        call = self.calls[(target, kind)]
        self.calls[(target, kind)] += 1
        return call

    def modifier(self, target: str, kind: str) -> Modifier | None:
        """The modifier a hook of `kind` on `target` applies (only gradient hooks apply one)."""
        return self.plan.modifiers.get(target) if kind in ("backward", "tensor") else None

    def record(self, p: Pending, name: str, tensors: Any) -> None:
        """Queue statistics of every tensor in `tensors` (nested too) under `name`."""
        flat = tensors if isinstance(tensors, (tuple, list)) else [tensors]
        slot = p.tensors.setdefault(name, [])
        for t in tree_flatten(flat)[0]:
            if t is not None and not isinstance(t, torch.Tensor):
                continue
            slot.append(None if t is None else self.stats.get(t, self.batch))
            if p.raw is not None:
                p.raw.setdefault(name, []).append(None if t is None else t.detach().clone())

    def put(self, p: Pending, name: str, slot: int, size: int, t: torch.Tensor) -> None:
        """Queue statistics of `t` into slot `slot` (of `size`) under `name`."""
        p.tensors.setdefault(name, [None] * size)[slot] = self.stats.get(t, self.batch)
        if p.raw is not None:
            p.raw.setdefault(name, [None] * size)[slot] = t.detach().clone()

    def modified(
        self, p: Pending, name: str, grads: tuple, modifier: Modifier | None
    ) -> tuple | None:
        """The modifier's result (recorded as `<name>_modified`), or None to keep the grads."""
        if modifier is None:
            return None
        changed = tuple(modifier.apply(grads))
        self.record(p, name + "_modified", changed)
        return changed

    def guarded(self, target: str, kind: str, body: Callable) -> Callable:
        """`body` as a hook: timed, and any failure raised as a GradExplorerError naming it."""
        modifier = self.modifier(target, kind)
        what = f"the {kind} hook on {target!r}" + (
            f" (modifier: {modifier.describe()})" if modifier else ""
        )
        off = f"ex.set_hook({target!r}, kind={kind!r}, on=False)" + (
            f" / ex.set_modifier({target!r})" if modifier else ""
        )

        def hook(*args: Any) -> Any:
            start = time.perf_counter()
            self.current = None
            try:
                return body(*args)
            except GradExplorerError:
                raise
            except Exception as e:
                raise GradExplorerError(
                    f"{what} failed: {type(e).__name__}: {e}. The run was stopped and the model "
                    f"is unchanged; turn it off with {off}."
                ) from e
            finally:
                spent = time.perf_counter() - start
                self.seconds += spent
                if self.current is not None:
                    self.current.seconds += spent
                self.current = None

        return hook

    def events(self, values: list[float]) -> tuple[HookEvent, ...]:
        """The run's events, their statistics read from the resolved `values`."""
        self.stats.clear()
        return tuple(
            HookEvent(
                p.target,
                p.kind,
                p.call,
                p.phase,
                p.mechanism,
                {
                    k: tuple(None if s is None else read_stats(s, values) for s in v)
                    for k, v in p.tensors.items()
                },
                p.seconds,
                p.modifier,
                None if p.raw is None else {k: tuple(v) for k, v in p.raw.items()},
            )
            for p in self.pending
        )
