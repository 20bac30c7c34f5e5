"""HookManager: module and tensor hooks the user toggles; attached only while a run is in flight.

Hooks are registered on the user's modules when a run starts and removed in a `finally` when it
ends, so between runs (and after `close()`) the model's hook dicts are exactly the user's own.
What hooks see is queued on the run's NormBatch and read back with the run's single host sync.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

from .errors import GradExplorerError
from .modifiers import Modifier
from .stats import NormBatch
from .tensor_stats import PendingStats, TensorStats, queue_stats, read_stats
from .walk import RawGraph

MODULE_KINDS = ("forward_pre", "forward", "backward")
HOOK_KINDS = (*MODULE_KINDS, "tensor")
DEFAULT_KIND = "backward"


@dataclasses.dataclass(frozen=True)
class HookEvent:
    """One firing of one hook in the newest run.

    `tensors` maps "input" / "output" / "grad_input" / "grad_output" to one TensorStats per
    tensor (None where the gradient is None). `phase` is "forward", "backward", or "recompute"
    (a forward hook firing again during backward, as under torch.utils.checkpoint).
    """

    target: str
    kind: str
    call: int
    phase: str
    mechanism: str
    tensors: Mapping[str, tuple[TensorStats | None, ...]]
    seconds: float
    modifier: str | None = None
    raw: Mapping[str, tuple[torch.Tensor | None, ...]] | None = None


@dataclasses.dataclass
class _Pending:
    target: str
    kind: str
    call: int
    phase: str
    mechanism: str
    tensors: dict[str, list[PendingStats | None]]
    seconds: float = 0.0
    modifier: str | None = None
    raw: dict[str, list[torch.Tensor | None]] | None = None


class HookManager:
    """Which hooks are on, and the machinery to attach them for one run.

    Example:
        >>> hooks = HookManager(nn.Sequential(nn.Linear(2, 2)))
        >>> hooks.toggle("0")
        True
        >>> hooks.active
        [('0', 'backward')]
    """

    def __init__(self, model: nn.Module, keep_tensors: bool = False) -> None:
        self._paths = {p for p, _ in model.named_modules()}
        self._on: dict[tuple[str, str], None] = {}
        self.modifiers: dict[str, Modifier] = {}
        self.fallback: set[str] = set()
        self.keep_tensors = keep_tensors
        self.events: list[HookEvent] = []
        self.hook_seconds = 0.0
        self._pending: list[_Pending] = []
        self._phase = "forward"

    # ---- configuration -------------------------------------------------------------------
    @property
    def active(self) -> list[tuple[str, str]]:
        """(target, kind) pairs that are on, in the order they were turned on."""
        return list(self._on)

    def set(self, target: str, kind: str = DEFAULT_KIND, on: bool = True) -> bool:
        """Turn one hook on or off; returns whether it is on now."""
        self._check(target, kind)
        if on:
            self._on[(target, kind)] = None
        else:
            self._on.pop((target, kind), None)
        return on

    def toggle(self, target: str, kind: str = DEFAULT_KIND) -> bool:
        """Flip one hook; returns whether it is on now."""
        return self.set(target, kind, (target, kind) not in self._on)

    def set_modifier(self, target: str, modifier: Modifier | None) -> None:
        """Modify the gradient flowing back through `target` (a module's grad_input, or a graph
        node's incoming gradient) in explorer runs; None removes it."""
        kind = "tensor" if _is_node_id(target) else "backward"
        self._check(target, kind)
        if modifier is None:
            self.modifiers.pop(target, None)
        else:
            self.modifiers[target] = modifier

    def _wanted(self) -> list[tuple[str, str]]:
        """Hooks to register: those on, plus those a modifier needs."""
        extra = [(t, "tensor" if _is_node_id(t) else "backward") for t in self.modifiers]
        return list(dict.fromkeys([*self._on, *extra]))

    def clear(self) -> None:
        """Turn every hook and modifier off."""
        self._on.clear()
        self.modifiers.clear()

    def _check(self, target: str, kind: str) -> None:
        if kind not in HOOK_KINDS:
            raise GradExplorerError(f"hook kind must be one of {HOOK_KINDS}, got {kind!r}")
        if kind == "tensor":
            if not _is_node_id(target):
                raise GradExplorerError(
                    f"a tensor hook needs a graph node id (e.g. 'layer1/ReluBackward0#0'), got "
                    f"{target!r}; for a module use kind='backward', 'forward' or 'forward_pre'")
            return
        if target not in self._paths:
            close = difflib.get_close_matches(target, [p for p in self._paths if p], n=5)
            raise GradExplorerError(
                f"no module {target!r} in the model; did you mean {close}? "
                "Module paths are those of model.named_modules() ('' is the root).")

    # ---- one run ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def attached(self, model: nn.Module, batch: NormBatch) -> Iterator[None]:
        """Register the module hooks that are on; remove every one of them on exit."""
        self._pending, self._phase, self.hook_seconds = [], "forward", 0.0
        modules = dict(model.named_modules())
        handles: list[Any] = []
        calls: Counter[tuple[str, str]] = Counter()
        with warnings.catch_warnings():
            # full backward hooks on modules with no input requiring grad still report
            # grad_output; torch warns about that case on every run
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            try:
                for target, kind in self._wanted():
                    if kind == "tensor":
                        continue
                    module = modules[target]
                    if kind == "forward_pre":
                        handles.append(module.register_forward_pre_hook(
                            self._forward_pre(target, batch, calls), with_kwargs=True))
                    elif kind == "forward":
                        handles.append(module.register_forward_hook(
                            self._forward(target, batch, calls), with_kwargs=True))
                    elif target in self.fallback:
                        pre, post = self._fallback_backward(target, batch, calls)
                        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
                        handles.append(module.register_forward_hook(post))
                    else:
                        handles.append(module.register_full_backward_hook(
                            self._backward(target, batch, calls)))
                yield
            finally:
                for h in handles:
                    h.remove()

    def on_graph(self, raw: RawGraph, batch: NormBatch) -> None:
        """Forward is over: register tensor hooks on graph nodes; later forward hooks are recompute."""
        self._phase = "backward"
        calls: Counter[tuple[str, str]] = Counter()
        for target, kind in self._wanted():
            if kind != "tensor":
                continue
            node = raw.nodes.get(target)
            if node is None or node.kind in ("output", "param", "input", "tensor", "accumulate"):
                raise GradExplorerError(
                    f"no op node {target!r} in this run's graph; tensor hooks go on op nodes "
                    "(parameter gradients are in the report already). Ids change when the graph "
                    "does: check ex.graph.")
            node.fn.register_prehook(self._node_hook(target, batch, calls))

    def finish(self, values: list[float]) -> None:
        """Turn the queued statistics of this run into HookEvents."""
        self.events = [
            HookEvent(p.target, p.kind, p.call, p.phase, p.mechanism,
                      {k: tuple(None if s is None else read_stats(s, values) for s in v)
                       for k, v in p.tensors.items()},
                      p.seconds, p.modifier,
                      None if p.raw is None else {k: tuple(v) for k, v in p.raw.items()})
            for p in self._pending
        ]
        self._pending = []

    # ---- fallback for modules whose output is modified in place ----------------------------
    def can_fall_back(self, error: BaseException) -> bool:
        """True when `error` is the full-backward-hook-vs-in-place clash and a fallback is left."""
        text = f"{error} {error.__cause__}"
        backward = {t for t, k in self._wanted() if k == "backward"}
        return "BackwardHookFunction" in text and bool(backward - self.fallback)

    def fall_back(self) -> None:
        """Use tensor hooks instead of register_full_backward_hook for every backward hook."""
        self.fallback |= {t for t, k in self._wanted() if k == "backward"}

    # ---- hook factories ----------------------------------------------------------------------
    def _new(self, target: str, kind: str, mechanism: str, calls: Counter) -> _Pending:
        forward_kind = kind in ("forward_pre", "forward")
        phase = "recompute" if self._phase == "backward" and forward_kind else self._phase
        phase = "backward" if not forward_kind else phase
        p = _Pending(target, kind, calls[(target, kind)], phase, mechanism, {},
                     modifier=self._modifier_text(target, kind))
        if self.keep_tensors:
            p.raw = {}
        calls[(target, kind)] += 1
        self._pending.append(p)
        return p

    def _modifier_text(self, target: str, kind: str) -> str | None:
        m = self.modifiers.get(target)
        return m.describe() if m and kind in ("backward", "tensor") else None

    def _record(self, p: _Pending, name: str, tensors: Any, batch: NormBatch) -> None:
        flat = tensors if isinstance(tensors, (tuple, list)) else [tensors]
        flat = [t if isinstance(t, torch.Tensor) or t is None else None for t in tree_flatten(flat)[0]
                if t is None or isinstance(t, torch.Tensor)]
        slot = p.tensors.setdefault(name, [])
        for t in flat:
            slot.append(None if t is None else queue_stats(t, batch))
            if p.raw is not None:
                p.raw.setdefault(name, []).append(None if t is None else t.detach().clone())

    def _guarded(self, target: str, kind: str, body: Callable) -> Callable:
        def hook(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return body(*args)
            except GradExplorerError:
                raise
            except Exception as e:
                raise GradExplorerError(
                    f"the {kind} hook on {target!r} failed: {type(e).__name__}: {e}. "
                    "The run was stopped and the model is unchanged; turn this hook off with "
                    f"ex.set_hook({target!r}, kind={kind!r}, on=False).") from e
            finally:
                spent = time.perf_counter() - start
                self.hook_seconds += spent
                if self._pending:
                    self._pending[-1].seconds += spent

        return hook

    def _forward_pre(self, target: str, batch: NormBatch, calls: Counter) -> Callable:
        def body(module: nn.Module, args: tuple, kwargs: dict) -> None:
            p = self._new(target, "forward_pre", "forward pre hook", calls)
            self._record(p, "input", (args, kwargs), batch)

        return self._guarded(target, "forward_pre", body)

    def _forward(self, target: str, batch: NormBatch, calls: Counter) -> Callable:
        def body(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            p = self._new(target, "forward", "forward hook", calls)
            self._record(p, "input", (args, kwargs), batch)
            self._record(p, "output", output, batch)

        return self._guarded(target, "forward", body)

    def _backward(self, target: str, batch: NormBatch, calls: Counter) -> Callable:
        modifier = self.modifiers.get(target)

        def body(module: nn.Module, grad_input: tuple, grad_output: tuple) -> tuple | None:
            p = self._new(target, "backward", "full backward hook", calls)
            self._record(p, "grad_output", grad_output, batch)
            self._record(p, "grad_input", grad_input, batch)
            if modifier is None:
                return None
            changed = tuple(modifier.apply(grad_input))
            self._record(p, "grad_input_modified", changed, batch)
            return changed

        return self._guarded(target, "backward", body)

    def _fallback_backward(self, target: str, batch: NormBatch, calls: Counter):
        """Tensor hooks on aliased inputs (grad_input) and on outputs (grad_output), for modules
        whose output is modified in place, where register_full_backward_hook raises."""
        modifier = self.modifiers.get(target)
        current: list[_Pending] = []

        def pre(module: nn.Module, args: tuple, kwargs: dict) -> tuple:
            p = self._new(target, "backward", "tensor hooks (fallback: output modified in place)",
                          calls)
            p.tensors = {"grad_output": [], "grad_input": []}
            current.append(p)

            def alias(t: Any) -> Any:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t = t.view_as(t)
                    t.register_hook(self._guarded(target, "backward", self._grad_slot(
                        p, "grad_input", batch, modifier)))
                return t

            return tree_map(alias, args), tree_map(alias, kwargs)

        def post(module: nn.Module, args: tuple, output: Any) -> None:
            p = current.pop()
            for t in tree_flatten(output)[0]:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(self._guarded(target, "backward", self._grad_slot(
                        p, "grad_output", batch, None)))

        return self._guarded(target, "backward", pre), self._guarded(target, "backward", post)

    def _grad_slot(self, p: _Pending, name: str, batch: NormBatch, modifier: Modifier | None):
        def body(grad: torch.Tensor) -> torch.Tensor | None:
            self._record(p, name, grad, batch)
            if modifier is None:
                return None
            changed = modifier.apply([grad])[0]
            self._record(p, name + "_modified", changed, batch)
            return changed

        return body

    def _node_hook(self, target: str, batch: NormBatch, calls: Counter) -> Callable:
        modifier = self.modifiers.get(target)

        def body(grad_outputs: tuple) -> tuple | None:
            p = self._new(target, "tensor", "autograd node pre-hook", calls)
            self._record(p, "grad_output", grad_outputs, batch)
            if modifier is None:
                return None
            changed = tuple(modifier.apply(grad_outputs))
            self._record(p, "grad_output_modified", changed, batch)
            return changed

        return self._guarded(target, "tensor", body)


def _is_node_id(target: str) -> bool:
    return "#" in target or target.startswith(("param:", "input:", "acc:", "output"))
