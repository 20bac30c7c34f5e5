"""When a step's gradients are read: at the end of backward, at `optimizer.step`, after a
closure's first call, or at `GradScaler.update` for a step the scaler skipped.

The numbers of a step are those of the gradient the optimizer was given, before anything
changed it in place (gradient clipping, `GradScaler.unscale_`):

- At the end of every backward the watch notes each gradient's identity and `_version`, and
  reads its statistics while it is "eager" (the first step, and every step after in-place
  changes were seen once, clipped or not: a loop may clip on some steps only); otherwise that
  reading is skipped.
- At the read point (the optimizer's step pre-hook; with a closure, right after the closure's
  first call, i.e. the gradient at the pre-update weights) the versions are compared. Unchanged:
  one reading (the end-of-backward one when there is one). Changed: the gradients are read
  again, the norms kept are the end-of-backward ones (divided by the loss scale when a
  GradScaler had scaled them: a power of two, so exact), and the step is flagged `clipped`
  when the two readings differ. Changed while not eager: the pre-change values are gone; the
  step keeps what the optimizer applied, `clipped` unknown (one warning), and reading turns
  eager.
- An in-place op through `.data` (`p.grad.data.clamp_(-1, 1)`, the old DQN tutorial's clip)
  bumps no `_version`. So the first step, and every PROBE_EVERY-th after it, is read at both
  points whatever the versions say and the two readings are compared (no host sync: a device
  result is polled through an event at later steps). A difference turns comparing on for the
  rest of the run (as under FSDP2) with one warning naming the steps read since the last probe;
  their `clipped` turns unknown in the record (`StepTiming.unknown`, the writer's `clip_unknown`).
- FSDP2 (`compare=True`): torch's foreach in-place ops (`clip_grad_norm_`'s `_foreach_mul_`)
  bump neither a DTensor gradient's `_version` nor its local shard's, so versions cannot tell.
  Every backward is read (this rank's shards only: no collective) and at the read point the
  two readings are compared; the writer's one all_reduce makes the kept partials whole.
- `GradWatch(scaler=)`: the scaler's `update` is wrapped (restored on close); an optimizer the
  scaler processed (`scaler.step`) whose step never ran (Inf/NaN found) is recorded then, as a
  skipped step.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..errors import user_stacklevel
from .ranks import local_part
from .reduce import by_device, grad_stats

try:
    from torch.amp.grad_scaler import OptState
except ImportError:  # pragma: no cover - very old torch
    OptState = None  # type: ignore[assignment,misc]


#: a step read at both points whatever the versions say, every this many reads (the first too)
PROBE_EVERY = 100
#: relative gap between an end-of-backward reading divided by the loss scale and the gradient
#: the GradScaler unscaled in float32 (two roundings of 2**-24 each, with room) that is no change
SCALE_ROUNDING = 2.0**-21


@dataclasses.dataclass
class Reading:
    """The statistics of one optimizer's step: `ids` index the recorder's parameters."""

    ids: list[int]
    stats: Any
    scale: Any = None
    clipped: Any = False  # True / False, None: unknown; a device tensor until the writer reads it
    skipped: Any = False  # a fused optimizer's found_inf tensor under a GradScaler
    #: NaN/Inf made between backward and the step (`p.grad /= 0`): the record is the applied
    #: gradient's, whose anomaly says so (watch/holders.py); on the CPU only; None: changed in
    #: place where the backward's numbers were not read (the first change the watch saw)
    made: bool | None = False


@dataclasses.dataclass
class _Backward:
    """The gradients as the last backward left them: `rows` maps each slot not yet read at a
    step to its row of `refs` (the tensor), `versions` and `stats` (None: not read)."""

    rows: dict[int, int]
    refs: list[weakref.ref]
    versions: list[int]
    stats: Any

    def changed(self, row: int, grad: torch.Tensor) -> bool:
        """Whether `grad` was changed in place since (clipping, `scaler.unscale_`)."""
        return self.versions[row] != grad._version


#: said once per watch when `optimizer.step(closure)` evaluates its closure again in a step
CLOSURE_NOTE = (
    "GradWatch: optimizer.step(closure) evaluated its closure more than once at step {step} "
    "(LBFGS, line searches): each step's record holds the gradients of its first evaluation, "
    "at the step's starting weights; the later evaluations are not recorded"
)


class StepTiming:
    """Owns the end-of-backward reading, the scaler's `update` wrapper and the closure wrap."""

    def __init__(
        self,
        params: list[torch.Tensor],
        stats_fn: Callable[[list[torch.Tensor]], Any],
        scaler: Any = None,
        compare: bool = False,
    ) -> None:
        self.params, self.stats_fn, self.scaler = params, stats_fn, scaler
        self.eager = True
        #: an in-place change was seen: every backward is read from then on (eager stays on)
        self.changes_seen = False
        #: in-place changes are found by comparing readings, not versions (FSDP2)
        self.compare = compare
        self._eob: _Backward | None = None
        self._warned: set[str] = set()
        #: every in-place change so far divided all gradients by one integer (`divided_by`),
        #: and that integer (0: none seen; on the CPU)
        self._averaging: Any = True
        self._divisor = 0
        self._update: Any = None
        self._had_update = False
        #: reads so far; the next one is a probe (module doc); a probe's device result waiting
        self._reads, self._probe_due = 0, True
        self._last_probe: int | None = None
        self._pending: tuple[Any, Any, int, int | None] | None = None
        #: steps whose `clipped` turned out unknown (read between a probe and the one that
        #: found a change through `.data`): (first, last) ranges the recorder takes
        self.unknown: list[tuple[int, int]] = []

    # ---- end of backward ----------------------------------------------------------------
    def end_backward(self) -> None:
        grads = [p.grad for p in self.params]
        ids = [i for i, g in enumerate(grads) if g is not None]
        present = [g for g in grads if g is not None]
        stats = self.stats_fn(present) if (self.eager or self._probe_due) and present else None
        # weak references: the identity of each gradient without keeping it alive (an id can be
        # reused by a tensor assigned later, `p.grad = g`)
        refs = list(map(weakref.ref, present))
        versions = [g._version for g in present]
        self._eob = _Backward({i: r for r, i in enumerate(ids)}, refs, versions, stats)

    def forget(self) -> None:
        """The watched set changed (a parameter replaced, added, unfrozen): the last
        end-of-backward reading names tensors that may no longer be the watched ones."""
        self._eob = None

    # ---- the read point -----------------------------------------------------------------
    def read(
        self,
        ids: list[int],
        grads: list[torch.Tensor],
        step: int,
        skipped: bool = False,
        opt: Any = None,
    ) -> Reading:
        """The statistics of the gradients `grads` of parameters `ids` (those of `opt` that
        have one) as they were before any in-place change since the last backward (unscaled
        when a scaler scaled them). A gradient no backward made since the last step (no
        backward ran, or `p.grad` was assigned) is read as it is now: what the optimizer
        applies."""
        # a fused optimizer (`_step_supports_amp_scaling`) gets the scaler's Inf flag and the
        # scale of its still scaled gradient (None after `scaler.unscale_`) as attributes, for
        # the length of its step
        fused = getattr(opt, "grad_scale", None)
        if getattr(opt, "_step_supports_amp_scaling", False):
            found_inf = getattr(opt, "found_inf", None)
            skipped = skipped if found_inf is None else found_inf
        # without `scaler=`: the GradScaler calling this step, if one is (its scale is the
        # step's; its divisor matters only while end-of-backward numbers, still scaled, are used)
        stepping = self.scaler if self.scaler is not None else self._scaler_from_stack()
        scale = _scale_of(stepping)
        divisor = _divisor(stepping if self.scaler is not None or self.eager else None, fused)
        probe = self._next_read(step)
        rows = self._fresh_rows(ids, grads)
        if not grads or all(r is None for r in rows):
            return Reading(ids, _unfused(self.stats_fn(grads), fused), scale, False, skipped)
        eob: _Backward = self._eob  # type: ignore[assignment]
        changed = self._changed(rows, grads, eob)
        if not changed and None not in rows:
            # clipping on some steps only: an unclipped step must not stop the reading
            was_eager, self.eager = self.eager, self.changes_seen
            if probe and eob.stats is not None:
                # as on an eager step: divided by the scale of the scaler calling this step
                by = _divisor(stepping, fused)
                pre = _divided(eob.stats, rows, by)  # type: ignore[arg-type]
                clipped = self._probed(pre, _unfused(self.stats_fn(grads), fused), step, by)
                return Reading(ids, pre, scale, clipped, skipped)
            if was_eager and eob.stats is not None:
                found: list[int] = rows  # type: ignore[assignment]
                return Reading(ids, _divided(eob.stats, found, divisor), scale, False, skipped)
            return Reading(ids, _unfused(self.stats_fn(grads), fused), scale, False, skipped)
        post = _unfused(self.stats_fn(grads), fused)
        if not changed:  # some gradients are not the last backward's: read as they are now
            return Reading(ids, post, scale, False, skipped)
        self.eager = self.changes_seen = True
        if eob.stats is None:
            self._warn_once(
                "late",
                f"GradWatch: the gradients changed in place between backward and "
                f"optimizer.step at step {step} (gradient clipping?); from now on they are "
                "also read at the end of each backward. That step's norms are the ones the "
                "optimizer applied (history's `clipped` is <NA> there).",
            )
            return Reading(ids, post, scale, None, skipped, None)  # backward's not read
        pre = _divided(eob.stats, [rows[k] for k in changed], divisor)  # type: ignore[misc]
        kept, clipped, made = self._kept(pre, post, changed, divisor, step)
        return Reading(ids, kept, scale, clipped, skipped, made)

    def _kept(
        self, pre: Any, post: Any, changed: list[int], divisor: Any, step: int
    ) -> tuple[Any, Any, bool]:
        """The reading of a step whose gradients `changed` in place since backward, its
        `clipped`, and whether the change made NaN/Inf: the end-of-backward values `pre`
        where the change was a clipping (`clip_like`), else what the optimizer applied (one
        warning; none for a NaN/Inf the change made: its anomaly says so)."""
        now = _rows(post, changed)
        made = made_nonfinite(pre, now)
        by, k = self._averaged(pre, now, post, changed)
        pre = self._before_clipping(pre, now)
        clipped, clip = _differ(pre, now, _is_scale(divisor)), clip_like(pre, now)
        if isinstance(clip, torch.Tensor):
            clip = clip & ~torch.as_tensor(by, device=clip.device)
        elif by:
            clip = False
            self._warn_once("averaged", _AVERAGED.format(step=step, k=int(k)))
        elif clip is False and not made:
            self._warn_once("applied", _NOT_A_CLIP.format(step=step))
        return _chosen(clip, _replaced(post, changed, pre), post), _both(clipped, clip), made

    def _averaged(self, pre: Any, now: Any, post: Any, changed: list[int]) -> tuple[Any, Any]:
        """Whether the change is an average by hand (`p.grad /= k`: every gradient, the
        unchanged ones all zero, divided by one integer k), and k. A clipping scales by
        one 1/k once in a long while: it counts while no change before it was something else,
        or when k is the run's own average seen before (learnt here, on the CPU, for
        `_before_clipping`)."""
        by, k = divided_by(pre, now)
        # a gradient left as it was: only some were scaled (a layer's multiplier), no average
        moved = set(changed)
        untouched = _zero_rows(post, [i for i in range(len(post)) if i not in moved])
        if isinstance(by, torch.Tensor):
            by = by & untouched & self._averaging
        else:
            by = by and bool(untouched)
            by = by and (self._averaging is True or (bool(self._divisor) and k == self._divisor))
            self._divisor = k if by else self._divisor
        self._averaging = by
        return by, k

    def _before_clipping(self, pre: Any, now: Any) -> Any:
        """`pre` divided by the run's average by hand (k, learnt from a step that only
        averaged) where the change is that average and then a clipping: the averaged gradient
        before clipping is what clipping saw (the record held the sum, k x it). On the CPU."""
        if not self._divisor or (isinstance(pre, torch.Tensor) and pre.device.type != "cpu"):
            return pre
        averaged = _divided(pre, list(range(len(pre))), self._divisor)
        return averaged if clip_like(averaged, now) is True else pre

    def _next_read(self, step: int) -> bool:
        """Count this read (of `step`); whether it is a probe (and schedule the next one)."""
        self._poll_probe(step)
        probe = self._probe_due and not self.compare
        self._reads += 1
        self._probe_due = self._reads % PROBE_EVERY == 0
        return probe

    def _probed(self, pre: Any, post: Any, step: int, divisor: Any) -> Any:
        """Whether the gradients differ from the end-of-backward reading (divided by
        `divisor`) though no version moved; a difference turns comparing on (now on the CPU,
        later for a device result)."""
        differ = _differ(pre, post, _is_scale(divisor))
        previous, self._last_probe = self._last_probe, step
        if isinstance(differ, torch.Tensor) and differ.device.type != "cpu":
            event = torch.Event(device=differ.device)
            event.record()
            self._pending = (differ.to("cpu", non_blocking=True), event, step, previous)
        elif bool(differ):
            self._start_comparing(step, previous, step)
        return differ

    def _poll_probe(self, now: int) -> None:
        """A device probe's result, read once its event is done (never waited for), at the
        read of step `now`."""
        if self._pending is None or not self._pending[1].query():
            return
        found, _, step, previous = self._pending
        self._pending = None
        if bool(found):
            self._start_comparing(step, previous, now)

    def _start_comparing(self, step: int, previous: int | None, now: int) -> None:
        """The probe of `step` found a change through `.data` (seen at the read of `now`):
        the steps read since the `previous` probe, but `step`, hold what the optimizer
        applied, whether or not it was changed (`unknown`)."""
        first = step if previous is None else previous + 1  # the first read is a probe
        self.unknown += [
            (lo, hi) for lo, hi in ((first, step - 1), (step + 1, now - 1)) if lo <= hi
        ]
        since = ""
        if previous is not None and step > previous + 1:
            since = (
                f"; steps {previous + 1}-{step - 1} may hold the changed numbers (clipped unknown)"
            )
        self.compare = self.eager = True
        self._warn_once(
            "data",
            f"GradWatch: the gradients changed between backward and optimizer.step at step "
            f"{step} without a version bump (an in-place op through `.data`, e.g. "
            "p.grad.data.clamp_(...)); from now on every step is read at both points and "
            f"its norms are those before the change{since}. Clip through the gradient "
            "itself (p.grad.clamp_(...), clip_grad_norm_) to avoid the second reading.",
        )

    def _changed(
        self, rows: list[int | None], grads: list[torch.Tensor], eob: _Backward
    ) -> list[int]:
        """Positions of the fresh gradients changed in place since the end of backward (when
        comparing: every fresh one, the readings decide)."""
        if self.compare:
            return [k for k, r in enumerate(rows) if r is not None]
        return [k for k, r in enumerate(rows) if r is not None and eob.changed(r, grads[k])]

    def _fresh_rows(self, ids: list[int], grads: list[torch.Tensor]) -> list[int | None]:
        """Per gradient, its row in the end-of-backward reading if a backward since the last
        step made it (the same tensor object), else None; these rows are used up."""
        eob = self._eob
        if eob is None:
            return [None] * len(ids)
        found = [eob.rows.pop(i, None) for i in ids]
        return [r if r is not None and eob.refs[r]() is g else None for r, g in zip(found, grads)]

    def _scaler_from_stack(self) -> Any:
        """A GradScaler calling `optimizer.step` without `GradWatch(scaler=)`: use its scale
        for this step, and say once that skipped steps go unrecorded. The scaler calls it
        from `_maybe_opt_step` after unscaling, or straight from `GradScaler.step` for an
        optimizer with `_step_supports_amp_scaling` (fused: it gets `grad_scale` and
        `found_inf` and skips itself)."""
        frame = sys._getframe(1)
        for _ in range(12):
            if frame is None:
                return None
            if frame.f_code.co_name in _SCALER_FRAMES and "self" in frame.f_locals:
                found = frame.f_locals["self"]
                if isinstance(found, torch.amp.GradScaler) and found.is_enabled():
                    self._warn_once(
                        "scaler",
                        "GradWatch: optimizer.step is called by a torch.amp.GradScaler the "
                        "watch was not given: pass GradWatch(..., scaler=scaler), else the "
                        "steps it skips without calling optimizer.step (Inf/NaN) are not "
                        "recorded.",
                    )
                    return found
            frame = frame.f_back  # type: ignore[assignment]
        return None

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=user_stacklevel())

    # ---- closures -----------------------------------------------------------------------
    def with_closure(
        self, args: tuple, kwargs: dict, after_first: Callable[[], None], step: int = 0
    ) -> tuple[tuple, dict] | None:
        """`optimizer.step(closure)`'s arguments with the closure wrapped so that
        `after_first` runs right after its first call; None without a closure. A second call
        in one step (LBFGS, line searches) is said once: the record keeps the first's
        gradients, and nothing else would say that the step evaluated more."""
        if len(args) > 1 and callable(args[1]):
            closure, where = args[1], 1
        elif callable(kwargs.get("closure")):
            closure, where = kwargs["closure"], -1
        else:
            return None
        calls = [0]

        def closure_watched() -> Any:
            out = closure()
            calls[0] += 1
            if calls[0] == 1:
                after_first()
            elif calls[0] == 2:
                self._warn_once("closure", CLOSURE_NOTE.format(step=step))
            return out

        if where == 1:
            return (args[0], closure_watched, *args[2:]), kwargs
        return args, {**kwargs, "closure": closure_watched}

    # ---- GradScaler ---------------------------------------------------------------------
    def wrap_scaler(
        self, optimizers: list[Any], stepped: list[bool], on_skipped: Callable[[int], None]
    ) -> None:
        """Wrap the scaler instance's `update`: an optimizer the scaler stepped (stage
        STEPPED) whose own step did not run since the last update was skipped."""
        scaler = self.scaler
        if scaler is None:
            return
        original = scaler.update
        self._had_update = "update" in vars(scaler)

        def update(*args: Any, **kwargs: Any) -> Any:
            states = getattr(scaler, "_per_optimizer_states", None)
            for j, opt in enumerate(optimizers):
                state = None if states is None else states.get(id(opt))
                processed = state is not None and state.get("stage") is _STEPPED
                if not stepped[j] and (processed or states is None):
                    on_skipped(j)
                stepped[j] = False
            return original(*args, **kwargs)

        self._update = (update, original)
        scaler.update = update

    def unwrap_scaler(self) -> None:
        if self._update is None:
            return
        update, original = self._update
        if vars(self.scaler).get("update") is update:
            if self._had_update:
                self.scaler.update = original
            else:
                del self.scaler.update
        self._update = None
        self._eob = None


def stats_reader(fsdp_world: int | None) -> Callable[[list[torch.Tensor]], Any]:
    """The statistics of a list of gradients (under FSDP2: of this rank's shards)."""

    def read(grads: list[torch.Tensor]) -> Any:
        if fsdp_world is not None:
            grads = [local_part(g, fsdp_world)[0].detach() for g in grads]
        return by_device(grad_stats, grads, 3)

    return read


_STEPPED = OptState.STEPPED if OptState is not None else object()
# the GradScaler methods that call `optimizer.step` (a disabled scaler's `step` too: no scale)
_SCALER_FRAMES = ("_maybe_opt_step", "step")


def _scale_of(scaler: Any) -> Any:
    """The loss scale of this step (a float on the CPU, a device scalar tensor elsewhere)."""
    if scaler is None or not scaler.is_enabled() or getattr(scaler, "_scale", None) is None:
        return None
    s = scaler._scale
    return float(s) if s.device.type == "cpu" else s.detach().clone()


def _loss_scale(scaler: Any) -> Any:
    """What the end-of-backward gradients are divided by: the scale the loss was scaled by."""
    s = _scale_of(scaler)
    return 1.0 if s is None else s


def _divisor(scaler: Any, fused: Any) -> Any:
    """What an end-of-backward reading is divided by: a fused optimizer's `grad_scale` when no
    scaler counts (`scaler` None), else that scaler's loss scale (1.0: none)."""
    return fused if scaler is None and fused is not None else _loss_scale(scaler)


def _is_scale(divisor: Any) -> bool:
    """Whether an end-of-backward reading is divided by a loss scale (1.0: none)."""
    return not (isinstance(divisor, float) and divisor == 1.0)


def _divided(stats: Any, rows: list[int], scale: Any) -> Any:
    """Rows of an end-of-backward reading, norm and max |g| divided by the loss scale."""
    if isinstance(stats, torch.Tensor):  # all rows in order (the usual case): no index copy
        whole = len(rows) == len(stats) and rows == list(range(len(rows)))
        out_t = (stats if whole else stats[torch.as_tensor(rows, device=stats.device)]).clone()
        out_t[:, :2] /= scale
        return out_t
    out = np.asarray(stats)[rows]
    out[:, :2] /= float(scale)
    return out


def _unfused(stats: Any, grad_scale: Any) -> Any:
    """A fused optimizer's (still scaled) gradient statistics, unscaled."""
    return stats if grad_scale is None else _divided(stats, list(range(len(stats))), grad_scale)


def _zero_rows(stats: Any, rows: list[int]) -> Any:
    """Whether every row of `rows` has a zero norm (True for none): a bool, or a device
    tensor (no host sync)."""
    if not rows:
        return True
    part = _rows(stats, rows)
    if isinstance(part, torch.Tensor):
        zero = ~(part[:, 0] > 0).any()
        return bool(zero) if zero.device.type == "cpu" else zero
    return not bool((np.asarray(part)[:, 0] > 0).any())


def _rows(stats: Any, rows: list[int]) -> Any:
    """Rows of a reading (all of them: the reading itself)."""
    if rows == list(range(len(stats))):
        return stats
    if isinstance(stats, torch.Tensor):
        return stats[torch.as_tensor(rows, device=stats.device)]
    return np.asarray(stats)[rows]


def _replaced(post: Any, rows: list[int], pre: Any) -> Any:
    """`post` with its `rows` replaced by `pre` (the end-of-backward values of those rows)."""
    if rows == list(range(len(post))):
        return pre
    if isinstance(post, torch.Tensor):
        out_t = post.clone()
        out_t[torch.as_tensor(rows, device=post.device)] = torch.as_tensor(
            pre, device=post.device, dtype=post.dtype
        )
        return out_t
    out = np.array(post, dtype=np.float64)
    out[rows] = pre
    return out


_NOT_A_CLIP = (
    "GradWatch: the gradients changed in place between backward and optimizer.step at step "
    "{step} in a way no clipping does (zeroed, grown, or averaged across processes by hand: "
    "not each gradient scaled by a factor in (0, 1]): the record holds what the optimizer "
    "applied there (`clipped` False)."
)
_AVERAGED = (
    "GradWatch: every gradient was divided by {k} in place between backward and "
    "optimizer.step at step {step} (averaged by hand, e.g. over accumulated micro-batches): "
    "the record holds the divided gradients, what the optimizer applied (`clipped` False)."
)
#: relative room for one clipping factor (or clip value) read back from float32 gradients
CLIP_ROOM = 1e-6
#: relative room for a division by an integer read back from float32 gradients (one rounding
#: of 2**-24 per element, with room)
DIVIDE_ROOM = 2.0**-22
#: the largest count `divided_by` takes for an average (micro-batches, processes)
MAX_DIVISOR = 1024


def divided_by(pre: Any, post: Any) -> tuple[Any, Any]:
    """(whether, k): every changed row of `post` is `pre` divided by one integer k in
    2..MAX_DIVISOR (norm and max |g| alike), as `p.grad /= k` makes it. A bool and an int, or
    device tensors (no host sync).

    Example:
        >>> pre = np.array([[2.0, 1.0, 3], [4.0, 2.0, 3]])
        >>> divided_by(pre, pre * [0.25, 0.25, 1]), divided_by(pre, pre * [0.3, 0.3, 1])[0]
        ((True, 4), False)
    """
    a, b = (torch.as_tensor(x, dtype=torch.float64)[:, :2] for x in (pre, post))
    b = b.to(a.device)
    moved = ((a - b).abs() > CLIP_ROOM * a.abs()).any(1)
    ratio = b / a.clamp(min=torch.finfo(a.dtype).tiny)
    k = ratio[moved.int().argmax(), 0].reciprocal().round()
    exact = ((ratio * k - 1).abs() <= DIVIDE_ROOM) & (a > 0)
    verdict = moved.any() & (~moved | exact.all(1)).all() & (k >= 2) & (k <= MAX_DIVISOR)
    if verdict.device.type == "cpu":
        return bool(verdict), int(k) if bool(verdict) else 0
    return verdict, k


def clip_like(pre: Any, post: Any) -> Any:
    """Whether `post` is what clipping makes of `pre` (rows: norm, max |g|, ...): unchanged,
    or each changed row multiplied by a factor in (0, 1] (norm and max |g| alike:
    `clip_grad_norm_`, of all parameters or of each sub-network on its own), or every changed
    row's max |g| cut to one value (`clip_grad_value_`). Not clipping: gradients zeroed
    (`zero_grad` before `step`), grown, or averaged across processes by hand (not a scaling).
    Non-finite numbers from the backward keep the backward's (the anomaly's detail says where
    a NaN/Inf came in: watch/anomalies.py); a NaN/Inf the change made (`p.grad /= 0`) is no
    clipping. A bool, or a device tensor (no host sync).

    Example:
        >>> pre = np.array([[2.0, 1.0, 3], [4.0, 2.0, 3]])
        >>> clip_like(pre, pre * [0.5, 0.5, 1]), clip_like(pre, pre * [0, 0, 0])
        (True, False)
        >>> clip_like(pre, pre * [[0.5], [0.2]]), clip_like(pre, pre * [[0.5, 0.4, 1]])
        (True, False)
        >>> clip_like(pre, pre * [[1.0], [float("nan")]]), clip_like(pre * 0, pre * float("nan"))
        (False, False)
    """
    a, b = (torch.as_tensor(x, dtype=torch.float64)[:, :2] for x in (pre, post))
    b = b.to(a.device)
    if a.numel() == 0:
        return True
    room = CLIP_ROOM * a.abs()
    moved = ((a - b).abs() > room).any(1)
    ratio = b / a.clamp(min=torch.finfo(a.dtype).tiny)
    factor = ratio[:, :1]  # each row's own (clipping each sub-network on its own)
    alike = torch.where(a > 0, (ratio - factor).abs() <= CLIP_ROOM * factor, b == 0).all(1)
    alike &= (factor[:, 0] > 0) & (factor[:, 0] <= 1 + CLIP_ROOM)
    scaled = (~moved | alike).all()
    top = torch.where(moved, b[:, 1], b[:, 1].new_zeros(())).amax()
    cut = (b[:, 1] <= a[:, 1] + room[:, 1]).all() & (b[:, 0] <= a[:, 0] + room[:, 0]).all()
    cut &= ((~moved) | ((b[:, 1] - top).abs() <= CLIP_ROOM * top)).all() & (top > 0)
    # NaN/Inf the backward made stays as it came in (a clipping spreads it to every row); one
    # the change made is what the optimizer applies (`p.grad /= n` with n = 0)
    finite = torch.isfinite(a)
    made = (finite & ~torch.isfinite(b)).any()
    verdict = ~finite.all() | ((~moved.any() | scaled | cut) & ~made)
    return bool(verdict) if verdict.device.type == "cpu" else verdict


def made_nonfinite(pre: Any, post: Any) -> bool:
    """Whether a change between backward and the step made NaN/Inf of finite gradients: some
    row finite in `pre` is not in `post`, and every row of `pre` is finite (a NaN the backward
    made, which clipping spread, is the backward's). False on a device (no host sync).

    Example:
        >>> pre = np.array([[2.0, 1.0, 3], [0.0, 0.0, 3]])
        >>> nan = pre * [[1], [float("nan")]]
        >>> made_nonfinite(pre, nan), made_nonfinite(pre, pre * 0.5), made_nonfinite(nan, nan)
        (True, False, False)
    """
    if any(isinstance(x, torch.Tensor) and x.device.type != "cpu" for x in (pre, post)):
        return False
    a, b = (torch.as_tensor(x, dtype=torch.float64)[:, :2].cpu() for x in (pre, post))
    return bool(torch.isfinite(a).all() and not torch.isfinite(b).all())


def _chosen(clip: Any, pre_kept: Any, applied: Any) -> Any:
    """The reading kept: pre-clip values where `clip`, else what the optimizer applied."""
    if isinstance(clip, torch.Tensor):
        return torch.where(clip, torch.as_tensor(pre_kept, device=clip.device), applied)
    return pre_kept if clip else applied


def _both(clipped: Any, clip: Any) -> Any:
    """`clipped` where the change was a clipping, else False."""
    if isinstance(clip, torch.Tensor):
        return torch.as_tensor(clipped, device=clip.device) & clip
    return clipped if clip else False


def _differ(pre: Any, post: Any, scaled: bool = False) -> Any:
    """Whether the gradients the optimizer got differ from the end-of-backward ones. `scaled`:
    `pre` was divided by a loss scale, and `post` was unscaled by the GradScaler in float32
    (g x float32(1 / s)): a scale that is not a power of two (`init_scale=1000`,
    `growth_factor=1.5`) leaves them apart by that rounding (SCALE_ROUNDING), which is no
    change."""
    tol = SCALE_ROUNDING if scaled else 0.0
    if isinstance(post, torch.Tensor):
        pre_t = torch.as_tensor(pre, device=post.device, dtype=post.dtype)[:, :2]
        diff_t = pre_t != post[:, :2]
        if scaled:
            diff_t &= ~((pre_t - post[:, :2]).abs() <= tol * post[:, :2].abs())
        return diff_t.any()
    a, b = pre[:, :2], post[:, :2]
    with np.errstate(invalid="ignore"):
        diff = ~((a == b) | (np.isnan(a) & np.isnan(b)) | (np.abs(a - b) <= tol * np.abs(b)))
    return bool(diff.any())
