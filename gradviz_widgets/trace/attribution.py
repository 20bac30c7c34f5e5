"""Which module call created each autograd node.

A module stack is kept with global forward-pre/forward hooks (nothing is registered on the
user's modules), and a TorchFunctionMode claims every new grad_fn for the innermost module
call on the stack at the moment the op ran. Ops outside any child module belong to the root
(path ""); ops after the model's forward (the loss) belong to the pseudo-module "loss".
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ..ids import LOSS_SCOPE, Call, Scope  # noqa: F401 - re-exported: the id grammar

_INPLACE_DUNDERS = frozenset(
    {
        "__setitem__",
        "__iadd__",
        "__isub__",
        "__imul__",
        "__itruediv__",
        "__ifloordiv__",
        "__imod__",
        "__ipow__",
        "__iand__",
        "__ior__",
        "__ixor__",
        "__ilshift__",
        "__irshift__",
        "__imatmul__",
    }
)


class WritesParameter(BaseException):  # noqa: N818 - not an error: a signal to rerun
    """Raised before an op writes in place into the storage of a parameter the run aliases.

    A BaseException, so that a forward's own `except Exception` does not swallow it; capture
    catches it and runs again with a copy of that parameter.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


#: embedding functions -> (position, keyword) of their indices argument
_LOOKUPS: dict[Any, tuple[int, str]] = {
    torch.nn.functional.embedding: (0, "input"),
    torch.embedding: (1, "indices"),
}


def _write_targets(func: Any, args: tuple, kwargs: dict | None) -> list[Any]:
    """The tensors `func` writes into in place (empty for out-of-place ops)."""
    name = getattr(func, "__name__", "")
    out = (kwargs or {}).get("out")
    targets = [] if out is None else [out]
    if args and ((name.endswith("_") and not name.startswith("__")) or name in _INPLACE_DUNDERS):
        targets.append(args[0])
    return targets


def _storage(t: Any) -> int | None:
    try:
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None
    except (RuntimeError, NotImplementedError):  # sparse, meta, ...
        return None


class ScopeTracker(TorchFunctionMode):
    """Attributes grad_fn nodes to module calls while active.

    Example:
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> tracker = ScopeTracker(model)
        >>> with tracker.tracking():
        ...     y = model(torch.ones(1, 2))
        >>> tracker.owner[y.grad_fn]
        (('0', 0),)
    """

    def __init__(
        self, model: nn.Module, named: Iterable[tuple[str, nn.Module]] | None = None
    ) -> None:
        """`named`: `model.named_modules(remove_duplicate=False)`, when already at hand."""
        super().__init__()
        self.root = model
        self.paths: dict[int, str] = {}
        if named is None:
            named = model.named_modules(remove_duplicate=False)
        for path, module in named:
            self.paths.setdefault(id(module), path)
        self.stack: list[Call] = []
        self.calls: Counter[str] = Counter()
        self.grad_enabled: dict[str, list[bool]] = {}
        #: modules called without grad inside a reentrant checkpoint's forward (which runs
        #: its function under no_grad), told apart from a plain `torch.no_grad()` block
        self.in_checkpoint: set[str] = set()
        #: node -> scope; strong references, dropped by `release()` once the graph is built.
        self.owner: dict[Any, Scope] = {}
        self.in_loss = False
        #: storage pointer -> parameter name, for parameters whose stand-in is an alias: an
        #: in-place write into one raises WritesParameter before it happens
        self.guard: dict[int, str] = {}
        #: EmbeddingBackward0 node -> the indices its lookup took (its weight gradient is zero
        #: outside those rows), recorded here because reading them back from the node would
        #: unpack a saved tensor twice (checkpointing refuses; a user's unpack hook runs again)
        self.lookups: dict[Any, torch.Tensor] = {}
        #: nodes whose output got a tensor hook in forward (`h.register_hook(...)`): what
        #: enters them may differ from what their consumers sent
        self.hooked: set[Any] = set()

    @contextlib.contextmanager
    def tracking(self) -> Iterator[ScopeTracker]:
        """Install the global module hooks and the function mode; remove both on exit."""
        pre = nn.modules.module.register_module_forward_pre_hook(self._enter)
        post = nn.modules.module.register_module_forward_hook(self._exit)
        try:
            with self:
                yield self
        finally:
            pre.remove()
            post.remove()

    def release(self) -> None:
        """Drop the references to autograd nodes (and through them, to activations), newest
        first: dropping a long chain leaf-side first recurses in C and can overflow the stack."""
        owner, self.owner = self.owner, {}
        while owner:
            owner.popitem()
        self.lookups, self.hooked = {}, set()

    def current(self) -> Scope:
        if self.in_loss:
            return ((LOSS_SCOPE, 0),)
        return tuple(self.stack)

    def _enter(self, module: nn.Module, args: Any) -> None:
        path = self.paths.get(id(module))
        if path is None or module is self.root:
            return
        # Inputs were made outside this call: nodes no op claimed yet (outputs of custom autograd
        # Functions, which bypass __torch_function__) belong to the caller, not to this module.
        # (The mode is off while claiming: each .grad_fn read would dispatch to it.)
        with torch._C.DisableTorchFunction():
            self.claim(args)
        call = self.calls[path]
        self.calls[path] += 1
        enabled = torch.is_grad_enabled()
        self.grad_enabled.setdefault(path, []).append(enabled)
        if not enabled and _inside_reentrant_checkpoint():
            self.in_checkpoint.add(path)
        self.stack.append((path, call))

    def _exit(self, module: nn.Module, args: Any, output: Any) -> None:
        path = self.paths.get(id(module))
        if path is None or module is self.root:
            return
        # Outputs of ops that bypass __torch_function__ (custom autograd Functions) are
        # claimed here, still inside the module that produced them.
        with torch._C.DisableTorchFunction():
            self.claim(output)
        while self.stack and self.stack[-1][0] != path:
            self.stack.pop()  # a child that raised and was caught inside this forward
        if self.stack:
            self.stack.pop()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if self.guard:
            for t in _write_targets(func, args, kwargs):
                hit = self.guard.get(_storage(t))  # type: ignore[arg-type]
                if hit is not None:
                    raise WritesParameter(hit)
        out = func(*args, **(kwargs or {}))
        self.claim(out)
        if func in _LOOKUPS:
            self._note_lookup(func, args, kwargs or {}, out)
        elif func is torch.Tensor.register_hook and args and args[0].grad_fn is not None:
            self.hooked.add(args[0].grad_fn)
        return out

    def _note_lookup(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Remember the indices of an embedding lookup by the node it made."""
        at, name = _LOOKUPS[func]
        indices = args[at] if len(args) > at else kwargs.get(name)
        fn = out.grad_fn if isinstance(out, torch.Tensor) else None
        if fn is not None and isinstance(indices, torch.Tensor):
            self.lookups[fn] = indices

    def claim(self, value: Any) -> None:
        """Give every not-yet-claimed node reachable from tensors in `value` to the current scope."""
        owner = self.owner
        if isinstance(value, torch.Tensor):
            flat: Any = (value,)
        elif type(value) in (tuple, list) and all(isinstance(v, torch.Tensor) for v in value):
            flat = value  # the common cases, without tree_flatten
        else:
            flat, _ = tree_flatten(value)
        todo = [
            fn
            for t in flat
            if isinstance(t, torch.Tensor) and (fn := t.grad_fn) is not None and fn not in owner
        ]
        if not todo:
            return
        scope = self.current()
        while todo:
            node = todo.pop()
            if node in owner:
                continue
            owner[node] = scope
            for nxt, _ in node.next_functions:
                if nxt is not None and nxt not in owner:
                    todo.append(nxt)


def _inside_reentrant_checkpoint() -> bool:
    """Whether this call runs inside `torch.utils.checkpoint`'s reentrant forward (a frame of
    `CheckpointFunction.forward` on the stack): asked only of calls without grad."""
    code = getattr(getattr(torch.utils.checkpoint, "CheckpointFunction", None), "forward", None)
    code = getattr(code, "__code__", None)
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False
