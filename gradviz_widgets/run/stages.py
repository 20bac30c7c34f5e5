"""The stages of one run around one RunState: prepare -> forward -> trace -> backward ->
read_back -> report (run/capture.py runs them in this order, restoring everything in between)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..errors import GradExplorerError
from ..stats.norms import NormBatch
from ..trace.arrivals import measure_on_arrival, measured_on_arrival
from ..trace.attribution import ScopeTracker
from ..trace.walk import HOOK_NODE_MARK, FlowFacts, instrument, leaf_names, note_lookups, walk
from ..vocabulary import named_few
from .backward import REENTRANT_CHECKPOINT, direct_use_note, gradients, summed, wanted_leaves
from .forward_nan import FirstNonfinite
from .freeze import build_report, freeze_graph
from .grad_calls import GradCalls
from .inputs import CallArgs, make_loss, output_tensors
from .loss import own_loss_note
from .model_state import ModelIndex, StandIns, aliased_storages, make_stand_ins
from .nonfinite import held_finding, nonfinite_holders
from .param_attrs import stand_in_hint
from .reentrant import tensor_attributes
from .settings import RunSettings
from .state import Capture, RunHooks, RunState, Subject
from .timing import timed


def prepare(
    subject: Subject, settings: RunSettings, hooks: RunHooks | None, copied: frozenset[str]
) -> RunState:
    """Inputs and stand-ins on the run's device, the module tracker with its write guard;
    `copied` names parameters that get a copy instead of an alias (the forward writes them)."""
    started = time.perf_counter()
    model, device = subject.model, subject.device
    index = subject.index or ModelIndex.of(model)
    stand_ins = make_stand_ins(model, device, copied, index)
    tracker = ScopeTracker(model, index.all_modules)
    tracker.guard = aliased_storages(stand_ins)
    notes = list(subject.notes)
    if stand_ins.renormed:
        notes.append(
            f"{', '.join(stand_ins.renormed)}: nn.Embedding(max_norm=...) renormalises the rows "
            "it looks up in place during forward; the run used a copy, so the model was not "
            "changed (a plain forward changes those rows)"
        )
    if copied:
        notes.append(
            f"the forward writes into {', '.join(sorted(copied))} in place (e.g. a "
            "weight constraint); the run used a copy, so the model was not changed"
        )
    given = CallArgs.from_sample(subject.sample_input)
    call = given.prepared(device)
    replaced = {id(t): c for (_, t), (_, c) in zip(given.leaves(), call.leaves())}
    replaced.update((key, stand_ins.params[name]) for key, (name, _) in stand_ins.real.items())
    return RunState(
        model,
        subject.runner,
        settings,
        device,
        call,
        stand_ins,
        _to_device(settings.target, device),
        tracker,
        NormBatch(device),
        hooks,
        started,
        notes,
        index,
        replaced,
    )


def forward(state: RunState) -> None:
    """The model's forward and the loss, every new autograd node claimed by its module call."""
    names = leaf_names(state.stand_ins.params, state.call.leaves())
    for name, p in state.stand_ins.real.values():
        # the model's own Parameter, used directly, shows as the same node as its stand-in
        names.setdefault(id(p), ("param", name))
    state.names = names
    tracker = state.tracker
    probe = FirstNonfinite() if state.settings.probe_nonfinite else contextlib.nullcontext()
    with tracker.tracking(), _watching_checkpoints() as cut_off, _autocast(state), probe:
        output = _call(state.runner, state.call, state.stand_ins)
        tracker.claim(output)  # a custom Function's output at the root is the root's
        tracker.in_loss = True
        with GradCalls(state.replaced):  # autograd.grad inside loss_fn over the user's tensors
            loss, state.how = make_loss(output, state.settings.loss_fn, state.target)
        state.loss = _leaf_loss(loss, names, state.how)
    if state.settings.loss_fn is None:
        differentiable = [n for n, t in output_tensors(output) if t.requires_grad]
        state.notes += own_loss_note(state.how, differentiable)
    state.cut_off = bool(cut_off)
    state.nonfinite = probe.found if isinstance(probe, FirstNonfinite) else None


def trace(state: RunState) -> None:
    """The raw graph from the loss (stable ids), flow hooks on its nodes, the hooks' node hooks."""
    assert state.loss is not None
    tracker = state.tracker
    state.raw = timed("walk", walk, state.loss, tracker.owner, state.names, tracker.calls)
    if state.nonfinite is not None:
        _name_nonfinite(state)
    lookups = tracker.lookups  # release() drops the tracker's; the flow hooks keep the indices
    hooked = (
        [n.id for n in state.raw.nodes.values() if n.fn in tracker.hooked] if tracker.hooked else []
    )
    tracker.release()
    # a reentrant checkpoint's own backward adds to leaves while ours runs
    whole = not any(n.op == REENTRANT_CHECKPOINT for n in state.raw.nodes.values())
    if state.settings.track_flow:
        known = FlowFacts(
            modified=state.hooks.modifiers if state.hooks else (),
            leaves_whole=whole,
            hooked=frozenset(hooked),
            lookups=lookups,
            scope=state.settings.flow_scope,
        )
        state.partials = timed("flow_hooks", instrument, state.raw, state.batch, known)
    elif lookups:
        note_lookups(state.batch, lookups)
    if whole:  # after `instrument`, which reads the leaves' own hooks
        ours = {id(t) for t in state.stand_ins.params.values()}
        state.arrived = measure_on_arrival(measured_on_arrival(state.raw, ours), state.batch)
    if state.hooks:
        timed("hook_nodes", state.hooks.on_graph, state.raw, state.batch)


def backward(state: RunState) -> None:
    """Gradients of every wanted leaf (the user's `.grad` untouched), the loss queued."""
    assert state.loss is not None and state.raw is not None
    wanted = wanted_leaves(state.raw, state.stand_ins)
    checkpoints = [n.fn for n in state.raw.nodes.values() if n.op == REENTRANT_CHECKPOINT]
    real = [p for _, p in state.stand_ins.real.values() if p.requires_grad]
    if checkpoints:  # their own backward writes .grad of user tensors that are no parameters
        real += tensor_attributes(state.index)
    leaves = [t for _, t in wanted]
    parts = gradients(state.loss, leaves, bool(checkpoints), real, checkpoints)
    del checkpoints
    state.notes += direct_use_note(wanted, parts, state.stand_ins)
    state.grads = summed([i for i, _ in wanted], parts)
    del parts
    state.loss_slot = state.batch.add_scalar(state.loss)
    state.loss = None


def read_back(state: RunState) -> None:
    """Queue the numbers of the gradients not measured on arrival (`state.arrived`: those
    hold a stand-in of one zero) and read everything back in the run's one host sync."""
    grads, batch, arrived = state.grads, state.batch, state.arrived
    numels: dict[str, int] = {}
    rest_ids: list[str] = []  # one pass over the leaves (deep models have thousands)
    rest: list[torch.Tensor] = []
    g = None
    for leaf_id, g in grads.items():
        if g is not None:
            numels[leaf_id] = g.numel()
            if leaf_id not in arrived:
                rest_ids.append(leaf_id)
                rest.append(g)
    pair_slots, nonzero_at = batch.add_counted(rest)
    slots = dict(arrived)
    slots.update(zip(rest_ids, zip(pair_slots, range(nonzero_at, nonzero_at + len(rest)))))
    leaf_ids = list(grads)
    del rest, grads, g  # measured (queued): not kept through the sync
    state.grads = {}
    if state.partials:
        state.partials.finish()
    state.values = values = batch.resolve()
    if state.hooks:
        state.hooks.finish(values)
    state.leaf_pairs = {
        i: NormBatch.pair(values, slots[i][0]) if i in numels else None for i in leaf_ids
    }
    state.zero_fractions = {
        i: 1.0 - values[slots[i][1]] / n if n else 0.0 for i, n in numels.items()
    }


def release(state: RunState) -> None:
    """Drop references to autograd nodes, loss side first (long chains)."""
    state.tracker.release()
    if state.raw is not None:
        state.raw.release()


def _registered_finding(names: list[str]) -> str:
    shown = named_few(names, 4)
    return (
        f"the forward registered {shown} on the model (a lazy init on its first call); the run "
        "removed them again, so the model is as before, but this report has no entry for them. "
        "Call the model once yourself (model(sample_input)) so they exist, then run again"
    )


def report(state: RunState) -> Capture:
    """The frozen graph and the report (the whole run's time, the analysis included)."""
    graph = freeze_graph(state)
    written = state.stand_ins.written
    if written:
        state.findings.append(
            "the forward wrote into parameter(s) "
            f"{', '.join(written[:4])} in place, so their values changed as in a "
            "plain forward; the explorer could not prevent it (an in-place op on a weight)"
        )
    if state.stand_ins.registered:
        state.findings.append(_registered_finding(state.stand_ins.registered))
    if state.cut_off:
        state.findings.append(
            "a torch.utils.checkpoint(use_reentrant=True) got no input that "
            "requires grad, so what it computes gets no gradient (as in plain backward); "
            "use checkpoint(..., use_reentrant=False)"
        )
    result = build_report(state, graph)
    if any(r.status == "nonfinite" for r in result.params) or not math.isfinite(result.loss):
        held = _held_nonfinite(state)  # one more host sync
        at = 0 if math.isfinite(result.loss) else 1  # after the loss line diagnose puts first
        found = (*result.findings[:at], *held, *result.findings[at:])
        result = dataclasses.replace(result, findings=found, host_syncs=result.host_syncs + 1)
    result = dataclasses.replace(result, duration_s=time.perf_counter() - state.started)
    return Capture(graph, result, state.hooks.record if state.hooks else None)


def _held_nonfinite(state: RunState) -> list[str]:
    """Findings naming the parameters and inputs that hold NaN/Inf (one more host sync, only
    in a run that met NaN/Inf)."""
    params = [(("parameter", n), t) for n, t in state.stand_ins.params.items()]
    inputs = [(("input", n), t) for n, t in state.call.leaves()]
    found = nonfinite_holders(params + inputs)
    said = [
        held_finding(kind, [(n, k, size) for (of, n), k, size in found if of == kind])
        for kind in ("parameter", "input")
    ]
    return [s for s in said if s]


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


def _autocast(state: RunState) -> contextlib.AbstractContextManager:
    """The forward and the loss under `torch.autocast` when the run asks for it (a mixed
    precision training step replayed as it ran: its gradients differ from float32's)."""
    dtype = state.settings.autocast
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(state.device.type, dtype=dtype)


def _to_device(value: Any, device: torch.device) -> Any:
    if value is None:
        return None
    return torch.utils._pytree.tree_map(
        lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value
    )


def _call(model: nn.Module, call: CallArgs, stand_ins: StandIns) -> Any:
    try:
        return model(*call.args, **call.kwargs)
    except GradExplorerError:
        raise
    except Exception as e:
        advice = _identity_hint(e, stand_ins) or (
            "Check that sample_input has the shapes and dtypes forward expects (a tuple is "
            "passed as several positional arguments, a dict as keyword arguments)."
            + stand_in_hint(stand_ins.dressed, stand_ins.real_params)
        )
        raise GradExplorerError(
            f"The model raised {type(e).__name__} during forward: {e}\n"
            f"Inputs given: {call.describe()}. The model was not changed.\n{advice}"
        ) from e


def _name_nonfinite(state: RunState) -> None:
    """The graph node of the forward's first NaN/Inf output (run/forward_nan.py)."""
    assert state.raw is not None
    found, state.nonfinite = state.nonfinite, None  # its autograd node must not outlive the run
    node = next((n for n in state.raw.nodes.values() if n.fn is found.grad_fn), None)
    state.nonfinite_at = node.id if node is not None else None


def _identity_hint(e: Exception, stand_ins: StandIns) -> str:
    """A sentence for a forward that looked a parameter up by identity and missed: a KeyError
    whose key is a stand-in or its `id()`."""
    key = e.args[0] if isinstance(e, KeyError) and e.args else None
    ours = {id(t): name for name, t in stand_ins.params.items()}
    name = ours.get(id(key) if isinstance(key, torch.Tensor) else key if type(key) is int else 0)
    if name is None:
        return ""
    return (
        f"The missing key is parameter {name!r}{' (its id())' if type(key) is int else ''}: "
        "a run swaps every parameter for a stand-in, so a table keyed by the parameter object "
        "or its id() held outside the module misses. Keep the table on the module (a dict, "
        "list or set attribute, which runs see with the stand-ins) or key it by name."
    )
