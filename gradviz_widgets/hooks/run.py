"""HookRun: the hooks of one run, registered when it starts and removed in a `finally`.

A run reads a HookPlan (what the user turned on) and HookFacts (what earlier runs learned) and
changes neither: what it registered, learned and recorded comes back as its HookRecord. Between
runs the model's hook dicts are exactly the user's own. What hooks see is queued on the run's
NormBatch and read back with the run's single host sync. `with_fallback` retries a run whose
full backward hooks clashed with an in-place op, with tensor hooks instead.
"""

from __future__ import annotations

import contextlib
import difflib
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn

from ..errors import GradExplorerError, did_you_mean
from ..stats.norms import NormBatch
from ..trace.walk import RawGraph
from .clash import HookFacts, InplaceClash, Unhookable, inplace_clash
from .events import HookRecord
from .fallback import FallbackBackward
from .plan import HookPlan
from .recorder import Recorder

T = TypeVar("T")
FULL = "full backward hook"
FALLBACK = "tensor hooks (fallback)"


def with_fallback(plan: HookPlan, facts: HookFacts, attempt: Callable[[HookRun], T]) -> T:
    """`attempt(HookRun(plan, facts))`; when its full backward hooks clash with an in-place op
    (or cannot see a module), once more with tensor hooks for every backward hook.

    Example:
        >>> with_fallback(HookPlan(), HookFacts(), lambda run: run.facts == HookFacts())
        True
    """
    first = HookRun(plan, facts)
    try:
        return attempt(first)
    except GradExplorerError as e:
        clash = inplace_clash(e)
        if clash is None or not first.facts.can_fall_back(plan.backward_targets()):
            raise
    # retried outside the except block: its errors stand on their own; what the first
    # attempt learned (a user's non-full backward hook) is kept
    fallen = first.facts.falling_back(plan.backward_targets(), clash)
    return attempt(HookRun(plan, fallen, clash))


class HookRun:
    """The hooks of one run: attach (module hooks), on_graph (node hooks), finish (events).

    Example:
        >>> run = HookRun(HookPlan().with_hook("0"), HookFacts())
        >>> run.mechanisms()
        {'0': 'full backward hook'}
    """

    def __init__(self, plan: HookPlan, facts: HookFacts, clash: InplaceClash | None = None) -> None:
        self.plan = plan
        self.facts = facts  # what this run goes by; it adds what it learns
        self.clash = clash
        self.modifiers = plan.modifiers
        self.handles: list[Any] = []  # this run's hooks on modules, tensors and graph nodes
        self.registered = 0
        self.rec = Recorder(plan, NormBatch(torch.device("cpu")))  # replaced by attached()
        self.record = HookRecord(facts=facts, clash=clash)

    def mechanisms(self) -> dict[str, str]:
        """Backward hook target -> how this run implements it."""
        return {
            t: FALLBACK if t in self.facts.fallback else FULL for t in self.plan.backward_targets()
        }

    @contextlib.contextmanager
    def attached(self, model: nn.Module, batch: NormBatch) -> Iterator[None]:
        """Register the module hooks that are on; remove every one of them on exit."""
        self.rec = Recorder(self.plan, batch)
        modules = dict(model.named_modules())
        _check_present(modules, [t for t, kind in self.plan.wanted() if kind != "tensor"])
        # register_full_backward_hook sets module._is_full_backward_hook = True for good; restored
        # below, or the user could no longer call register_backward_hook on that module
        full_flags: dict[nn.Module, Any] = {}
        with warnings.catch_warnings():
            # full backward hooks on modules with no input requiring grad still report
            # grad_output; torch warns about that case on every run
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            try:
                for target, kind in self.plan.wanted():
                    if kind != "tensor":
                        self._register(modules[target], target, kind, full_flags)
                yield
            finally:
                self._remove()
                for module, flag in full_flags.items():
                    if not module._backward_hooks:
                        module._is_full_backward_hook = flag

    def _register(self, module: nn.Module, target: str, kind: str, full_flags: dict) -> None:
        if kind == "forward_pre":
            self.add(module.register_forward_pre_hook(self._forward_pre(target), with_kwargs=True))
        elif kind == "forward":
            self.add(module.register_forward_hook(self._forward(target), with_kwargs=True))
        else:
            if getattr(module, "_is_full_backward_hook", None) is False:
                # the user has a register_backward_hook (non-full) hook here, and torch refuses
                # full backward hooks next to it
                self.facts = self.facts.with_fallback(
                    target, "the module has a non-full backward hook"
                )
            if target in self.facts.fallback:
                hooks = FallbackBackward(self, target)
                pre = self.rec.guarded(target, "backward", hooks.pre)
                self.add(module.register_forward_pre_hook(pre, with_kwargs=True))
                self.add(
                    module.register_forward_hook(self.rec.guarded(target, "backward", hooks.post))
                )
            else:
                full_flags.setdefault(module, module._is_full_backward_hook)
                self._full_backward(module, target)

    def add(self, handle: Any) -> None:
        """Keep `handle` to remove it when the run ends."""
        self.handles.append(handle)
        self.registered += 1

    def _remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def on_graph(self, raw: RawGraph, batch: NormBatch) -> None:
        """Forward is over: register tensor hooks on graph nodes; later forward hooks are recompute."""
        self.rec.phase = "backward"
        for target, kind in self.plan.wanted():
            if kind != "tensor":
                continue
            node = raw.nodes.get(target)
            if node is None or node.kind != "op":
                ops = [i for i, n in raw.nodes.items() if n.kind == "op"]
                close = difflib.get_close_matches(target, ops, n=5, cutoff=0.5)
                raise GradExplorerError(
                    f"no op node {target!r} in this run's graph{did_you_mean(close)}. Tensor "
                    "hooks go on op nodes (parameter gradients are in the report already); ids "
                    "change when the graph does, see ex.graph. Turn this hook off with "
                    f"ex.set_hook({target!r}, kind='tensor', on=False)."
                )
            self.add(node.fn.register_prehook(self._node_hook(target)))

    def finish(self, values: list[float]) -> None:
        """Turn the queued statistics of this run into its HookRecord."""
        self.record = HookRecord(
            self.rec.events(values),
            self.rec.seconds,
            self.mechanisms(),
            self.facts,
            self.clash,
            self.registered,
        )
        self.rec.pending = []

    # ---- hook factories ----------------------------------------------------------------------
    def _forward_pre(self, target: str) -> Callable:
        def body(module: nn.Module, args: tuple, kwargs: dict) -> None:
            call = self.rec.next_call(target, "forward_pre")
            p = self.rec.new(target, "forward_pre", "forward pre hook", call)
            self.rec.record(p, "input", (args, kwargs))

        return self.rec.guarded(target, "forward_pre", body)

    def _forward(self, target: str) -> Callable:
        def body(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            call = self.rec.next_call(target, "forward")
            p = self.rec.new(target, "forward", "forward hook", call)
            self.rec.record(p, "input", (args, kwargs))
            self.rec.record(p, "output", output)

        return self.rec.guarded(target, "forward", body)

    def _full_backward(self, module: nn.Module, target: str) -> None:
        """register_full_backward_hook, with the hook of each call knowing that call's index.

        torch reads a module's backward hooks at the start of each call, before the forward
        pre-hooks run; a pre-hook then puts the hook for the next call in place.
        """
        calls = self.rec.calls
        key = (target, "backward")
        handle = module.register_full_backward_hook(self._backward(target, calls[key]))

        def advance(module: nn.Module, args: tuple, kwargs: dict) -> None:
            calls[key] += 1
            module._backward_hooks[handle.id] = self._backward(target, calls[key])

        def check(module: nn.Module, args: tuple, output: Any) -> None:
            if not isinstance(output, (torch.Tensor, tuple)):  # torch would warn and skip it
                kind = type(output).__name__
                raise Unhookable(
                    f"{target!r} returns a {kind}, which register_full_backward_hook cannot see "
                    "into; its backward hook is done with tensor hooks instead",
                    InplaceClash(f"the module returns a {kind}", target),
                )

        guarded = self.rec.guarded
        self.add(handle)
        self.add(
            module.register_forward_pre_hook(guarded(target, "backward", advance), with_kwargs=True)
        )
        self.add(module.register_forward_hook(guarded(target, "backward", check)))

    def _backward(self, target: str, call: int) -> Callable:
        modifier = self.plan.modifiers.get(target)

        def body(module: nn.Module, grad_input: tuple, grad_output: tuple) -> tuple | None:
            p = self.rec.new(target, "backward", FULL, call)
            self.rec.record(p, "grad_output", grad_output)
            self.rec.record(p, "grad_input", grad_input)
            return self.rec.modified(p, "grad_input", grad_input, modifier)

        return self.rec.guarded(target, "backward", body)

    def _node_hook(self, target: str) -> Callable:
        modifier = self.plan.modifiers.get(target)

        def body(grad_outputs: tuple) -> tuple | None:
            call = self.rec.next_call(target, "tensor")
            p = self.rec.new(target, "tensor", "autograd node pre-hook", call)
            self.rec.record(p, "grad_output", grad_outputs)
            return self.rec.modified(p, "grad_output", grad_outputs, modifier)

        return self.rec.guarded(target, "tensor", body)


def _check_present(modules: dict[str, nn.Module], targets: list[str]) -> None:
    """Every hooked module path is still in the model (one deleted or renamed since the hook
    went on would fail the run with a bare KeyError)."""
    gone = sorted({t for t in targets if t not in modules})
    if gone:
        raise GradExplorerError(
            f"hooks are on module(s) {', '.join(map(repr, gone))}, no longer in the model "
            "(deleted or renamed since); turn them off with ex.set_hook(path, on=False) "
            "or ex.clear_hooks(), then run again"
        )
