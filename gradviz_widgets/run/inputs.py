"""Calling the model with the user's sample input, and turning its output into one scalar loss."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import GradExplorerError
from .loss import own_loss_scalar


@dataclasses.dataclass(frozen=True)
class CallArgs:
    """Positional and keyword arguments for `model(*args, **kwargs)`."""

    args: tuple
    kwargs: dict

    @staticmethod
    def from_sample(sample_input: Any) -> CallArgs:
        """A tensor is one positional argument, a tuple/list several, a dict keyword arguments.

        Example:
            >>> CallArgs.from_sample({"x": torch.ones(1)}).kwargs.keys()
            dict_keys(['x'])
        """
        if isinstance(sample_input, Mapping):
            return CallArgs((), dict(sample_input))
        if isinstance(sample_input, (tuple, list)):
            return CallArgs(tuple(sample_input), {})
        return CallArgs((sample_input,), {})

    def leaves(self) -> list[tuple[str, torch.Tensor]]:
        """Named tensors in the arguments: `0`, `1`, ... for positional, the key for keywords."""
        named = []
        for i, a in enumerate(self.args):
            named += _named_tensors(str(i), a)
        for k, v in self.kwargs.items():
            named += _named_tensors(str(k), v)
        return named

    def prepared(self, device: torch.device) -> CallArgs:
        """A copy on `device` whose tensors are fresh leaves (the user's tensors are never touched)."""

        def prep(t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            # a copy: a model that edits its input in place must not edit the user's tensor
            leaf = t.detach().to(device, copy=True)
            differentiable = t.is_floating_point() or t.is_complex()
            return leaf.requires_grad_(t.requires_grad and differentiable)

        return CallArgs(tree_map(prep, self.args), tree_map(prep, self.kwargs))

    def describe(self) -> str:
        """Shapes of the input tensors, for error messages."""
        parts = [
            f"{name}: {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
            for name, t in self.leaves()
        ]
        return ", ".join(parts) or "no tensors"


def _named_tensors(prefix: str, value: Any) -> list[tuple[str, torch.Tensor]]:
    flat, _ = tree_flatten(value)
    tensors = [t for t in flat if isinstance(t, torch.Tensor)]
    if len(tensors) == 1 and isinstance(value, torch.Tensor):
        return [(prefix, value)]
    return [(f"{prefix}.{i}", t) for i, t in enumerate(tensors)]


def output_tensors(output: Any) -> list[tuple[str, torch.Tensor]]:
    """Named tensors inside a model output: tensor, tuple/list, dict, or dataclass-like object.

    Example:
        >>> [n for n, _ in output_tensors({"logits": torch.ones(2)})]
        ['output.logits']
    """
    if isinstance(output, torch.Tensor):
        return [("output", output)]
    found: list[tuple[str, torch.Tensor]] = []
    stack: list[tuple[str, Any]] = [("output", output)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, torch.Tensor):
            found.append((name, value))
        elif isinstance(value, Mapping):
            stack += [(f"{name}.{k}", v) for k, v in reversed(list(value.items()))]
        elif isinstance(value, (tuple, list)):
            stack += [(f"{name}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
            stack += [(f"{name}.{k}", v) for k, v in reversed(fields)]
    return found


def make_loss(
    output: Any, loss_fn: Callable[..., torch.Tensor] | None, target: Any
) -> tuple[torch.Tensor, str]:
    """The scalar to differentiate and a sentence saying which loss that is.

    Without `loss_fn`: the loss the model returned itself (`output.loss`, run/loss.py), else a
    scalar tensor output, else the sum of every floating-point output that requires grad.

    Example:
        >>> loss, how = make_loss(torch.ones(3, requires_grad=True) * 2, None, None)
        >>> how
        'sum of output'
    """
    if loss_fn is not None:
        try:
            loss = loss_fn(output) if target is None else loss_fn(output, target)
        except Exception as e:
            raise GradExplorerError(
                f"loss_fn raised {type(e).__name__}: {_sentence(str(e))} It is called as "
                f"{'loss_fn(output)' if target is None else 'loss_fn(output, target)'} "
                f"with {_describe_output(output)}."
            ) from e
        if not isinstance(loss, torch.Tensor):
            raise GradExplorerError(
                f"loss_fn returned {type(loss).__name__}, not a tensor; return a scalar tensor."
            )
        if loss.numel() != 1:
            raise GradExplorerError(
                f"loss_fn returned a tensor of shape {tuple(loss.shape)}; it must be a scalar. "
                "Reduce it, e.g. with .mean() or .sum(), or use reduction='mean'."
            )
        if loss.is_complex():
            raise GradExplorerError(
                f"loss_fn returned a complex tensor ({str(loss.dtype).replace('torch.', '')}); "
                "gradients are taken of a real scalar. Return e.g. loss.abs(), loss.real or "
                "loss.abs() ** 2."
            )
        name = getattr(loss_fn, "__name__", type(loss_fn).__name__)
        how = f"{name}(output{', target' if target is not None else ''})"
        _check_connected(loss, how, output)
        return _require_grad(_as_scalar(loss), how, output), how
    return _default_loss(output)


def _default_loss(output: Any) -> tuple[torch.Tensor, str]:
    """The model's own loss; else the sum of every floating-point output that requires grad (a
    scalar output as is). Outputs of different dtypes are summed in float64 (float32 on MPS):
    casting a large float32 sum to a float16 first output would read inf and blame the forward."""
    own = own_loss_scalar(output)
    if own is not None:
        return _require_grad(own[0], own[1], output), own[1]
    tensors = output_tensors(output)
    complex_out = [n for n, t in tensors if t.is_complex() and t.requires_grad]
    if complex_out:
        raise GradExplorerError(
            f"The model returns complex outputs ({', '.join(complex_out[:4])}) and no loss_fn "
            "was given; gradients are taken of a real scalar. Pass loss_fn=..., e.g. "
            "loss_fn=lambda out: out.abs().pow(2).sum()."
        )
    if len(tensors) == 1 and tensors[0][1].numel() == 1 and tensors[0][1].is_floating_point():
        return _require_grad(_as_scalar(tensors[0][1]), "the model's scalar output", output), (
            "the model's scalar output"
        )
    usable = [(n, t) for n, t in tensors if t.is_floating_point() and t.requires_grad]
    if not usable:
        _require_grad(None, "", output)
    how = " + ".join(f"sum of {n}" for n, _ in usable)
    if len({t.dtype for _, t in usable}) == 1:
        loss = usable[0][1].sum()
        for _, t in usable[1:]:
            loss = loss + t.sum()
        return loss, how
    wide = torch.float32 if usable[0][1].device.type == "mps" else torch.float64
    loss = usable[0][1].sum(dtype=wide)
    for _, t in usable[1:]:
        loss = loss + t.sum(dtype=wide).to(loss.device)
    return loss, f"{how} (in {str(wide).replace('torch.', '')})"


def _as_scalar(t: torch.Tensor) -> torch.Tensor:
    """`t` as a 0-d tensor; a 0-d tensor is returned as is, so the graph gains no view node."""
    return t if t.dim() == 0 else t.reshape(())


def _sentence(text: str) -> str:
    """`text` ending in exactly one full stop (an exception message may end in its own)."""
    text = text.rstrip() or "(no message)"
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _check_connected(loss: torch.Tensor, how: str, output: Any) -> None:
    """A loss_fn result with no graph although the output has one was not computed from the
    output (a constant, `.item()`, `.detach()`, torch.no_grad() inside loss_fn)."""
    if loss.requires_grad or not any(t.requires_grad for _, t in output_tensors(output)):
        return
    raise GradExplorerError(
        f"Nothing to differentiate: the loss ({how}) was not computed from the model's output "
        "by differentiable operations. It has no grad_fn although the output requires grad "
        f"({_describe_output(output)}), so no parameter can get a gradient from it. Compute the "
        "loss from the output with torch operations (not a constant torch.tensor(...), .item(), "
        ".detach(), an integer op such as argmax, or torch.no_grad())."
    )


def _require_grad(loss: torch.Tensor | None, how: str, output: Any) -> torch.Tensor:
    if loss is not None and loss.requires_grad and loss.is_floating_point():
        return loss
    raise GradExplorerError(
        f"Nothing to differentiate: {how or 'the model output'} does not require grad "
        f"({_describe_output(output)}). Check that some parameters have "
        "requires_grad=True, that forward does not run under torch.no_grad() or detach its "
        "result, and that the output is floating point (pass loss_fn=... for integer outputs)."
    )


def _describe_output(output: Any) -> str:
    tensors = output_tensors(output)
    if not tensors:
        return f"output of type {type(output).__name__} with no tensors"
    return ", ".join(
        f"{n} {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
        f"{' requires_grad' if t.requires_grad else ''}"
        for n, t in tensors[:6]
    )
