"""The flight recorder's training-thread side: which steps get a flight record, within what budget.

At the step pre-hook (before the optimizer applies the gradients) the step's statistics are
classified exactly as the writer thread will classify them (`vocabulary.classify_codes` with the
watch's Thresholds; a trainable parameter without a gradient is "none"). Every step that holds a
parameter's first step of an anomaly kind (KINDS) — exactly the steps the writer lists as
anomalies — gets one FlightRecord while the budget lasts: the arguments of the model's latest
forward, the RNG states at that forward, a CPU copy of the state_dict, and how many times the
step called the model (the replay is of one call: `anomalies.replay` says when the step made
more). `notes` says, per step and per kind's first step, what was recorded or why not; the
watch saves them as `flights.json`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from ..errors import GradExplorerError, user_stacklevel
from ..vocabulary import STATUSES, Thresholds, classify, classify_codes
from .anomalies import KINDS, SPIKE, FlightRecord, cpu_copy
from .baselines import SpikeProbe, SpikeRule
from .spikes import CALM

MB = 2**20
#: the smallest default budget; the default is this or three copies of the model's state
DEFAULT_BUDGET_MB = 512
#: the key of `flight_recorder=<norm>`'s own trigger in `notes["kinds"]`
ABOVE = "above"
#: status code -> column of KINDS, for the codes that are anomaly kinds
_COLUMN = {STATUSES.index(k): j for j, k in enumerate(KINDS)}


def check_budget(budget_mb: Any) -> float | None:
    """`flight_budget_mb`: None (the default rule) or a number of megabytes >= 0."""
    ok = budget_mb is None or (
        isinstance(budget_mb, (int, float)) and not isinstance(budget_mb, bool) and budget_mb >= 0
    )
    if not ok or (budget_mb is not None and math.isnan(budget_mb)):
        raise GradExplorerError(
            f"flight_budget_mb must be a number of megabytes >= 0 or None, got {budget_mb!r}"
        )
    return None if budget_mb is None else float(budget_mb)


def on_host(stats: Any, read_device: bool) -> np.ndarray | None:
    """A step's statistics as a host array: as they are off a tensor or on the CPU; read from
    an accelerator only when `read_device` (a host sync), else None.

    Example:
        >>> on_host(torch.ones(1, 3), False).tolist()
        [[1.0, 1.0, 1.0]]
    """
    if not isinstance(stats, torch.Tensor):
        return np.asarray(stats)
    if stats.device.type != "cpu" and not read_device:
        return None
    return stats.detach().double().cpu().numpy()


class Flights:
    """Decides at each step pre-hook whether to keep a flight record, and makes it.

    `trigger`: True (each step that holds a parameter's first anomaly of a kind), a norm (also the first step with a gradient
    norm above it) or False (off). `keep(record_or_None, notes)` is called on every decision.
    """

    def __init__(
        self,
        model: nn.Module,
        trigger: bool | float,
        thresholds: Thresholds,
        *,
        sync_check: bool,
        budget_mb: float | None,
        keep: Callable[[FlightRecord | None, dict], None],
        spikes: SpikeRule | None = None,
        rank: int = 0,
    ) -> None:
        self.model, self.trigger, self.thresholds = model, trigger, thresholds
        self.sync_check = bool(sync_check)
        self.budget_mb = check_budget(budget_mb)
        self.keep = keep
        self.used = 0  # bytes of the records made so far
        #: per kind (and ABOVE): {"step", "kept", "why"}; "off" / "unchecked": why none at all
        self.notes: dict[str, Any] = {"trigger": trigger, "kinds": {}, "off": "", "unchecked": ""}
        self.active = trigger is not False
        if not self.active:
            self.notes["off"] = "the flight recorder was off (GradWatch(flight_recorder=False))"
        self._warned: set[str] = set()
        #: (parameter, kind) pairs seen so far: a record is kept at each pair's first step
        self._seen: set[tuple[int, int]] = set()
        self._wanted = [*KINDS, *([ABOVE] if trigger not in (True, False) else [])]
        #: the gradient-norm spike rule, as the writer runs it: a spike's first step is kept
        #: (and a calm step before it, for spike.compare())
        self.probe = SpikeProbe(spikes) if spikes is not None else None
        self._wanted += [SPIKE, CALM] if spikes is not None else []
        self._call: tuple[tuple, dict] | None = None
        #: the model's calls since the last step was checked, and those of that step
        self._calls, self._step_calls, self._counted = 0, 0, -1
        self._rng: torch.Tensor | None = None
        self._cuda_rng: torch.Tensor | None = None
        self._autocast: torch.dtype | None = None
        #: the version of each tensor of the latest call's batch, when it was made
        self._versions: list[int] = []
        #: the loss scale of the step being checked when its GradScaler skipped it
        self._skipped_scale: float | None = None
        first = next(model.parameters(), None)
        self._cuda = (first.device.index or 0) if first is not None and first.is_cuda else None
        self._rank = rank  # this process's rank, as its folder names it (watch/ranks.py)
        keep(None, self.notes)

    def stop(self, why: str) -> None:
        """No records from now on (`why` goes into the notes)."""
        self.active = False
        self.notes["off"] = why
        self._call = None
        self.keep(None, self.notes)

    def forget(self) -> None:
        """Drop the reference to the latest batch (the watch closes)."""
        self._call = None

    # ---- training thread ----------------------------------------------------------------
    def seen_call(self, args: tuple, kwargs: dict) -> None:
        """The model's forward pre-hook: a reference to the batch, a copy of the RNG states.

        A call without gradients (evaluation, a teacher's targets) cannot be the step's batch:
        it is neither kept nor counted; nor is a checkpoint's recompute during backward."""
        if not torch.is_grad_enabled():
            return
        self._calls += 0 if _in_backward() else 1
        self._call = (args, kwargs)
        self._versions = _versions((args, kwargs))
        self._rng = torch.get_rng_state()
        kind = "cuda" if self._cuda is not None else "cpu"
        on = torch.is_autocast_enabled(kind)
        self._autocast = torch.get_autocast_dtype(kind) if on else None
        if self._cuda is not None:
            try:  # the seed and offset of the generator: no device sync
                self._cuda_rng = torch.cuda.get_rng_state(self._cuda)
            except Exception:  # e.g. while a CUDA graph is captured
                self._cuda_rng = None

    def check(
        self,
        step: int,
        stats: Any,
        missing: bool,
        ids: Sequence[int] = (),
        lacking: Sequence[int] = (),
        names: list[str] | None = None,
        skipped_scale: float | None = None,
    ) -> None:
        """The step pre-hook: `stats` the (n, 3) norm / max_abs / nonzero of the parameters
        `ids` (indices into the watched parameters) that have a gradient, `missing` whether a
        trainable parameter has none (`lacking`: which). A step where some parameter turns a
        kind for the first time (exactly the writer's anomaly rule) gets a record.
        `skipped_scale`: the loss scale of a step its GradScaler skipped (Inf/NaN found)."""
        if not self.active:
            return
        self._skipped_scale = skipped_scale
        self._count_calls(step)
        if isinstance(stats, torch.Tensor):
            host = self.host_stats(stats)
            if host is None:  # deciding would cost one host sync per step
                self._unchecked(stats.device)
                return
            stats = host
        hits: list[tuple[int, int]] = []  # (parameter, kind column)
        if not _all_healthy(stats, self.thresholds):  # the usual step: ~5 us, not ~25
            codes = classify_codes(stats[:, 0], stats[:, 1], self.thresholds)
            rows = list(ids) if len(ids) == len(codes) else list(range(len(codes)))
            hits += [(i, _COLUMN[c]) for i, c in zip(rows, codes.tolist()) if c in _COLUMN]
        if missing:
            hits += [(i, KINDS.index("none")) for i in (lacking or [-1])]
        new = self._first_hits(hits)
        above = ABOVE in self._wanted and ABOVE not in self.notes["kinds"]
        if above and bool((stats[:, 0] > float(self.trigger)).any()):
            new.append(ABOVE)
        if self.probe is not None and names is not None:
            new += self._spike_kinds(step, stats, ids, names)
        if new:
            self._decide(step, [k for k in self._wanted if k in new])

    def _count_calls(self, step: int) -> None:
        """The calls of `step`: those since the last check (several optimizers' checks of one
        step add theirs up)."""
        self._step_calls = (self._step_calls if step == self._counted else 0) + self._calls
        self._calls, self._counted = 0, step

    def step_done(self) -> None:
        """The optimizer step ended: calls inside it after the reading (a closure evaluated
        again, as LBFGS does) are not the next step's."""
        self._calls = 0

    def host_stats(self, stats: Any) -> np.ndarray | None:
        """The step's statistics on the host: as they are on the CPU; from a device only with
        `sync_check` while recording (one host sync per step, the one `check` makes: call
        this once per step and hand the result to `check`), else None."""
        if isinstance(stats, torch.Tensor):
            self._cuda = (stats.device.index or 0) if stats.is_cuda else None
        return on_host(stats, self.sync_check and self.active)

    def _spike_kinds(
        self, step: int, stats: np.ndarray, ids: Sequence[int], names: list[str]
    ) -> list[str]:
        """SPIKE when a gradient norm spike starts here, CALM for a calm step to compare with."""
        assert self.probe is not None
        norms = np.full(len(names), np.nan)
        rows = list(ids) if len(ids) == len(stats) else list(range(len(stats)))
        norms[rows] = stats[:, 0]
        starts, calm = self.probe.check(step, norms, names)
        return [SPIKE] * starts + [CALM] * calm

    def _first_hits(self, hits: list[tuple[int, int]]) -> list[str]:
        """The kinds of `hits` that are a parameter's first of that kind."""
        fresh = {(i, k) for i, k in hits if (i, k) not in self._seen}
        self._seen |= fresh
        return sorted({KINDS[k] for _, k in fresh}, key=KINDS.index)

    # ---- one decision -------------------------------------------------------------------
    def _decide(self, step: int, kinds: list[str]) -> None:
        try:
            record, why = self._attempt(step, kinds)
        except Exception as e:  # a record that cannot be made must not stop the history
            record, why = None, f"making it failed ({type(e).__name__}: {e})"
        entry = {"step": step, "kept": record is not None, "why": why, "calls": self._step_calls}
        for k in kinds:
            self.notes["kinds"].setdefault(k, entry)
        self.notes.setdefault("steps", {})[str(step)] = {**entry, "kinds": kinds}
        topic = "budget" if "flight_budget_mb" in why else why
        if record is None and topic not in self._warned:  # the same reason: one warning
            self._warned.add(topic)
            warnings.warn(
                f"GradWatch: no flight record for step {step} ({', '.join(kinds)}): {why}",
                stacklevel=user_stacklevel(),
            )
        self.keep(record, self.notes)

    def _attempt(self, step: int, kinds: list[str]) -> tuple[FlightRecord | None, str]:
        if self._call is None:
            return None, (
                "no call of the model's forward was seen before this step (the watch was "
                "created after it, or the loss came from another method than forward, or from "
                "submodules called directly); the flight recorder replays the model's own call"
            )
        args, kwargs = self._call
        state = self.model.state_dict()
        state_bytes = _nbytes(state.values())
        size = state_bytes + _nbytes(tree_leaves((args, kwargs)))
        refused = self._over_budget(size, state_bytes, kinds)
        if refused:
            return None, refused
        record = FlightRecord(
            step,
            cpu_copy(args),
            cpu_copy(kwargs),
            self._rng,
            _state_copy(state),
            _reason(kinds, self.trigger),
            cuda_rng=self._cuda_rng,
            device=str(next(self.model.parameters()).device),
            kinds=tuple(kinds),
            autocast=self._autocast,
            calls=self._step_calls,
            frozen=tuple(n for n, p in self.model.named_parameters() if not p.requires_grad),
            rank=self._rank,
            evaluating=tuple(n for n, m in self.model.named_modules() if not m.training),
            skipped_scale=self._skipped_scale,
            batch_changed=_versions((args, kwargs)) != self._versions,
        )
        self.used += size
        return record, ""

    def _over_budget(self, size: int, state_bytes: int, kinds: list[str]) -> str:
        """Why a record of `size` bytes does not fit ("" when it does). Until a NaN/Inf step
        is recorded, room for one more record of the same size is kept for it."""
        if self.budget_mb is None:
            self.budget_mb = max(DEFAULT_BUDGET_MB, math.ceil(3 * state_bytes / MB))
        left = self.budget_mb * MB - self.used
        reserve = "nonfinite" not in kinds and "nonfinite" not in self.notes["kinds"]
        need = size * (2 if reserve else 1)
        if need <= left:
            return ""
        kept = ", and room for a NaN/Inf record of the same size is kept until one is made"
        raise_to = math.ceil((self.used + need) / MB) + 1
        return (
            f"it needs {size / MB:.3g} MB (state_dict + batch) and flight_budget_mb="
            f"{self.budget_mb:g} has {max(left, 0) / MB:.3g} MB left{kept if reserve else ''}; "
            f"GradWatch(..., flight_budget_mb={raise_to}) keeps it"
        )

    def _unchecked(self, device: torch.device) -> None:
        if self.notes["unchecked"]:
            return
        self.notes["unchecked"] = (
            f"the gradients were on {device} and sync_check was off: deciding which step to "
            "record needs the step's numbers on the host before the update (one host sync "
            "per step), so no step was recorded; GradWatch(..., sync_check=True) turns it on"
        )
        self.keep(None, self.notes)


def _all_healthy(stats: np.ndarray, th: Thresholds) -> bool:
    """Whether `classify_codes` would find every row healthy, from the columns' extremes: each
    rule bounds one column (or is a NaN/Inf, which min and max carry), so a row that breaks a
    rule makes an extreme break it, and `classify` of the extremes is not healthy."""
    if not len(stats):
        return True
    lo, hi = stats[:, :2].min(axis=0).tolist(), stats[:, :2].max(axis=0).tolist()
    return classify(lo[0], lo[1], th) == "healthy" == classify(hi[0], hi[1], th)


def _in_backward() -> bool:
    """Whether autograd's engine is running (a checkpoint recomputes the forward there)."""
    task = getattr(torch._C, "_current_graph_task_id", None)  # private: absent, assume not
    return task is not None and task() != -1


def _nbytes(values: Any) -> int:
    seen: set[tuple] = set()
    total = 0
    for t in values:
        if isinstance(t, torch.Tensor):
            key = _key(t)
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total


def _key(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), t.dtype, tuple(t.shape), t.stride(), t.device)


def _state_copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU copies of the state_dict; a tensor held under two names (tied) is copied once."""
    copies: dict[tuple, torch.Tensor] = {}
    out = {}
    for name, t in state.items():
        key = _key(t)
        if key not in copies:
            copies[key] = t.detach().to("cpu", copy=True)
        out[name] = copies[key]
    return out


def _reason(kinds: list[str], trigger: bool | float) -> str:
    words = [f"gradient norm above {float(trigger):g}" if k == ABOVE else k for k in kinds]
    words = ["calm (a step to compare spikes with)" if k == CALM else k for k in words]
    return "first " + ", ".join(words) + " step"


def _versions(call: Any) -> list[int]:
    """The version counter of each tensor of a call (an in-place change moves it)."""
    return [t._version for t in tree_leaves(call) if isinstance(t, torch.Tensor)]
