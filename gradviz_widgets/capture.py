"""One forward + backward of the user's model that leaves the model exactly as it was.

Detached aliases of the parameters (copies when another device is asked for) and copies of the
buffers are swapped into the model, as `torch.func.functional_call` does, for the whole forward
*and* backward (activation checkpointing re-runs forward during backward; that re-run must use
them too), so `.grad`, BatchNorm running stats, `requires_grad` and the device of the real
tensors are never touched (capture_state.py puts every object back by identity). Gradients come
from `torch.autograd.grad`, not `.backward()` (except under reentrant checkpointing, which
refuses `.grad()`; see backward.py). The global RNG and generators the model owns are forked and
re-seeded per run, so runs with dropout are reproducible and the user's RNG streams unchanged.
A run records a graph even when called under `torch.no_grad()` / `inference_mode()`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import nn

from .attribution import ScopeTracker, WritesParameter
from .backward import REENTRANT_CHECKPOINT, gradients, summed
from .capture_report import build_report, freeze_graph
from .capture_state import (
    StandIns,
    aliased_storages,
    forked_rng,
    make_stand_ins,
    no_cyclic_gc,
    swapped,
)
from .checks import check_loss_args, check_model, check_seed, check_thresholds, unwrap_compiled
from .devices import resolve_device
from .errors import GradExplorerError
from .graph import GradGraph
from .inputs import CallArgs, make_loss
from .report import GradReport
from .stats import NormBatch, Thresholds
from .walk import HOOK_NODE_MARK, RawGraph, instrument, leaf_names, walk


class RunHooks(Protocol):
    """What capture needs from a hook manager (see hooks.HookManager)."""

    def attached(self, model: nn.Module, batch: NormBatch) -> contextlib.AbstractContextManager: ...

    def on_graph(self, raw: RawGraph, batch: NormBatch) -> None: ...

    def finish(self, values: list[float]) -> None: ...


@dataclasses.dataclass(frozen=True)
class Capture:
    """The graph and the report of one run."""

    graph: GradGraph
    report: GradReport


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
    runner, wrapped = unwrap_compiled(model)
    check_model(model)
    check_loss_args(loss_fn, target)
    seed = check_seed(seed)
    thresholds = check_thresholds(thresholds)
    _check_something_trainable(model, sample_input)
    run_device = resolve_device(device, model)
    model = runner  # wrappers are see-through: names and the graph are the user's module's
    notes = (wrapped,) if wrapped else ()
    copied: frozenset[str] = frozenset()
    while True:  # each rerun copies one more parameter the forward writes into
        try:
            with torch.inference_mode(False), torch.enable_grad(), no_cyclic_gc():
                return _capture(
                    model,
                    runner,
                    sample_input,
                    loss_fn,
                    target,
                    run_device,
                    seed,
                    thresholds,
                    track_flow,
                    hooks,
                    notes,
                    copied,
                )
        except WritesParameter as w:
            if w.name in copied:
                raise GradExplorerError(
                    f"forward writes into parameter {w.name!r} in place "
                    "even through a copy; please report this"
                ) from None
            copied = copied | {w.name}


def _capture(
    model,
    runner,
    sample_input,
    loss_fn,
    target,
    run_device,
    seed,  # noqa: ANN001
    thresholds,
    track_flow,
    hooks,
    notes,
    copied,
) -> Capture:
    """One run; `runner` is the module called (the model, or what a wrapper wraps);
    `copied` names parameters that get a copy instead of an alias (the forward writes them)."""
    started = time.perf_counter()
    prepared = CallArgs.from_sample(sample_input).prepared(run_device)
    stand_ins = make_stand_ins(model, run_device, copied)
    params = stand_ins.params
    target_here = _to_device(target, run_device)
    tracker = ScopeTracker(model)
    tracker.guard = aliased_storages(stand_ins)
    if copied:
        notes = (
            *notes,
            f"the forward writes into {', '.join(sorted(copied))} in place (e.g. a "
            "weight constraint); the run used a copy, so the model was not changed",
        )
    batch = NormBatch(run_device)
    raw: RawGraph | None = None
    hook_ctx = hooks.attached(model, batch) if hooks else contextlib.nullcontext()
    try:
        with forked_rng(run_device, seed), hook_ctx, swapped(model, stand_ins):
            names = _leaf_names(stand_ins, prepared)
            with tracker.tracking(), _watching_checkpoints() as cut_off:
                output = _forward(runner, prepared)
                tracker.claim(output)  # a custom Function's output at the root is the root's
                tracker.in_loss = True
                loss, how = make_loss(output, loss_fn, target_here)
                loss = _leaf_loss(loss, names, how)
            del output
            raw = walk(loss, tracker.owner, names, tracker.calls)
            tracker.release()
            if track_flow:
                instrument(raw, batch, modified=hooks.modifiers if hooks else ())
            if hooks:
                hooks.on_graph(raw, batch)
            wanted = _wanted(raw, stand_ins)
            reentrant = any(n.op == REENTRANT_CHECKPOINT for n in raw.nodes.values())
            real = [p for _, p in stand_ins.real.values() if p.requires_grad]
            parts = gradients(loss, [t for _, t in wanted], reentrant, protect=real)
            notes = (*notes, *_direct_use_note(wanted, parts, stand_ins))
            grads = summed([i for i, _ in wanted], parts)
            del parts
            loss_slot = batch.add_scalar(loss)
            del loss
        present = [g for g in grads.values() if g is not None]
        leaf_slots = batch.add(present)
        nonzero_at = batch.add_nonzero_counts(present)
        numels = [g.numel() for g in present]
        del present
        values = batch.resolve()
        if hooks:
            hooks.finish(values)
    finally:
        tracker.release()
        if raw is not None:
            raw.release()
    leaf_pairs, zero_fractions = _leaf_numbers(grads, values, leaf_slots, nonzero_at, numels)
    del wanted, grads
    graph = freeze_graph(model, raw, leaf_pairs, values, tracker, thresholds)
    if stand_ins.written:
        notes = (
            *notes,
            "the forward wrote into parameter(s) "
            f"{', '.join(stand_ins.written[:4])} in place, so their values changed as in a "
            "plain forward; the explorer could not prevent it (an in-place op on a weight)",
        )
    if cut_off:
        notes = (
            *notes,
            "a torch.utils.checkpoint(use_reentrant=True) got no input that "
            "requires grad, so what it computes gets no gradient (as in plain backward); "
            "use checkpoint(..., use_reentrant=False)",
        )
    report = build_report(
        model,
        params,
        graph,
        leaf_pairs,
        zero_fractions,
        values[loss_slot],
        how,
        thresholds,
        run_device,
        tracker,
        0.0,
        batch.syncs,
        notes=notes,
        checkpoint_without_grad=bool(cut_off),
    )
    # the whole run, the analysis included
    report = dataclasses.replace(report, duration_s=time.perf_counter() - started)
    return Capture(graph, report)


def _leaf_numbers(
    grads: dict[str, torch.Tensor | None],
    values: list[float],
    slots: list[int],
    nonzero_at: int,
    numels: list[int],
) -> tuple[dict, dict]:
    """leaf id -> (norm, max |g|) or None, and leaf id -> share of exactly-zero elements."""
    slot_iter = iter(slots)
    pairs = {
        leaf_id: None if g is None else NormBatch.pair(values, next(slot_iter))
        for leaf_id, g in grads.items()
    }
    reached = [leaf_id for leaf_id, g in grads.items() if g is not None]
    zero_fractions = {
        leaf_id: 1.0 - values[nonzero_at + i] / n if n else 0.0
        for i, (leaf_id, n) in enumerate(zip(reached, numels))
    }
    return pairs, zero_fractions


def _leaf_names(stand_ins: StandIns, prepared: CallArgs) -> dict[int, tuple[str, str]]:
    """Leaf names for the walk: stand-ins and inputs, and the model's own Parameters under their
    parameter's name (a parameter used directly shows as the same graph node as its stand-in)."""
    names = leaf_names(stand_ins.params, prepared.leaves())
    for name, p in stand_ins.real.values():
        names.setdefault(id(p), ("param", name))
    return names


def _wanted(raw: RawGraph, stand_ins: StandIns) -> list[tuple[str, torch.Tensor]]:
    """(leaf id, tensor) for every leaf to differentiate: the graph's leaves, every parameter's
    stand-in, and every real Parameter (reentrant checkpoints may reach those only during
    backward); entries sharing an id are summed."""
    wanted = [(leaf.id, leaf.tensor) for leaf in raw.leaves if leaf.tensor is not None]
    seen = {id(t) for _, t in wanted}
    wanted += [
        (f"param:{n}", p)
        for n, p in stand_ins.params.items()
        if p.requires_grad and id(p) not in seen
    ]
    wanted += [
        (f"param:{n}", p)
        for n, p in stand_ins.real_params.items()
        if p.requires_grad and id(p) not in seen
    ]
    return wanted


def _direct_use_note(
    wanted: list[tuple[str, torch.Tensor]], parts: tuple, stand_ins: StandIns
) -> tuple[str, ...]:
    """A finding naming the parameters the graph reached as themselves, not via the model."""
    names = sorted(
        {
            stand_ins.real[id(t)][0]
            for (_, t), g in zip(wanted, parts)
            if g is not None and id(t) in stand_ins.real
        }
    )
    if not names:
        return ()
    return (
        f"{len(names)} parameter{'s' if len(names) > 1 else ''} also used directly, not "
        "through the model's attributes (a parameter list captured before the run, "
        "optimizer.param_groups, a plain Python list in forward): that use is included in "
        f"the gradient, as in plain backward: {', '.join(names[:4])}"
        + ("…" if len(names) > 4 else ""),
    )


def _leaf_loss(loss: torch.Tensor, names: dict[int, tuple[str, str]], how: str) -> torch.Tensor:
    """A loss that is itself a leaf (a parameter returned as is) gets an identity node walk sees
    through; a leaf that is none of the run's tensors cannot depend on the model."""
    if loss.grad_fn is not None:
        return loss
    if id(loss) not in names:
        raise GradExplorerError(
            f"The loss ({how}) is a leaf tensor that requires grad but was not computed from the "
            "model's output or parameters (e.g. torch.tensor(..., requires_grad=True)), so no "
            "parameter can get a gradient from it. Compute the loss from the output."
        )
    alias = torch.ops.aten.alias.default(loss)
    alias.grad_fn.metadata[HOOK_NODE_MARK] = "leaf loss"
    return alias


@contextlib.contextmanager
def _watching_checkpoints() -> Iterator[list[bool]]:
    """Notice torch.utils.checkpoint's warning that none of its inputs requires grad (every
    warning is passed on to the user as it was)."""
    seen: list[bool] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield seen
    finally:
        for w in caught:
            if "None of the inputs have requires_grad=True" in str(w.message):
                seen.append(True)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _check_something_trainable(model: nn.Module, sample_input: Any) -> None:
    params = list(model.parameters())
    if any(p.requires_grad for p in params):
        return
    if any(t.requires_grad for _, t in CallArgs.from_sample(sample_input).leaves()):
        return
    raise GradExplorerError(
        f"All {len(params)} parameters have requires_grad=False and no input requires grad, so "
        "no gradient can be computed. Unfreeze what you want to inspect "
        "(p.requires_grad_(True)) or pass an input with requires_grad=True."
    )


def _to_device(value: Any, device: torch.device) -> Any:
    if value is None:
        return None
    return torch.utils._pytree.tree_map(
        lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value
    )


def _forward(model: nn.Module, call: CallArgs) -> Any:
    try:
        return model(*call.args, **call.kwargs)
    except GradExplorerError:
        raise
    except Exception as e:
        raise GradExplorerError(
            f"The model raised {type(e).__name__} during forward: {e}\n"
            f"Inputs given: {call.describe()}. Check that sample_input has the shapes and dtypes "
            "forward expects (a tuple is passed as several positional arguments, a dict as "
            "keyword arguments). The model was not changed."
        ) from e


__all__ = ["Capture", "capture"]
