"""Spikes: values that leave their rolling baseline (watch/baselines.py), grouped into events,
with who moved first.

The writer thread feeds every step's gradient norms and update ratios (per parameter and per
module: the module's norm is the root of its parameters' summed squares) and the losses given
to `watch.log_loss`. A step where some series spikes opens an event (after `gap` calm steps);
it ends after `gap` calm steps or `span` steps. Then every series that left its baseline
(score >= 0.5, i.e. sqrt(factor) x, and z / 2 standard deviations: `baselines.departed`) in the
`lead` steps before it or during it is ranked: the earliest first, then the furthest (a lead
before the event needs its departed steps to add up to `z` standard deviations). The event is
one `Spike`, one `spike` anomaly and one row of the record's `spikes` table, so a recorded run
reads back exactly what the live run found.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GradExplorerError
from .anomalies import SPIKE
from .baselines import (
    Baselines,
    NormSeries,
    SpikeRule,
    Split,
    departed,
    module_groups,
    module_norms,
    reached,
)

if TYPE_CHECKING:
    import pandas as pd

#: flight-record kinds: a spike's first recorded step, and a calm step kept to compare with
CALM = "calm"
ROW_KEYS = ("name", "kind", "signal", "depth", "first_step", "lead", "rise", "score")


@dataclasses.dataclass
class Spike:
    """One spike event: from `step` to `end`; `params` and `modules` ranked by who left their
    baseline first and furthest (the first left first); `loss_step` the loss's own spike step
    (None: no loss given, or it did not spike); `rows` one dict per series that left (name,
    kind, signal, depth, first_step, lead = steps before the loss, or before `step`, rise =
    value / baseline at its peak); `sentence` says it in words."""

    step: int
    end: int
    params: list[str]
    modules: list[str]
    sentence: str
    loss_step: int | None = None
    rows: list[dict] = dataclasses.field(default_factory=list)
    rank: int = 0
    _open: Callable[..., Any] | None = dataclasses.field(default=None, repr=False)

    def to_json(self) -> str:
        keep = ("step", "end", "params", "modules", "sentence", "loss_step", "rows")
        return json.dumps({k: getattr(self, k) for k in keep})

    @classmethod
    def from_json(cls, text: str, rank: int = 0, opener: Callable[..., Any] | None = None) -> Spike:
        return cls(**json.loads(text), rank=rank, _open=opener)

    def frame(self) -> pd.DataFrame:
        """One row per series that left its baseline, in rank order."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(ROW_KEYS))

    @staticmethod
    def frame_columns() -> list[str]:
        return list(ROW_KEYS)

    def explore(self, model: Any = None, **options: Any) -> Any:
        """A GradExplorer on this spike's first recorded step (its batch, RNG states and
        pre-update weights); `model` for a run opened from disk. GradExplorerError says why
        when no record was kept."""
        return self._opener()("explore", self, model, options)

    def compare(self, model: Any = None, **options: Any) -> Any:
        """The explorer's compare mode: a calm step recorded before this spike (run A) against
        the spike's first recorded step (run B). A `target=` (for `loss_fn`) is the spike
        step's: give the calm step's as `calm_target=` (no record holds a target)."""
        return self._opener()("compare", self, model, options)

    def _opener(self) -> Callable[..., Any]:
        if self._open is None:
            raise GradExplorerError("this spike is not bound to a run: read it from watch.spikes")
        return self._open

    def __repr__(self) -> str:
        return f"Spike({self.sentence})"


class SpikeFinder:
    """The writer thread's side: baselines of every series, open event, finished spikes."""

    def __init__(self, rule: SpikeRule) -> None:
        self.rule = rule
        self.norms = NormSeries(rule)
        self.ratios = Split(rule)
        # the loss falls steadily for most of a run: a shorter window lags it less
        fast = dataclasses.replace(rule, factor=rule.loss_factor, window=max(2, rule.window // 5))
        self.loss = Baselines(fast, follow_down=True)
        self._recent: collections.deque = collections.deque(maxlen=self._keep(1))
        #: steps between update-ratio measurements (`update_ratio=N`: N), seen in the data
        self._every, self._ratio_at = 1, -1
        self._intervals: collections.deque = collections.deque(maxlen=8)
        #: step -> (score, z) of the loss
        self._loss_scores: dict[int, tuple[float, float]] = {}
        self._losses: dict[int, list[float]] = {}
        self._event: dict[str, Any] | None = None
        self._last_spike = -(1 << 40)
        self._last_step = -1
        self.names: list[str] = []
        #: finished events, oldest first
        self.found: list[Spike] = []
        #: events opened since last asked: (step, the series that spiked there)
        self.opened: list[tuple[int, list[str]]] = []

    # ---- input ---------------------------------------------------------------------------
    def add_steps(
        self,
        steps: np.ndarray,
        norms: np.ndarray,
        dnorm: np.ndarray,
        pnorm: np.ndarray,
        names: list[str],
    ) -> list[Spike]:
        """(k, n) norms, update norms and parameter norms of k steps; the events they end."""
        self.names = names
        done: list[Spike] = []
        for r, step in enumerate(steps.tolist()):
            score, spike, z = self.norms.step(norms[r], names)
            self.ratios.regroup(len(self.norms.modules), self.norms.regrouped)
            per, mods = self._ratios(dnorm[r], pnorm[r])
            self._measured_ratios(step, np.concatenate([per, mods]))
            rscore, rspike, rz = self.ratios.step(per, mods)
            # each row keeps how many parameters it had: rows before a parameter was added
            # are laid out with fewer (`_fit`)
            self._recent.append((step, score, rscore, z, rz, len(per)))
            self._last_step = step
            # a gradient norm spike after the norms' own calm gap ends an event that update
            # ratios opened at their slower pace (it had absorbed one 47 steps later)
            done += self._superseded(step, spike)
            # a spike seen only in update ratios measured every N steps: its calm gap and
            # span count measurements (one excursion over 60 steps was 6 events)
            self._mark(step, spike | rspike, self._every if not spike.any() else 1)
            done += self._take_losses(functools.partial(_before, step - 1))
            done += self._maybe_end(step)
        return done

    def add_loss(self, step: int, value: float) -> list[Spike]:
        """One loss of `step` (several per step, gradient accumulation: their mean)."""
        self.queue_loss(step, value)
        return self._take_losses(functools.partial(_before, step))

    def queue_loss(self, step: int, value: float) -> None:
        """Keep one loss of `step` for `add_steps` to take in step order: a loss that arrived
        with its step's gradients is seen before later steps can end that step's event."""
        self._losses.setdefault(step, []).append(value)

    def finish(self) -> list[Spike]:
        """The run ended: pending losses counted, the open event ended."""
        done = self._take_losses(functools.partial(_before, 1 << 62))
        if self._event is not None:
            done.append(self._end())
        return done

    def _keep(self, every: int) -> int:
        """How many recent steps an event's window may need."""
        return (self.rule.lead + self.rule.span + self.rule.gap) * every + 2

    def _measured_ratios(self, step: int, ratios: np.ndarray) -> None:
        """Learn the steps between update-ratio measurements from the steps that have them:
        the shortest of the last few intervals (a step the GradScaler skipped measures
        nothing, and must not stretch every later event)."""
        if not np.isfinite(ratios).any():
            return
        if self._ratio_at >= 0:
            self._intervals.append(step - self._ratio_at)
            every = min(self._intervals)
            if every != self._every:
                self._every = every
                self._recent = collections.deque(self._recent, maxlen=self._keep(every))
        self._ratio_at = step

    def _ratios(self, dnorm: np.ndarray, pnorm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(per parameter, per module) update ratios."""
        groups = self.norms.groups
        n = len(groups)
        with np.errstate(invalid="ignore", divide="ignore"):
            per = dnorm / pnorm
            g = len(self.norms.modules)
            mods = module_norms(dnorm[:n], groups, g) / module_norms(pnorm[:n], groups, g)
        return per, mods

    def _take_losses(self, due: Callable[[int], bool]) -> list[Spike]:
        done: list[Spike] = []
        for step in sorted(s for s in self._losses if due(s)):
            values = self._losses.pop(step)
            score, spike, z = self.loss.step(np.array([sum(values) / len(values)]))
            self._loss_scores[step] = (float(score[0]), float(z[0]))
            if bool(spike[0]):
                event = self._event
                if event is not None and event["loss_step"] is None:
                    event["loss_step"] = step
                    event["last"] = max(event["last"], step)
                elif event is None and step - self._last_spike > self.rule.gap:
                    self._event = {"start": step, "last": step, "loss_step": step, "every": 1}
                    self.opened.append((step, ["loss"]))
                self._last_spike = max(self._last_spike, step)
        self._forget_losses()
        return done

    def _forget_losses(self) -> None:
        """Loss scores no event can need again: older than the open event's lead window (an
        event measured every N steps spans up to N x span steps) and than the last 2 x span."""
        if len(self._loss_scores) <= 4 * self.rule.span + self.rule.lead:
            return
        steps = sorted(self._loss_scores)
        keep = steps[-2 * self.rule.span]
        if self._event is not None:
            keep = min(keep, self._event["start"] - self.rule.lead)
        for s in steps:
            if s >= keep:
                break
            del self._loss_scores[s]

    # ---- events --------------------------------------------------------------------------
    def _mark(self, step: int, spiked: np.ndarray, every: int = 1) -> None:
        """A step where `spiked` series left their baseline; `every`: the steps between two
        measurements of those series (gap and span count measurements)."""
        if not spiked.any():
            return
        if self._event is None and step - self._last_spike > self.rule.gap * every:
            self._event = {"start": step, "last": step, "loss_step": None, "every": every}
            labels = self.names + self.norms.modules
            self.opened.append(
                (step, [labels[i] for i in np.nonzero(spiked)[0] if i < len(labels)])
            )
        elif self._event is not None:
            # the event keeps the pace it opened with: update ratios measured every 10 steps
            # made an event of gradient norms wait 30 steps to end and last up to 160
            self._event["last"] = step
        self._last_spike = step

    def _superseded(self, step: int, norm_spike: np.ndarray) -> list[Spike]:
        """The open event, ended when this step's gradient norms spike while it was opened at
        the slower pace of update ratios and its last spike is older than the norms' calm gap:
        the norms' spike is an event of its own, named for what started it."""
        event = self._event
        if event is None or event["every"] == 1 or not norm_spike.any():
            return []
        if step - event["last"] <= self.rule.gap:
            return []
        done = [self._end()]
        self._last_spike = -(1 << 40)  # the new event opens at this step
        return done

    def _maybe_end(self, step: int) -> list[Spike]:
        event = self._event
        if event is None:
            return []
        every = event["every"]
        if step - event["last"] >= self.rule.gap * every or step - event["start"] >= (
            self.rule.span * every
        ):
            return [self._end()]
        return []

    def _end(self) -> Spike:
        event, self._event = self._event, None
        assert event is not None
        spike = describe(event, self._window(event), self.names, self.norms.modules, self.rule)
        self.found.append(spike)
        return spike

    def provisional(self) -> Spike | None:
        """The event still open (not stored yet), as it reads now."""
        if self._event is None:
            return None
        return describe(
            dict(self._event), self._window(self._event), self.names, self.norms.modules, self.rule
        )

    def _window(self, event: dict[str, Any]) -> dict[str, Any]:
        lo, hi = event["start"] - self.rule.lead, max(event["last"], event["start"])
        rows = [row for row in self._recent if lo <= row[0] <= hi]
        loss = {s: v for s, v in self._loss_scores.items() if lo <= s <= hi}
        return {"rows": rows, "loss": loss}


def _before(limit: int, step: int) -> bool:
    return step < limit


def _firsts(
    steps: np.ndarray, scores: np.ndarray, zs: np.ndarray, start: int, rule: SpikeRule
) -> tuple[np.ndarray, np.ndarray]:
    """Per series (columns): where it left its baseline for this event (the start of the run
    of departed steps, `baselines.departed`, that reaches the event; big: it did not) and its
    peak score from the event's `start` on. A blip that came back before the event does not
    count as leaving, nor does a run before the event whose deviations add up to less than `z`
    spreads."""
    left = departed(scores, zs, rule)
    run = np.zeros(left.shape, dtype=np.int64)  # where each departed run began
    for t in range(len(steps)):
        run[t] = np.where(left[t] & (t > 0) & left[t - 1], run[t - 1], t) if t else 0
    hit = left & (steps >= start)[:, None]
    k = np.argmax(hit, axis=0)
    cols = np.arange(left.shape[1])
    began = run[k, cols]
    # a lead must be evidence, not one of many series' noise: the departed steps before the
    # event need `z` spreads in all (one step 2.5 spreads out, of 60 series, is chance)
    with np.errstate(invalid="ignore"):
        zc = np.nan_to_num(np.where(left, zs, 0.0), nan=0.0, posinf=rule.z, neginf=0.0)
    total = np.vstack([np.zeros((1, left.shape[1])), np.cumsum(zc, axis=0)])
    began = np.where(total[k, cols] - total[began, cols] >= rule.z, began, k)
    # departed all through the lead window: a drifting baseline, not a mover; it counts from
    # the step it reached the spike level (if it did)
    drift = left[0] & (began == 0) & (steps[0] < start)
    spiked = reached(scores, zs, rule) & (steps >= start)[:, None]
    at = np.argmax(spiked, axis=0)
    first = np.where(hit.any(axis=0), steps[began], 1 << 40)
    first = np.where(drift, np.where(spiked.any(axis=0), steps[at], 1 << 40), first)
    # the peak over the event, from its start: the lead window can reach back into the event
    # before, whose peak a later spike's rows had repeated
    during = np.isfinite(scores) & (steps >= start)[:, None]
    with np.errstate(all="ignore"):
        peak = np.max(np.where(during, scores, -np.inf), axis=0, initial=-np.inf)
    return first, peak


def _loss_first(
    loss: dict[int, tuple[float, float]], ref: int, rule: SpikeRule
) -> tuple[int, float] | None:
    """The loss's first step and peak by the gradients' rule (`_firsts`): the run of departed
    steps that reaches `ref`, its own spike step when it spiked (so that run always exists),
    else the event's start; a noisy loss that came back before it does not count as leaving.
    None: the loss did not leave its baseline."""
    if not loss:
        return None
    steps = np.array(sorted(loss), dtype=np.int64)
    scores = np.array([[loss[s][0]] for s in steps.tolist()], dtype=np.float64)
    zs = np.array([[loss[s][1]] for s in steps.tolist()], dtype=np.float64)
    first, peak = _firsts(steps, scores, zs, ref, rule)
    return (int(first[0]), float(peak[0])) if first[0] <= steps[-1] else None


def describe(
    event: dict[str, Any],
    window: dict[str, Any],
    names: list[str],
    modules: list[str],
    rule: SpikeRule,
) -> Spike:
    """The ranked series and the sentence of one event."""
    rows = window["rows"]
    start, ref = event["start"], event["loss_step"]
    ref = start if ref is None else ref
    n, width = len(names), len(names) + len(modules)
    steps = np.array([row[0] for row in rows], dtype=np.int64)
    norm, ratio, nz, rz = (
        np.stack([_fit(row[k], row[5], n, width) for row in rows]) if rows else np.zeros((0, width))
        for k in (1, 2, 3, 4)
    )
    none = (np.full(width, 1 << 40), np.full(width, -np.inf))
    nf, npk = _firsts(steps, norm, nz, start, rule) if rows else none
    rf, rpk = _firsts(steps, ratio, rz, start, rule) if rows else none
    use_ratio = (rf < nf) | ((rf == nf) & (rpk > npk))
    first, peak = np.where(use_ratio, rf, nf), np.maximum(npk, rpk)
    table = []
    for i in np.nonzero(first < (1 << 40))[0].tolist():
        kind = "param" if i < n else "module"
        name = names[i] if i < n else modules[i - n]
        depth = i if i < n else _module_depth(names, name)
        table.append(
            _row(
                name,
                kind,
                "update_ratio" if use_ratio[i] else "norm",
                depth,
                int(first[i]),
                ref,
                float(peak[i]),
                rule.factor,
            )
        )
    moved = _loss_first(window["loss"], ref, rule)
    if moved is not None:
        left_at, worst = moved
        table.append(_row("loss", "loss", "loss", n, left_at, ref, worst, rule.loss_factor))
    table.sort(key=lambda r: (r["first_step"], -r["score"], r["depth"]))
    params = [r["name"] for r in table if r["kind"] == "param"]
    mods = [r["name"] for r in table if r["kind"] == "module"]
    inside = steps >= start  # the depth comparison: the event's own steps
    highs = np.full(n, np.nan)
    if inside.any():  # else none of the event's own steps was kept (a reduction of nothing)
        during = np.fmax(norm[inside, :n], ratio[inside, :n])
        with np.errstate(all="ignore"):
            highs = np.nanmax(np.where(np.isfinite(during), during, -np.inf), axis=0)
    sentence = _sentence(event, table, highs, rule)
    return Spike(
        start, max(event["last"], start), params, mods, sentence, event["loss_step"], table
    )


def _fit(a: np.ndarray, had: int, n: int, width: int) -> np.ndarray:
    """A row of `had` parameters then modules, laid out as [n parameters, modules] of
    `width` (NaN where a series did not exist yet).

    Example:
        >>> _fit(np.array([1.0, 2.0, 10.0]), 2, 3, 5).tolist()   # a parameter, a module added
        [1.0, 2.0, nan, 10.0, nan]
    """
    out = np.full(width, np.nan)
    out[:had] = a[:had]
    mods = a[had : had + width - n]
    out[n : n + len(mods)] = mods
    return out


def _module_depth(names: list[str], module: str) -> int:
    index, mods = module_groups(names)
    j = mods.index(module)
    return int(np.nonzero(index == j)[0][0])


def _row(
    name: str, kind: str, signal: str, depth: int, first: int, ref: int, score: float, factor: float
) -> dict:
    return {
        "name": name,
        "kind": kind,
        "signal": signal,
        "depth": depth,
        "first_step": first,
        "lead": ref - first,
        "rise": float(factor**score),
        "score": score,
    }


def _sentence(event: dict[str, Any], table: list[dict], peaks: np.ndarray, rule: SpikeRule) -> str:
    start, loss_step = event["start"], event["loss_step"]
    head = f"step {start}: "
    movers = _movers(table)
    if not movers:
        return head + (
            "the loss spiked with no gradient leaving its baseline"
            if loss_step is not None
            else "a spike"
        )
    first = movers[0]["first_step"]
    leaders = [r for r in movers if r["first_step"] == first][:2]
    where = " and ".join(r["name"] for r in leaders)
    what = "update ratio" if leaders[0]["signal"] == "update_ratio" else "gradient norm"
    # the rise is the series' peak over the event, not its value at the first step
    text = f"{head}started in {where} ({what}, up to {leaders[0]['rise']:.3g}x its baseline)"
    if loss_step is not None:
        lead = loss_step - first
        text += (
            f", {lead} step{'s' if lead != 1 else ''} before the loss"
            if lead > 0
            else " at the loss's own step"
            if lead == 0
            else f", {-lead} step{'s' if lead != -1 else ''} after the loss"
        )
    return text + _depth_words(peaks, rule)


def _movers(table: list[dict]) -> list[dict]:
    """The series the sentence may name as the first movers: modules (a module says more than
    one of its parameters), unless a parameter left its baseline before every module did (an
    event opened by a bias's update ratio at step 490 read "started in 0", a module that left
    at 516).

    Example:
        >>> rows = [{"kind": "param", "first_step": 490}, {"kind": "module", "first_step": 516}]
        >>> [r["kind"] for r in _movers(rows)]
        ['param']
    """
    mods = [r for r in table if r["kind"] == "module"]
    params = [r for r in table if r["kind"] == "param"]
    if mods and params and params[0]["first_step"] < mods[0]["first_step"]:
        return params
    return mods or params


def _depth_words(peaks: np.ndarray, rule: SpikeRule) -> str:
    """Lower (first half by registration order) against upper layers: the ratio of the largest
    rise (value / baseline) in each half during the event."""
    finite = np.where(np.isfinite(peaks), np.maximum(peaks, 0.0), np.nan)
    half = len(finite) // 2
    if half < 1:
        return ""
    lower, upper = finite[:half], finite[half:]
    if np.isnan(lower).all() or np.isnan(upper).all():
        return ""
    ratio = rule.factor ** (float(np.nanmax(lower)) - float(np.nanmax(upper)))
    if ratio >= 2:
        return f"; lower layers {ratio:.2g}x more than upper"
    if ratio <= 0.5:
        return f"; upper layers {1 / ratio:.2g}x more than lower"
    return "; lower and upper layers alike"


# ---- opening a spike's step ------------------------------------------------------------------
def _decided(notes: dict[str, Any] | None, kind: str) -> list[tuple[int, dict]]:
    steps = (notes or {}).get("steps", {})
    return sorted((int(s), e) for s, e in steps.items() if kind in e.get("kinds", ()))


def record_step(book: Any, spike: Spike) -> int:
    """The step whose flight record `spike.explore()` opens: the first kept spike record in
    [spike.step, spike.end]; GradExplorerError saying why when there is none."""
    head = f"no flight record for the spike of step {spike.step}"
    notes = book.notes
    inside = [(s, e) for s, e in _decided(notes, SPIKE) if spike.step <= s <= spike.end]
    kept = [s for s, e in inside if e.get("kept") and s in book]
    if kept:
        return kept[0]
    if notes is None:
        raise GradExplorerError(f"{head}: this run left no notes of its flight recorder")
    if notes.get("off"):
        raise GradExplorerError(f"{head}: {notes['off']}")
    if inside:
        why = inside[0][1].get("why") or "it was made but is no longer on disk"
        raise GradExplorerError(f"{head} (step {inside[0][0]}): {why}")
    if notes.get("unchecked"):
        raise GradExplorerError(f"{head}: {notes['unchecked']}")
    signal = spike.rows[0]["signal"] if spike.rows else "loss"
    raise GradExplorerError(
        f"{head}: no gradient norm left its baseline by the spike factor at steps "
        f"{spike.step}-{spike.end}; the spike was seen in the {signal.replace('_', ' ')}, which "
        "the writer thread finds after the step, when the pre-update weights are gone (the "
        "flight recorder decides at the step pre-hook, from the gradient norms). A smaller "
        "SpikeRule(factor=...) or GradWatch(flight_recorder=<norm>) records such steps"
    )


def _later_step(spike: Spike, step: int) -> str | None:
    """What a replay says when it is not the spike's own step (None: it is)."""
    if step == spike.step:
        return None
    signal = spike.rows[0]["signal"].replace("_", " ") if spike.rows else "loss"
    return (
        f"this replays step {step}, the first step of the spike of step {spike.step} with a "
        f"flight record: at step {spike.step} the spike was seen in the {signal}, found after "
        "the step, when its pre-update weights were gone"
    )


def calm_step(book: Any, spike: Spike, before: int) -> int:
    """The latest calm step recorded before `before` (the spike's record), for compare()."""
    kept = [s for s, e in _decided(book.notes, CALM) if s < before and e.get("kept") and s in book]
    if kept:
        return kept[-1]
    why = [e.get("why") for s, e in _decided(book.notes, CALM) if s < before and not e.get("kept")]
    raise GradExplorerError(
        f"no calm step before the spike of step {spike.step} has a flight record"
        + (
            f": {why[-1]}"
            if why and why[-1]
            else " (the run spiked before its baselines had a "
            "calm step to keep); spike.explore() opens the spike's step alone"
        )
    )


def open_spike(
    how: str,
    spike: Spike,
    book: Any,
    model: Any,
    loss_fn: Any,
    recorder: Any,
    options: dict[str, Any],
    *,
    from_disk: bool = False,
) -> Any:
    """`spike.explore()` (how="explore") or `spike.compare()` on the flight records of `book`
    (`from_disk`: a run read from disk, one rank's records)."""
    from .anomalies import replay

    step = record_step(book, spike)
    if model is None:
        raise GradExplorerError(
            "no model to replay the step on: pass one of the same architecture, "
            "spike.explore(model) (a run opened from disk, or a closed watch); it is copied, "
            "not changed"
        )
    loss_fn = options.pop("loss_fn", loss_fn)
    if how == "explore":
        said = _later_step(spike, step)
        return replay(
            book[step], model, loss_fn, recorder, from_disk=from_disk, finding=said, **options
        )
    calm = calm_step(book, spike, step)
    calm_options = _calm_options(options, calm, step)
    a = replay(book[calm], model, loss_fn, recorder, from_disk=from_disk, **calm_options)
    b = replay(book[step], model, loss_fn, recorder, from_disk=from_disk, **options)
    a.label, b.label = f"calm step {calm}", f"spike step {step}"  # A and B were both "cpu"
    return b.compare(a)


#: `calm_target` not given (None is a target a loss_fn may take)
_NO_TARGET = object()


def _calm_options(options: dict[str, Any], calm: int, step: int) -> dict[str, Any]:
    """The calm step's replay options: the spike's, but its own `calm_target` (popped from
    `options`). The target is no model argument, so no record holds it: one `target=` for both
    replays gave the calm step the spike step's labels, and its norms were wrong unsaid."""
    own = options.pop("calm_target", _NO_TARGET)
    mine = dict(options)
    if own is not _NO_TARGET:
        mine["target"] = own
    elif "target" in options:
        raise GradExplorerError(
            f"spike.compare() replays two steps, the calm step {calm} (A) and the spike's step "
            f"{step} (B), and no record holds a target: pass each its own, compare(target=<step "
            f"{step}'s>, calm_target=<step {calm}'s>) (calm_target=target when every step has "
            "the same target)"
        )
    return mine
