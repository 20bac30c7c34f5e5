"""HookManager: module and tensor hooks the user toggles; attached only while a run is in flight.

Hooks are registered on the user's modules when a run starts and removed in a `finally` when it
ends, so between runs (and after `close()`) the model's hook dicts are exactly the user's own.
What hooks see is queued on the run's NormBatch and read back with the run's single host sync.
"""

from __future__ import annotations

import contextlib
import difflib
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from .errors import GradExplorerError
from .hook_config import HookConfig, _Unhookable
from .hook_events import HookEvent, _Pending
from .hook_fallback import FallbackBackward
from .modifiers import Modifier
from .stats import NormBatch
from .tensor_stats import StatsCache, read_stats
from .walk import RawGraph


class HookManager(HookConfig):
    """Attaches the configured hooks for one run and turns what they saw into HookEvents.

    Example:
        >>> hooks = HookManager(nn.Sequential(nn.Linear(2, 2)))
        >>> hooks.toggle("0")
        True
        >>> hooks.active
        [('0', 'backward')]
    """

    def __init__(self, model: nn.Module, keep_tensors: bool = False) -> None:
        super().__init__(model)
        self.keep_tensors = keep_tensors
        self.events: list[HookEvent] = []
        self.hook_seconds = 0.0
        self._pending: list[_Pending] = []
        self._current: _Pending | None = None  # the event the hook running now records into
        self._handles: list[Any] = []
        self._stats = StatsCache()
        self._phase = "forward"

    # ---- one run ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def attached(self, model: nn.Module, batch: NormBatch) -> Iterator[None]:
        """Register the module hooks that are on; remove every one of them on exit."""
        self._pending, self._phase, self.hook_seconds = [], "forward", 0.0
        self._stats.clear()
        modules = dict(model.named_modules())
        handles: list[Any] = []  # all of this run's hooks, on modules, tensors and graph nodes
        self._handles = handles
        calls: Counter[tuple[str, str]] = Counter()
        # register_full_backward_hook sets module._is_full_backward_hook = True for good; restored
        # below, or the user could no longer call register_backward_hook on that module
        full_flags: dict[nn.Module, Any] = {}
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
                        handles.append(
                            module.register_forward_pre_hook(
                                self._forward_pre(target, batch, calls), with_kwargs=True
                            )
                        )
                    elif kind == "forward":
                        handles.append(
                            module.register_forward_hook(
                                self._forward(target, batch, calls), with_kwargs=True
                            )
                        )
                    else:
                        if getattr(module, "_is_full_backward_hook", None) is False:
                            # the user has a register_backward_hook (non-full) hook here, and torch
                            # refuses full backward hooks next to it
                            self.fallback.add(target)
                            self.fallback_reasons[target] = (
                                "the module has a non-full backward hook"
                            )
                        if target in self.fallback:
                            pre, post = self._fallback_backward(target, batch, calls, handles)
                            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
                            handles.append(module.register_forward_hook(post))
                        else:
                            full_flags.setdefault(module, module._is_full_backward_hook)
                            handles += self._full_backward(module, target, batch, calls)
                yield
            except BaseException:
                self._pending = []
                raise
            finally:
                for h in handles:
                    h.remove()
                self._handles = []
                for module, flag in full_flags.items():
                    if not module._backward_hooks:
                        module._is_full_backward_hook = flag

    def on_graph(self, raw: RawGraph, batch: NormBatch) -> None:
        """Forward is over: register tensor hooks on graph nodes; later forward hooks are recompute."""
        self._phase = "backward"
        calls: Counter[tuple[str, str]] = Counter()
        for target, kind in self._wanted():
            if kind != "tensor":
                continue
            node = raw.nodes.get(target)
            if node is None or node.kind != "op":
                ops = [i for i, n in raw.nodes.items() if n.kind == "op"]
                close = difflib.get_close_matches(target, ops, n=5, cutoff=0.5)
                raise GradExplorerError(
                    f"no op node {target!r} in this run's graph; did you mean {close}? Tensor "
                    "hooks go on op nodes (parameter gradients are in the report already); ids "
                    "change when the graph does, see ex.graph. Turn this hook off with "
                    f"ex.set_hook({target!r}, kind='tensor', on=False)."
                )
            self._handles.append(node.fn.register_prehook(self._node_hook(target, batch, calls)))

    def finish(self, values: list[float]) -> None:
        """Turn the queued statistics of this run into HookEvents."""
        self._stats.clear()
        self.events = [
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
            for p in self._pending
        ]
        self._pending = []

    # ---- hook factories ----------------------------------------------------------------------
    def _new(
        self, target: str, kind: str, mechanism: str, call: int, queue: bool = True
    ) -> _Pending:
        """A new event; `queue=False` leaves it out of this run's events until `_use(event)`."""
        if kind in ("forward_pre", "forward"):
            phase = "recompute" if self._phase == "backward" else "forward"
        else:
            phase = "backward"
        p = _Pending(
            target, kind, call, phase, mechanism, {}, modifier=self._modifier_text(target, kind)
        )
        if self.keep_tensors:
            p.raw = {}
        return self._use(p) if queue else p

    def _use(self, p: _Pending) -> _Pending:
        """Make `p` the event the running hook records into (and its time is charged to)."""
        if not p.queued:
            p.queued = True
            self._pending.append(p)
        self._current = p
        return p

    @staticmethod
    def _next_call(calls: Counter, key: tuple[str, str]) -> int:
        call = calls[key]
        calls[key] += 1
        return call

    def _modifier_text(self, target: str, kind: str) -> str | None:
        m = self.modifiers.get(target)
        return m.describe() if m and kind in ("backward", "tensor") else None

    def _record(self, p: _Pending, name: str, tensors: Any, batch: NormBatch) -> None:
        flat = tensors if isinstance(tensors, (tuple, list)) else [tensors]
        flat = [
            t if isinstance(t, torch.Tensor) or t is None else None
            for t in tree_flatten(flat)[0]
            if t is None or isinstance(t, torch.Tensor)
        ]
        slot = p.tensors.setdefault(name, [])
        for t in flat:
            slot.append(None if t is None else self._stats.get(t, batch))
            if p.raw is not None:
                p.raw.setdefault(name, []).append(None if t is None else t.detach().clone())

    def _guarded(self, target: str, kind: str, body: Callable) -> Callable:
        modifier = self.modifiers.get(target) if kind in ("backward", "tensor") else None
        what = f"the {kind} hook on {target!r}" + (
            f" (modifier: {modifier.describe()})" if modifier else ""
        )
        off = f"ex.set_hook({target!r}, kind={kind!r}, on=False)" + (
            f" / ex.set_modifier({target!r})" if modifier else ""
        )

        def hook(*args: Any) -> Any:
            start = time.perf_counter()
            self._current = None
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
                self.hook_seconds += spent
                if self._current is not None:
                    self._current.seconds += spent
                self._current = None

        return hook

    def _forward_pre(self, target: str, batch: NormBatch, calls: Counter) -> Callable:
        def body(module: nn.Module, args: tuple, kwargs: dict) -> None:
            p = self._new(
                target,
                "forward_pre",
                "forward pre hook",
                self._next_call(calls, (target, "forward_pre")),
            )
            self._record(p, "input", (args, kwargs), batch)

        return self._guarded(target, "forward_pre", body)

    def _forward(self, target: str, batch: NormBatch, calls: Counter) -> Callable:
        def body(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            p = self._new(
                target, "forward", "forward hook", self._next_call(calls, (target, "forward"))
            )
            self._record(p, "input", (args, kwargs), batch)
            self._record(p, "output", output, batch)

        return self._guarded(target, "forward", body)

    def _full_backward(
        self, module: nn.Module, target: str, batch: NormBatch, calls: Counter
    ) -> list[Any]:
        """register_full_backward_hook, with the hook of each call knowing that call's index.

        torch reads a module's backward hooks at the start of each call, before the forward
        pre-hooks run; a pre-hook then puts the hook for the next call in place.
        """
        key = (target, "backward")
        handle = module.register_full_backward_hook(self._backward(target, batch, calls[key]))

        def advance(module: nn.Module, args: tuple, kwargs: dict) -> None:
            calls[key] += 1
            module._backward_hooks[handle.id] = self._backward(target, batch, calls[key])

        def check(module: nn.Module, args: tuple, output: Any) -> None:
            if not isinstance(output, (torch.Tensor, tuple)):  # torch would warn and skip it
                kind = type(output).__name__
                self.fallback_reasons[target] = f"the module returns a {kind}"
                raise _Unhookable(
                    f"{target!r} returns a {kind}, which register_full_backward_hook cannot see "
                    "into; its backward hook is done with tensor hooks instead"
                )

        pre = module.register_forward_pre_hook(
            self._guarded(target, "backward", advance), with_kwargs=True
        )
        post = module.register_forward_hook(self._guarded(target, "backward", check))
        return [handle, pre, post]

    def _backward(self, target: str, batch: NormBatch, call: int) -> Callable:
        modifier = self.modifiers.get(target)

        def body(module: nn.Module, grad_input: tuple, grad_output: tuple) -> tuple | None:
            p = self._new(target, "backward", "full backward hook", call)
            self._record(p, "grad_output", grad_output, batch)
            self._record(p, "grad_input", grad_input, batch)
            return self._modified(p, "grad_input", grad_input, modifier, batch)

        return self._guarded(target, "backward", body)

    def _fallback_backward(
        self, target: str, batch: NormBatch, calls: Counter, tensor_handles: list[Any]
    ) -> tuple[Callable, Callable]:
        """register_full_backward_hook done with tensor hooks (see hook_fallback.py)."""
        hooks = FallbackBackward(self, target, batch, calls, tensor_handles)
        return self._guarded(target, "backward", hooks.pre), self._guarded(
            target, "backward", hooks.post
        )

    def _modified(
        self, p: _Pending, name: str, grads: tuple, modifier: Modifier | None, batch: NormBatch
    ) -> tuple | None:
        """The modifier's result (recorded as `<name>_modified`), or None to keep the grads."""
        if modifier is None:
            return None
        changed = tuple(modifier.apply(grads))
        self._record(p, name + "_modified", changed, batch)
        return changed

    def _node_hook(self, target: str, batch: NormBatch, calls: Counter) -> Callable:
        modifier = self.modifiers.get(target)

        def body(grad_outputs: tuple) -> tuple | None:
            p = self._new(
                target,
                "tensor",
                "autograd node pre-hook",
                self._next_call(calls, (target, "tensor")),
            )
            self._record(p, "grad_output", grad_outputs, batch)
            return self._modified(p, "grad_output", grad_outputs, modifier, batch)

        return self._guarded(target, "tensor", body)
