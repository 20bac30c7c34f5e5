"""One forward + backward of the user's model that leaves the model exactly as it was.

Detached aliases of the parameters (copies when another device is asked for) and copies of the
buffers are swapped into the model, as `torch.func.functional_call` does, for the whole forward
*and* backward (activation checkpointing re-runs forward during backward; that re-run must use
them too), so `.grad`, BatchNorm running stats, `requires_grad` and the device of the real
tensors are never touched (run/model_state.py puts every object back by identity). Gradients come
from `torch.autograd.grad`, not `.backward()` (except under reentrant checkpointing, which
refuses `.grad()`; see run/backward.py). The global RNGs (torch, numpy, Python `random`) are forked
and re-seeded per run, and generators the model owns set back (run/rng.py), so runs with dropout
are reproducible and the user's RNG streams unchanged.
A run records a graph even when called under `torch.no_grad()` / `inference_mode()`.
The stages of a run (prepare -> forward -> trace -> backward -> read_back -> report) are in
run/stages.py; the settings travel as one RunSettings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..errors import GradExplorerError
from ..trace.attribution import WritesParameter
from ..vocabulary import Thresholds
from .checks import check_model, unwrap_compiled
from .devices import resolve_device
from .inputs import CallArgs
from .model_state import ModelIndex, no_cyclic_gc, swapped
from .rng import forked_rng
from .settings import RunSettings
from .stages import backward, forward, prepare, read_back, release, report, trace
from .state import Capture, RunHooks, RunState, Subject
from .timing import count_run, timed, timed_block


def capture(
    model: nn.Module,
    sample_input: Any,
    *,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    target: Any = None,
    device: str | torch.device | None = None,
    seed: int | None = 0,
    thresholds: Thresholds | None = None,
    track_flow: bool = True,
    autocast: torch.dtype | None = None,
    hooks: RunHooks | None = None,
) -> Capture:
    """Run forward + backward once and describe every gradient, leaving `model` untouched.

    Example:
        >>> model = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
        >>> result = capture(model, torch.randn(4, 3))
        >>> sorted(result.report.param_norms) == sorted(dict(model.named_parameters()))
        True
    """
    if not isinstance(model, nn.Module):
        raise GradExplorerError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    settings = RunSettings.checked(
        loss_fn=loss_fn,
        target=target,
        device=device,
        seed=seed,
        thresholds=thresholds,
        track_flow=track_flow,
        autocast=autocast,
    )
    return _run_checked(model, sample_input, settings, hooks)


def run(
    model: nn.Module, sample_input: Any, settings: RunSettings, hooks: RunHooks | None = None
) -> Capture:
    """`capture` with settings checked already (RunSettings.checked).

    Example:
        >>> model = nn.Sequential(nn.Linear(3, 1))
        >>> run(model, torch.randn(2, 3), RunSettings(seed=1)).report.device
        'cpu'
    """
    return _run_checked(model, sample_input, settings, hooks)


def _run_checked(
    model: nn.Module, sample_input: Any, settings: RunSettings, hooks: RunHooks | None
) -> Capture:
    runner, wrapped = unwrap_compiled(model)
    index = ModelIndex.of(runner)  # the one walk of the module tree (the reruns share it)
    check_model(runner, index)
    _check_something_trainable(index, sample_input)
    device = resolve_device(settings.device, model)
    # wrappers are see-through: names and the graph are the user's module's
    notes = (wrapped,) if wrapped else ()
    subject = Subject(runner, runner, sample_input, device, notes, index)
    copied: frozenset[str] = frozenset()
    while True:  # each rerun copies one more parameter the forward writes into
        try:
            with torch.inference_mode(False), torch.enable_grad(), no_cyclic_gc():
                done = _run_once(subject, settings, hooks, copied)
            if math.isfinite(done.report.loss) or settings.probe_nonfinite:
                return done
            # once more, with the same seed: which op of the forward made the NaN/Inf
            settings = dataclasses.replace(settings, probe_nonfinite=True)
        except WritesParameter as w:
            if w.name in copied:
                raise GradExplorerError(
                    f"forward writes into parameter {w.name!r} in place "
                    "even through a copy; please report this"
                ) from None
            copied = copied | {w.name}


def _run_once(
    subject: Subject, settings: RunSettings, hooks: RunHooks | None, copied: frozenset[str]
) -> Capture:
    """One run through the stages; everything of the model is back in place when it ends."""
    count_run()
    state = timed("prepare", prepare, subject, settings, hooks, copied)
    model = subject.model
    hook_ctx = hooks.attached(model, state.batch) if hooks else contextlib.nullcontext()
    try:
        with timed_block("swap_in", "swap_out", _in_place(state, hook_ctx, model)):
            timed("forward", forward, state)
            trace(state)
            timed("backward", backward, state)
        timed("norms", read_back, state)
    finally:
        timed("release", release, state)
    return timed("freeze", report, state)


@contextlib.contextmanager
def _in_place(
    state: RunState, hook_ctx: contextlib.AbstractContextManager, model: nn.Module
) -> Iterator[None]:
    """The RNG forked, the hooks attached and the stand-ins swapped in, for forward + backward."""
    with (
        forked_rng(state.device, state.settings.seed),
        hook_ctx,
        swapped(model, state.stand_ins, state.index),
    ):
        yield


def _check_something_trainable(index: ModelIndex, sample_input: Any) -> None:
    params = [p for _, p in index.params]
    if any(p.requires_grad for p in params):
        return
    leaves = [t for _, t in CallArgs.from_sample(sample_input).leaves()]
    if any(t.requires_grad for t in leaves):
        return
    if not params:
        integer = any(not (t.is_floating_point() or t.is_complex()) for t in leaves)
        raise GradExplorerError(
            "The model has no parameters and no input requires grad"
            f"{' (an integer input cannot)' if integer else ''}, so there is nothing to take a "
            "gradient with respect to. Pass a floating-point input with requires_grad=True "
            "(e.g. x.float().requires_grad_()) or a model that has parameters."
        )
    raise GradExplorerError(
        f"All {len(params)} parameters have requires_grad=False and no input requires grad, so "
        "no gradient can be computed. Unfreeze what you want to inspect "
        "(p.requires_grad_(True)) or pass an input with requires_grad=True."
    )


__all__ = ["Capture", "RunSettings", "capture", "run"]
