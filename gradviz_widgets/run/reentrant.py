"""`.backward()` under reentrant checkpoint without writing anyone's `.grad`.

`torch.utils.checkpoint(use_reentrant=True)` recomputes its function during backward and runs
a backward of its own over the recomputed graph, which accumulates into every leaf it meets: the
run's stand-ins, but also tensors of the user that require grad without being registered
parameters (a module's plain tensor attribute, a tensor a closure holds). `SeenLeaves` watches the
torch calls of each recomputation (entered by a pre-hook on the checkpoint's autograd node, left
by its hook: a mode entered around `.backward()` itself would see only the call to backward) and
keeps each leaf's `.grad` as it first saw it, to be put back when backward is done; module tensor
attributes are known in advance (`tensor_attributes`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from .model_state import ModelIndex


class SeenLeaves(TorchFunctionMode):
    """While active: every leaf tensor that requires grad and enters a torch call, with the
    `.grad` it had then; `restore()` gives each its `.grad` object back."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[int, tuple[torch.Tensor, Any]] = {}
        self.depth = 0  # recomputations in progress (nested checkpoints enter again)

    @contextlib.contextmanager
    def during(self, checkpoints: Sequence[Any]) -> Iterator[None]:
        """Active while the autograd nodes `checkpoints` run, inside the block."""
        handles = []
        try:
            for node in checkpoints:
                handles.append(node.register_prehook(self._enter_node))
                handles.append(node.register_hook(self._leave_node))
            yield
        finally:
            for h in handles:
                h.remove()
            while self.depth:  # a checkpoint that raised never reached its hook
                self._leave_node()

    def _enter_node(self, *_: Any) -> None:
        self.__enter__()
        self.depth += 1

    def _leave_node(self, *_: Any) -> None:
        self.depth -= 1
        self.__exit__(None, None, None)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        flat, _ = tree_flatten((args, kwargs or {}))
        for t in flat:
            if (
                isinstance(t, torch.Tensor)
                and t.requires_grad
                and t.is_leaf
                and id(t) not in self.saved
            ):
                self.saved[id(t)] = (t, t.grad)
        return func(*args, **(kwargs or {}))

    def restore(self) -> None:
        for t, grad in self.saved.values():
            t.grad = grad
        self.saved.clear()


def tensor_attributes(index: ModelIndex) -> list[torch.Tensor]:
    """Leaf tensors requiring grad that modules hold as plain attributes (not registered)."""
    return [
        v
        for _, m in index.modules
        for v in vars(m).values()
        if isinstance(v, torch.Tensor) and v.requires_grad and v.is_leaf
    ]
