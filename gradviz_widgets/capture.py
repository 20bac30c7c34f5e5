"""One forward + backward of the user's model that leaves the model exactly as it was.

Detached aliases of the parameters (copies when another device is asked for) and copies of the
buffers are swapped into the model, as `torch.func.functional_call` does, for the whole forward
*and* backward (activation checkpointing re-runs forward during backward; that re-run must use
them too), so `.grad`, BatchNorm running stats, `requires_grad` and the device of the real
tensors are never touched. Gradients come from `torch.autograd.grad`, not `.backward()` (except
under reentrant checkpointing, which refuses `.grad()`: there `.backward()` fills the `.grad` of
the stand-ins). The global RNG is forked and re-seeded per run, so runs with dropout are
reproducible and the user's RNG stream is unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn.utils.stateless import _reparametrize_module

from . import diagnose
from .attribution import LOSS_SCOPE, ScopeTracker
from .devices import resolve_device
from .errors import GradExplorerError
from .graph import GradEdge, GradGraph, GradNode, ModuleScope
from .inputs import CallArgs, make_loss
from .report import GradReport, ParamRecord
from .stats import NormBatch, Thresholds, classify, combine_norms
from .walk import RawGraph, instrument, leaf_names, walk


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
    thresholds = thresholds or Thresholds()
    _check_something_trainable(model, sample_input)
    run_device = resolve_device(device, model)
    started = time.perf_counter()
    call = CallArgs.from_sample(sample_input)
    prepared = call.prepared(run_device)
    params = _run_params(model, run_device)
    buffers = {n: b.detach().to(run_device, copy=True) for n, b in model.named_buffers()}
    target_here = _to_device(target, run_device)
    tracker = ScopeTracker(model)
    batch = NormBatch(run_device)
    raw: RawGraph | None = None
    hook_ctx = hooks.attached(model, batch) if hooks else contextlib.nullcontext()
    try:
        with _forked_rng(run_device, seed), hook_ctx, _stand_ins(model, params, buffers):
            with tracker.tracking():
                output = _forward(model, prepared)
                tracker.claim(output)  # a custom Function's output at the root is the root's
                tracker.in_loss = True
                loss, how = make_loss(output, loss_fn, target_here)
            del output
            raw = walk(loss, tracker.owner, leaf_names(params, prepared.leaves()), tracker.calls)
            tracker.release()
            if track_flow:
                instrument(raw, batch, modified=hooks.modifiers if hooks else ())
            if hooks:
                hooks.on_graph(raw, batch)
            wanted = [(leaf.id, leaf.tensor) for leaf in raw.leaves]
            in_graph = {id(t) for _, t in wanted}
            wanted += [(f"param:{n}", p) for n, p in params.items()
                       if p.requires_grad and id(p) not in in_graph]
            reentrant = any(n.op == _REENTRANT_CHECKPOINT for n in raw.nodes.values())
            grads = _backward(loss, [t for _, t in wanted], reentrant)
            loss_slot = batch.add_scalar(loss)
            del loss
        present = [g for g in grads if g is not None]
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
    slot_iter = iter(leaf_slots)
    leaf_pairs = {leaf_id: None if g is None else NormBatch.pair(values, next(slot_iter))
                  for (leaf_id, _), g in zip(wanted, grads)}
    reached = [leaf_id for (leaf_id, _), g in zip(wanted, grads) if g is not None]
    zero_fractions = {leaf_id: 1.0 - values[nonzero_at + i] / n if n else 0.0
                      for i, (leaf_id, n) in enumerate(zip(reached, numels))}
    del wanted, grads
    graph = _freeze_graph(model, raw, leaf_pairs, values, tracker, thresholds)
    report = _report(model, params, graph, leaf_pairs, zero_fractions, values[loss_slot], how,
                     thresholds, run_device, tracker, time.perf_counter() - started, batch.syncs)
    return Capture(graph, report)


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


def _run_params(model: nn.Module, device: torch.device) -> dict[str, torch.Tensor]:
    """Leaf stand-ins for the parameters: aliases on the same device, copies elsewhere."""
    out = {}
    for name, p in model.named_parameters():
        alias = p.detach() if p.device == device else p.detach().to(device, copy=True)
        out[name] = alias.requires_grad_(p.requires_grad)
    return out


def _to_device(value: Any, device: torch.device) -> Any:
    if value is None:
        return None
    return torch.utils._pytree.tree_map(
        lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value)


@contextlib.contextmanager
def _forked_rng(device: torch.device, seed: int | None) -> Iterator[None]:
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        if seed is not None:
            torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _stand_ins(model: nn.Module, params: dict, buffers: dict) -> Iterator[None]:
    """Swap the stand-ins into the model until backward is over (the originals come back on exit).

    Not `functional_call` around forward alone: torch.utils.checkpoint re-runs forward during
    backward, which would then use (and, for BatchNorm, update) the model's own tensors.
    """
    with _reparametrize_module(model, {**params, **buffers}, tie_weights=True, strict=False):
        yield


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


_REENTRANT_CHECKPOINT = "CheckpointFunctionBackward"  # torch.utils.checkpoint(use_reentrant=True)


def _backward(loss: torch.Tensor, wanted: list[torch.Tensor], reentrant: bool = False) -> tuple:
    if not wanted:
        return ()
    try:
        if reentrant:
            return _grads_by_backward(loss, wanted)
        return torch.autograd.grad(loss, wanted, allow_unused=True)
    except GradExplorerError:
        raise
    except RuntimeError as e:
        raise GradExplorerError(
            f"Backward failed: {e}\nIf it names an in-place operation, the model modifies a "
            "tensor that autograd saved (use the out-of-place op). The model was not changed."
        ) from e


def _grads_by_backward(loss: torch.Tensor, wanted: list[torch.Tensor]) -> tuple:
    """`.backward()` for graphs that refuse `.grad()` (reentrant checkpoint). Parameters and inputs
    are our stand-ins; any other leaf gets its own `.grad` object back afterwards."""
    saved = [t.grad for t in wanted]
    try:
        for t in wanted:
            t.grad = None
        loss.backward()
        return tuple(t.grad for t in wanted)
    finally:
        for t, g in zip(wanted, saved):
            t.grad = g


def _freeze_graph(model, raw, leaf_pairs, values, tracker, thresholds) -> GradGraph:
    def pair_of(slots: list[int]) -> tuple[float | None, float | None]:
        if not slots:
            return None, None
        pairs = [NormBatch.pair(values, s) for s in slots]
        return combine_norms([p[0] for p in pairs]), max(p[1] for p in pairs)

    leaf_by_id = leaf_pairs
    nodes = []
    for n in raw.nodes.values():
        if n.kind in ("param", "input", "tensor"):
            norm, gmax = leaf_by_id.get(n.id) or (None, None)
        elif n.kind == "accumulate":
            norm, gmax = leaf_by_id.get(n.id[len("acc:"):]) or (None, None)
        elif n.kind == "output":
            norm, gmax = 1.0, 1.0  # d loss / d loss
        else:
            norm, gmax = pair_of(n.inflow)
        label = _label(n)
        nodes.append(GradNode(n.id, n.op, n.kind, n.module, label, n.scope, n.shape, norm, gmax,
                              classify(norm, gmax, thresholds), n.order))
    edges = []
    for e in raw.edges:
        if e.slot is not None:
            norm, gmax = NormBatch.pair(values, e.slot)
        elif e.dst.startswith("acc:") or e.dst == "output":
            src_node = raw.nodes[e.src]
            norm, gmax = (leaf_by_id.get(e.src) or (None, None)) if src_node.kind != "op" \
                else (1.0, 1.0)
        else:
            norm, gmax = None, None
        edges.append(GradEdge(e.src, e.dst, norm, gmax, classify(norm, gmax, thresholds)))
    return GradGraph(tuple(nodes), tuple(edges), _module_tree(model, tracker.calls))


def _label(n) -> str:
    if n.kind in ("param", "input", "tensor"):
        name = n.id.split(":", 1)[1]
        return f"{name}\n{tuple(n.shape)}"
    if n.kind == "output":
        return f"loss\n{tuple(n.shape)}"
    return n.op


def _module_tree(model: nn.Module, calls: Mapping[str, int]) -> dict[str, ModuleScope]:
    tree: dict[str, ModuleScope] = {}
    for path, module in model.named_modules():
        children = tuple(f"{path}.{c}" if path else c for c, _ in module.named_children())
        params = tuple(f"{path}.{p}" if path else p for p, _ in module.named_parameters(recurse=False))
        parent = None if path == "" else path.rpartition(".")[0]
        tree[path] = ModuleScope(path, type(module).__name__, calls.get(path, 1 if path == "" else 0),
                                 parent, children, params)
    tree[LOSS_SCOPE] = ModuleScope(LOSS_SCOPE, "Loss", 1, "", (), ())
    return tree


def _report(model, params, graph, leaf_pairs, zero_fractions, loss_value, how, thresholds,
            device, tracker, duration, syncs) -> GradReport:
    records = []
    norms_by_name: dict[str, float | None] = {}
    for name, p in params.items():
        pair = leaf_pairs.get(f"param:{name}")
        norm, gmax = pair if pair else (None, None)
        norms_by_name[name] = norm
        status = classify(norm, gmax, thresholds)
        reason = None if pair else diagnose.none_reason(
            name, p.requires_grad, tracker.calls, tracker.grad_enabled)
        origin = diagnose.zero_origin(graph, f"param:{name}") if status == "zero" else None
        records.append(ParamRecord(
            name, name.rpartition(".")[0], tuple(p.shape), str(p.dtype).replace("torch.", ""),
            p.requires_grad, norm, gmax, status, reason, origin,
            zero_fraction=zero_fractions.get(f"param:{name}")))
    module_norms = {}
    for path, _ in model.named_modules():
        prefix = f"{path}." if path else ""
        module_norms[path] = combine_norms([n for k, n in norms_by_name.items() if k.startswith(prefix)])
    inputs = {n.id.split(":", 1)[1]: n.grad_norm for n in graph.nodes if n.kind == "input"}
    loss_value = float(loss_value)
    nan_at = diagnose.nonfinite_origin(graph, loss_value)
    return GradReport(
        loss=loss_value, loss_description=how, params=tuple(records), module_norms=module_norms,
        thresholds=thresholds, device=str(device), duration_s=duration, nonfinite_origin=nan_at,
        findings=diagnose.findings(records, nan_at, loss_value), input_norms=inputs,
        host_syncs=syncs)


__all__ = ["Capture", "capture"]
