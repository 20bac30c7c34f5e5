"""Anomalies (the first step a parameter turned NaN/Inf, zero, None, exploding or vanishing) and
the flight recorder: the batch, RNG state and model state of the step where training broke."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_map

from ..errors import GradExplorerError, user_stacklevel
from ..vocabulary import ALARMS, STATUSES, named_few

#: the statuses that are anomalies, most alarming first (vocabulary.ALARMS)
KINDS = ALARMS
#: the anomaly kinds that are no status (found by the watch only): gradients on some ranks
#: only, or norms that differ across ranks (watch/ranks.py)
RANK_DIVERGENCE = "rank_divergence"
#: a value that left its rolling baseline (watch/spikes.py)
SPIKE = "spike"
#: the first NaN/Inf loss given to `watch.log_loss` (a kind of its own: a step's parameters
#: can turn NaN/Inf at the same step, and a record keeps one row per step and kind)
NONFINITE_LOSS = "nonfinite_loss"
WATCH_KINDS = (RANK_DIVERGENCE, SPIKE, NONFINITE_LOSS)
_CODES = np.array([STATUSES.index(k) for k in KINDS])
_NONE = KINDS.index("none")


def in_order(anomalies: list[Anomaly]) -> list[Anomaly]:
    """Anomalies by step, then kind (KINDS' order, then WATCH_KINDS'), then parameters: the
    live watch and a run opened from disk list them alike, whatever order they were found in
    (a spike is found steps after its own; `anomalies[0]` differed between the two).

    Example:
        >>> found = [Anomaly(3, SPIKE, []), Anomaly(3, "zero", ["w"]), Anomaly(1, "none", ["b"])]
        >>> [(a.step, a.kind) for a in in_order(found)]
        [(1, 'none'), (3, 'zero'), (3, 'spike')]
    """
    kinds = (*KINDS, *WATCH_KINDS)

    def key(a: Anomaly) -> tuple:
        rank = kinds.index(a.kind) if a.kind in kinds else len(kinds)
        return (a.step, rank, a.kind, tuple(a.params))

    return sorted(anomalies, key=key)


@dataclasses.dataclass
class FlightRecord:
    """What `anomaly.explore()` needs to replay step `step` (all on the CPU).

    `state` is the model's state_dict before the optimizer applied the step's gradient; `rng`
    and `cuda_rng` the CPU and CUDA (of `device`) generator states at the step's forward;
    `kinds` the anomaly kinds whose first step this is; `autocast` the dtype of the
    torch.autocast the forward ran under (None: none), which the replay runs under too;
    `calls` how many times the step called the model with gradients (the record holds the
    last call; None: not counted, a record saved before the count existed); `frozen` the
    parameters that did not require grad at the step, which the replay freezes alike (None:
    a record saved before they were kept); `rank` the process's rank in its torchrun world
    (None: a record saved before it was kept); `evaluating` the modules in eval mode at the
    step, which the replay sets alike (None: a record saved before they were kept; a model
    left in eval mode after training had been replayed in it); `skipped_scale` the loss scale
    of a step its GradScaler skipped (its scaled backward overflowed, which an unscaled replay
    does not show: said in the report); `batch_changed` whether the forward changed its batch
    in place (the record holds the changed batch: said in the report)."""

    step: int
    args: tuple
    kwargs: dict
    rng: torch.Tensor | None
    state: dict[str, torch.Tensor]
    reason: str
    cuda_rng: torch.Tensor | None = None
    device: str = "cpu"
    kinds: tuple[str, ...] = ()
    autocast: torch.dtype | None = None
    calls: int | None = None
    frozen: tuple[str, ...] | None = None
    rank: int | None = None
    evaluating: tuple[str, ...] | None = None
    skipped_scale: float | None = None
    batch_changed: bool = False

    def save(self, directory: Path) -> Path:
        path = directory / f"flight-{self.step}.pt"
        # not dataclasses.asdict: it deep-copies every tensor of the state once more
        torch.save({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, path)
        return path

    @staticmethod
    def load(path: Path) -> FlightRecord:
        return FlightRecord(**torch.load(path, weights_only=False))


def cpu_copy(value: Any) -> Any:
    """A detached CPU copy of every tensor in a nested structure (other values as they are)."""
    return tree_map(
        lambda t: t.detach().to("cpu", copy=True) if isinstance(t, torch.Tensor) else t, value
    )


@dataclasses.dataclass
class Anomaly:
    """The first step where `params` turned `kind` (one of KINDS, or of WATCH_KINDS: "rank_divergence",
    gradients produced on some ranks only, or norms that differ across ranks; `detail` says
    which ranks). `ranks`: the ranks whose records hold it (a run opened from disk).

    A `nonfinite` anomaly also names, in `held`, the parameters that held NaN/Inf values before
    that step's update (where the NaN/Inf gradients of `params` start from); `detail` says so
    with their counts, or that none did (the NaN/Inf arose in the step's forward or backward),
    or why it was not checked (watch/holders.py).

    Example:
        >>> Anomaly(12, "nonfinite", ["fc1.weight"])
        Anomaly(step 12: nonfinite in fc1.weight)
        >>> Anomaly(3, "nonfinite", ["fc1.weight", "fc2.weight"], held=["fc2.weight"])
        Anomaly(step 3: nonfinite in fc1.weight, fc2.weight; NaN/Inf held in fc2.weight)
        >>> Anomaly(15, "rank_divergence", [], detail="cross-rank check stopped at step 15")
        Anomaly(step 15: rank_divergence: cross-rank check stopped at step 15)
    """

    step: int
    kind: str
    params: list[str]
    _flight: Callable[[int], FlightRecord | None] | None = dataclasses.field(
        default=None, repr=False
    )
    _explore: Callable[..., Any] | None = dataclasses.field(default=None, repr=False)
    detail: str = ""
    ranks: tuple[int, ...] = ()
    #: parameters holding NaN/Inf values before the step's update (`nonfinite` anomalies)
    held: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_row(
        cls,
        row: tuple[int, str, Any],
        flight: Callable[[int], FlightRecord | None] | None = None,
        explore: Callable[..., Any] | None = None,
        ranks: tuple[int, ...] = (),
    ) -> Anomaly:
        """From a stored row: (step, kind, names) or (step, kind, {"params", "detail",
        "held"}); `held`: [name, non-finite elements, elements, step] per holder."""
        step, kind, params = row
        detail, held = "", []
        if isinstance(params, dict):
            held = [str(h[0]) for h in params.get("held", [])]
            params, detail = params.get("params", []), str(params.get("detail", ""))
        return cls(step, kind, list(params), flight, explore, detail, ranks, held)

    @property
    def flight_record(self) -> FlightRecord | None:
        """The recorded batch and pre-update state of this step, if one was kept."""
        return self._flight(self.step) if self._flight else None

    def explore(
        self, model: nn.Module | None = None, *, rank: int | None = None, **options: Any
    ) -> Any:
        """A GradExplorer on this step's batch and pre-update model state (already run once:
        `.report.nonfinite_origin` names the graph node where NaN/Inf appeared).

        `model`: needed for a run opened from disk (a model of the same architecture; it is
        copied, not changed). `rank`: whose batch to replay, in a run of several ranks
        (default: for NaN/Inf, the rank whose own batch shows them; else the first of
        `ranks`). `options` go to GradExplorer (loss_fn, target, thresholds ...).
        """
        if self._explore is None:
            raise GradExplorerError("this anomaly has no flight record to explore")
        if rank is None:
            return self._explore(self, model, **options)
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise GradExplorerError(f"rank must be a rank number (0, 1, ...), got {rank!r}")
        return self._explore(self, model, rank=rank, **options)

    def __repr__(self) -> str:
        shown = named_few(self.params, 3)
        where = ""
        if self.ranks:
            where = (
                f" on rank{'s' if len(self.ranks) > 1 else ''} {', '.join(map(str, self.ranks))}"
            )
        held = ""
        if self.held:
            held = f"; NaN/Inf held in {named_few(self.held, 3)}"
        what = f" in {shown}" if self.params else f": {self.detail}" if self.detail else ""
        return f"Anomaly(step {self.step}: {self.kind}{what}{where}{held})"


class Tracker:
    """Finds, per parameter and kind, the first step the parameter had that status.

    `quiet` (per parameter): a None that is intended (frozen, removed) is no anomaly."""

    def __init__(self) -> None:
        self._seen = np.zeros((0, len(KINDS)), dtype=bool)

    def update(
        self, step: int, status: np.ndarray, names: list[str], quiet: np.ndarray | None = None
    ) -> list[tuple[int, str, list[str]]]:
        hits = _hits(status[None, :], quiet)[0] & ~self._seen_for(len(status))
        if not hits.any():
            return []
        self._seen[: len(status)] |= hits
        return [
            (step, kind, [names[i] for i in np.nonzero(hits[:, k])[0]])
            for k, kind in enumerate(KINDS)
            if hits[:, k].any()
        ]

    def update_many(
        self,
        steps: np.ndarray,
        status: np.ndarray,
        names: list[str],
        quiet: np.ndarray | None = None,
    ) -> list[tuple[int, str, list[str]]]:
        """`update` for (steps, params) statuses at once; the same findings, in step order."""
        hits = _hits(status, quiet).any(axis=0)
        if not (hits & ~self._seen_for(status.shape[1])).any():
            return []
        found = []
        for r, step in enumerate(steps.tolist()):
            found += self.update(step, status[r], names, quiet)
        return found

    def _seen_for(self, n: int) -> np.ndarray:
        if self._seen.shape[0] < n:
            grow = n - self._seen.shape[0]
            self._seen = np.vstack([self._seen, np.zeros((grow, len(KINDS)), dtype=bool)])
        return self._seen[:n]


def _hits(status: np.ndarray, quiet: np.ndarray | None) -> np.ndarray:
    """(steps, params, kinds): which statuses are anomalies of each kind."""
    hits = status[:, :, None] == _CODES[None, None, :]
    if quiet is not None and quiet.any():
        k = min(len(quiet), status.shape[1])
        hits[:, :k, _NONE] &= ~quiet[None, :k]
    return hits


class _Inert:
    """Stands in for a recorder while the model is copied: its hooks become no-ops."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return _noop


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def twin_of(model: nn.Module, recorder: object | None) -> nn.Module:
    """A CPU deepcopy of `model` without the watch's hooks (the recorder is not copied).

    Tensors a forward pre-hook recomputes and keeps as plain attributes (pruning's `weight`,
    legacy `weight_norm`'s) are graph outputs, which deepcopy refuses: the twin gets detached
    copies (its own hooks recompute them at its forward). `model` itself is never changed."""
    inert = _Inert()
    memo: dict[int, Any] = {id(recorder): inert} if recorder is not None else {}
    for t in _graph_attributes(model):
        memo.setdefault(id(t), t.detach().clone())
    twin = copy.deepcopy(model, memo)
    for m in twin.modules():
        for d in (m._forward_pre_hooks, m._forward_hooks):
            for key in [k for k, h in d.items() if getattr(h, "__self__", None) is inert]:
                del d[key]
                m._forward_pre_hooks_with_kwargs.pop(key, None)
    return twin.cpu()


def _graph_attributes(model: nn.Module) -> list[torch.Tensor]:
    """Non-leaf tensors held by the modules (attributes, buffers, in lists / dicts)."""
    found: list[torch.Tensor] = []

    def visit(value: Any, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            if not value.is_leaf:
                found.append(value)
        elif depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                visit(v, depth + 1)
        elif depth < 3 and isinstance(value, dict):
            for v in value.values():
                visit(v, depth + 1)

    for m in model.modules():
        for name, value in vars(m).items():
            if name not in ("_parameters", "_modules"):
                visit(value, 0)
    return found


def replay(
    record: FlightRecord,
    model: nn.Module,
    loss_fn: Callable | None,
    recorder: object | None = None,
    *,
    from_disk: bool = False,
    finding: str | None = None,
    **options: Any,
) -> Any:
    """Run a GradExplorer on a copy of `model` holding the recorded state, on the recorded
    batch, under the recorded RNG states and autocast (on the recorded device when it is
    available). `from_disk`: the record was read from disk (it holds no loss_fn); `finding`:
    one its reports carry first (which step this is, when not the one asked for)."""
    from ..explorer.session import GradExplorer

    _check_rank(record, options.pop("rank", None))
    twin = _twin_in_state(record, model, recorder)
    sample = _sample(record)
    options.setdefault("loss_fn", loss_fn)
    options.setdefault("seed", None)
    options.setdefault("autocast", record.autocast)
    if options.get("device") is None and record.device.startswith("cuda"):
        if torch.cuda.is_available():
            options["device"] = record.device
        else:
            warnings.warn(
                f"step {record.step} was recorded on {record.device} and is replayed on the "
                "CPU: random operations (dropout) draw other numbers there",
                stacklevel=user_stacklevel(),
            )
    ex = GradExplorer(twin, sample, **options)
    ex.label = f"step {record.step}"  # compared with another replay: which step is which
    if finding is not None:
        ex.carry_finding(finding)
    for said in record_findings(record):
        ex.carry_finding(said)
    if record.calls is not None and record.calls != 1:
        warnings.warn(not_one_call(record.step, record.calls), stacklevel=user_stacklevel())
        ex.carry_finding(not_one_call(record.step, record.calls, short=True))
    with recorded_rng(record, ex.device):
        ex.run()
    if options["loss_fn"] is None and ex.report.loss_description.startswith("sum of"):
        said = replayed_sum(record.step, ex.report.loss_description, from_disk)
        warnings.warn(said, stacklevel=user_stacklevel())
    return ex


def replay_again(ex: Any, record: FlightRecord, finding: str) -> Any:
    """`ex` (a replay of `record`) run once more under the recorded RNG states, `finding`
    first among its report's findings (and every later run's)."""
    ex.carry_finding(finding)
    with recorded_rng(record, ex.device):
        ex.run()
    return ex


def _check_rank(record: FlightRecord, rank: int | None) -> None:
    """A live watch holds its own rank's records only: another rank's is read from disk."""
    if rank is None or record.rank is None or rank == record.rank:
        return
    raise GradExplorerError(
        f"rank={rank}: this watch holds the flight records of rank {record.rank}, the process "
        "it runs in; to replay another rank's batch, open the run from disk: "
        f"GradWatch.open(watch.run_path).anomalies[i].explore(model, rank={rank})"
    )


def _twin_in_state(record: FlightRecord, model: nn.Module, recorder: object | None) -> nn.Module:
    """A hook-free copy of `model` holding the recorded state, frozen as at the step."""
    twin = twin_of(model, recorder)
    missing = twin.load_state_dict(record.state, strict=False)
    if missing.missing_keys:
        raise GradExplorerError(
            f"the model does not match the recorded state: missing {missing.missing_keys[:5]}"
        )
    if record.frozen is not None:  # a later unfreezing must not add gradients to the step's
        for name, p in twin.named_parameters():
            p.requires_grad_(name not in record.frozen)
    if record.evaluating is not None:  # `model.eval()` after training: the step's modes
        for name, m in twin.named_modules():
            m.training = name not in record.evaluating
    return twin


def record_findings(record: FlightRecord) -> list[str]:
    """What a replay of `record` cannot show as the step had it, said in its report."""
    said = []
    if record.skipped_scale is not None:
        s = f"{record.skipped_scale:g}"
        said.append(
            f"step {record.step} was skipped by its GradScaler: its backward ran with the loss "
            f"scaled by {s} and overflowed (Inf/NaN gradients). This replay runs the loss "
            "unscaled, so its gradients are finite where the step's were not; to see where the "
            f"scaled backward overflows, explore with loss_fn=lambda out: <the loss>(out) * {s} "
            f"(its numbers are then {s} times the step's)"
        )
    if record.batch_changed:
        said.append(
            f"step {record.step}'s forward changed its input in place (x.sub_(...), x[...] = "
            "...): the batch kept is the changed one, so this replay's numbers are not the "
            "step's. Let the forward work on a copy (x = x - 3) for replays that match"
        )
    return said


def _sample(record: FlightRecord) -> Any:
    """The recorded call as GradExplorer's sample input."""
    if record.kwargs and record.args:
        raise GradExplorerError(
            "the recorded call mixes positional and keyword arguments (e.g. model(x, "
            "labels=y)); GradExplorer takes one or the other, so this step cannot be replayed. "
            "Call the model with keywords only (model(input_ids=x, labels=y)) or positionally "
            "only, and the flight records of the next run replay"
        )
    if record.kwargs:
        return dict(record.kwargs)
    return record.args[0] if len(record.args) == 1 else tuple(record.args)


def not_one_call(step: int, calls: int, short: bool = False) -> str:
    """What a replay says when step `step` called the model `calls` times, not once: it
    replays one call, so its gradients are not the step's (`short`: the report's finding).

    Example:
        >>> not_one_call(30, 2, short=True)[:58]
        'step 30 called the model 2 times and this replays the last'
    """
    if calls == 0:
        head = (
            f"no call of the model with gradients was seen in step {step} (its loss came from "
            "another method or from submodules called directly); this replays the latest "
            "call, an earlier step's batch"
        )
        return head if short else f"{head}: its gradients are not step {step}'s"
    head = f"step {step} called the model {calls} times and"
    if short:
        return f"{head} this replays the last call only: its gradients are not the step's"
    return (
        f"{head} anomaly.explore() replays one call, the last: its gradients, norms and which "
        "of them are NaN/Inf are that call's, not the step's, and a NaN/Inf from another call "
        "(another view of the batch, an earlier micro-batch) is not seen. To replay the whole "
        "step, watch a module whose one forward makes every call of the step (forward(x1, "
        "x2) returning (model(x1), model(x2))), or run GradExplorer on such a module with the "
        "step's inputs and a loss_fn that takes both outputs"
    )


def replayed_sum(step: int, how: str, from_disk: bool = False) -> str:
    """What a replay says when its loss is a sum of the model's output (no loss_fn given):
    its gradients, NaN/Inf ones included, are that sum's, not the training loss's. A record
    read from disk never holds the run's loss_fn (`from_disk`).

    Example:
        >>> replayed_sum(4, "sum of output")[:60]
        'step 4 is replayed with the sum of output as its loss (the w'
        >>> replayed_sum(4, "sum of output", from_disk=True)[54:100]
        '(a record read from disk does not hold the run'
    """
    head = f"step {step} is replayed with the {how} as its loss"
    tail = (
        ": its gradients, and which of them are NaN/Inf, are that sum's, not the training loss's; "
    )
    if from_disk:
        return (
            f"{head} (a record read from disk does not hold the run's loss_fn, even when the "
            f"run was given one){tail}pass loss_fn= (and target=) to explore()"
        )
    return (
        f"{head} (the watch was given no loss_fn){tail}pass explore(loss_fn=..., target=...) "
        "or GradWatch(..., loss_fn=...)"
    )


@contextlib.contextmanager
def recorded_rng(record: FlightRecord, device: str | None) -> Iterator[None]:
    """The global RNG forked and set to the recorded states (the user's RNG comes back)."""
    where = torch.device(device or "cpu")
    cuda = [where.index or 0] if where.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        if record.rng is not None:
            torch.set_rng_state(record.rng)
        if cuda and record.cuda_rng is not None:
            torch.cuda.set_rng_state(record.cuda_rng, cuda[0])
        yield
