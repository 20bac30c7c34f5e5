"""Rolling robust baselines of per-step values, and the spike rule (watch/spikes.py uses them).

Each series (a parameter's gradient norm, a module's, an update ratio, the loss) keeps an
exponentially weighted mean and variance of its log value over `SpikeRule.window` steps. A
value counts `score` = log(value / baseline) / log(factor): 1 is `factor` times the baseline.
A step is a spike of a series when score >= 1 and the value is also `z` standard deviations
(of the log) above the mean, after `warmup` values, and it either jumped there (LEFT x
log(factor) above the previous value) or the series spiked at its previous value too: a
smooth rise (a learning-rate warm-up's update ratios) is no spike. The update is winsorised (a deviation
counts at most max(3 sd, log(factor) / 4)), so a spike barely moves its own baseline and a
lasting change of level is followed within ~`window` steps. A series that falls all along (the
loss, `follow_down`) is followed down unclipped: only rises are outliers there, and a clipped
fall left its baseline ~3x above a fast-falling loss, where a real 3x spike went unseen.

A series *left* its baseline at a step when it is half the way to a spike on both counts:
score >= LEFT and LEFT x `z` standard deviations above the mean (`departed`); without the
second, a noisy series (a bias whose norm moves 2x from step to step) "left" on a quarter of
all steps and was named the first mover of spikes it had no part in.

The same arithmetic runs on the training thread (the flight recorder's probe, deciding which
step to keep) and on the writer thread (the spikes found): fed the same numbers in the same
order, both find the same gradient-norm spikes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..errors import GradExplorerError
from .reduce import WIDE

#: a series' value has left its baseline from this score on (half the factor, in log terms)
LEFT = 0.5


@dataclasses.dataclass(frozen=True)
class SpikeRule:
    """How spikes are found: `factor` x the rolling baseline (over ~`window` steps) and `z`
    standard deviations of the log above it, after `warmup` values; an event ends after `gap`
    calm steps (or `span` steps after it started); `lead` steps before it are searched for who
    left first. The loss (`watch.log_loss`) spikes at `loss_factor` x its baseline (over
    window / 5 steps: it falls all along)."""

    window: int = 50
    factor: float = 4.0
    z: float = 4.0
    warmup: int = 20
    loss_factor: float = 1.5
    gap: int = 3
    span: int = 16
    lead: int = 8

    def __post_init__(self) -> None:
        ints = {k: getattr(self, k) for k in ("window", "warmup", "gap", "span", "lead")}
        for name, value in ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GradExplorerError(f"SpikeRule({name}=...) must be an int >= 1, got {value!r}")
        for name in ("factor", "z", "loss_factor"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise GradExplorerError(
                    f"SpikeRule({name}=...) must be a number > 0, got {value!r}"
                )
        for name in ("factor", "loss_factor"):
            value = getattr(self, name)
            if not value > 1 or not math.isfinite(value):
                raise GradExplorerError(
                    f"SpikeRule({name}=...) must be > 1 (a value this many times its baseline "
                    f"is a spike), got {value!r}"
                )


def check_spikes(value: Any) -> SpikeRule | None:
    """`GradWatch(spikes=)`: True (the default rule), False (off) or a SpikeRule."""
    if value is True:
        return SpikeRule()
    if value is False or value is None:
        return None
    if isinstance(value, SpikeRule):
        return value
    raise GradExplorerError(
        f"spikes must be True, False or a SpikeRule(window=, factor=, ...), got {value!r}"
    )


class Baselines:
    """One robust EWM baseline per series; `step(values)` scores a step, then learns from it."""

    def __init__(self, rule: SpikeRule, follow_down: bool = False) -> None:
        self.rule = rule
        self.follow_down = follow_down
        self.mean = np.zeros(0)
        self.var = np.zeros(0)
        self.last = np.zeros(0)
        self.count = np.zeros(0, dtype=np.int64)
        self.hot = np.zeros(0, dtype=bool)  # spiking at its last value
        self._log_f = math.log(rule.factor)
        self._alpha = 2.0 / (rule.window + 1)

    def grow(self, n: int) -> None:
        extra = n - len(self.mean)
        if extra > 0:
            self.mean = np.concatenate([self.mean, np.zeros(extra)])
            self.var = np.concatenate([self.var, np.zeros(extra)])
            self.last = np.concatenate([self.last, np.full(extra, np.nan)])
            self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])
            self.hot = np.concatenate([self.hot, np.zeros(extra, dtype=bool)])

    def insert(self, at: int, k: int) -> None:
        """`k` new series at position `at` (no baseline yet); those after it move up."""
        if k > 0:
            self.mean = np.insert(self.mean, at, np.zeros(k))
            self.var = np.insert(self.var, at, np.zeros(k))
            self.last = np.insert(self.last, at, np.full(k, np.nan))
            self.count = np.insert(self.count, at, np.zeros(k, dtype=np.int64))
            self.hot = np.insert(self.hot, at, np.zeros(k, dtype=bool))

    def reset(self, index: np.ndarray) -> None:
        """Forget the series at `index`: their values changed meaning (a module that gained
        a parameter), so they learn a new baseline from their next value."""
        self.mean[index], self.var[index], self.last[index], self.count[index] = 0, 0, np.nan, 0
        self.hot[index] = False

    def step(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(score, spike, z) of one step's values: z is the deviation in standard deviations
        of the log (NaN, Inf, 0: no score, not learnt)."""
        self.grow(len(values))
        n, rule = len(values), self.rule
        mean, var, count, last = self.mean[:n], self.var[:n], self.count[:n], self.last[:n]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.log(values)
            ok = np.isfinite(x)
            dev = x - mean
            sd = np.sqrt(var)
            grown = count >= rule.warmup
            score = np.where(grown & ok, dev / self._log_f, np.nan)
            z = np.where(grown & ok, np.where(sd > 0, dev / sd, np.sign(dev) * np.inf), np.nan)
            # sudden: a spike starts at sqrt(factor) x the series' previous value, and goes on
            # while it stays up (a smooth rise, a learning-rate warm-up, is no spike)
            hot = self.hot[:n]
            spike = reached(score, z, rule) & ((x - last >= LEFT * self._log_f) | hot)
            # learning: a plain running mean until warm, then winsorised EWM; the spread is
            # that of step-to-step changes (a trend, as in early training, is not noise)
            alpha = np.where(grown, self._alpha, 1.0 / (count + 1.0))
            clip = np.where(grown, np.maximum(3 * sd, self._log_f / 4), np.inf)
            jump = np.clip(x - last, -clip, clip)  # NaN on the first value: no spread yet
            d = np.minimum(dev, clip) if self.follow_down else np.clip(dev, -clip, clip)
        hot[ok] = spike[ok]
        if ok.all():
            mean += alpha * d
            b = np.maximum(alpha, self._alpha)
            fresh = np.isnan(jump)
            var[:] = np.where(fresh, var, (1 - b) * var + b * jump * jump / 2)
            last[:] = x
            count += 1
        else:
            mean[ok] += (alpha * d)[ok]
            b = np.maximum(alpha, self._alpha)
            upd = ok & ~np.isnan(jump)
            var[upd] = ((1 - b) * var + b * jump * jump / 2)[upd]
            last[ok] = x[ok]
            count[ok] += 1
        return score, spike, z


def departed(score: np.ndarray, z: np.ndarray, rule: SpikeRule) -> np.ndarray:
    """Where a series had left its baseline: half the way to a spike on both counts (module
    doc). NaN scores (no baseline yet, no value) never count.

    Example:
        >>> departed(np.array([0.6, 0.6, 0.2]), np.array([3.0, 1.0, 9.0]), SpikeRule())
        array([ True, False, False])
    """
    with np.errstate(invalid="ignore"):  # NaN compares False
        return (score >= LEFT) & (z >= LEFT * rule.z)


def reached(score: np.ndarray, z: np.ndarray, rule: SpikeRule) -> np.ndarray:
    """Where a series spiked: the spike rule (score >= 1 and `z` standard deviations)."""
    with np.errstate(invalid="ignore"):  # NaN compares False
        return (score >= 1.0) & (z >= rule.z)


def module_groups(names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Each parameter's module index (its path without the last name), and the modules in
    order of their first parameter (the model's registration order: its depth)."""
    modules: dict[str, int] = {}
    index = [modules.setdefault(n.rpartition(".")[0], len(modules)) for n in names]
    return np.asarray(index, dtype=np.int64), list(modules)


def module_norms(norms: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """sqrt of the summed squares of each module's measured norms (NaN: none measured).

    Example:
        >>> big = np.array([3.0, 4.0, np.nan]) * 2.0**700  # squares overflow float64
        >>> (module_norms(big, np.array([0, 0, 1]), 2) / 2.0**700).tolist()
        [5.0, nan]
    """
    have = np.isfinite(norms)
    values = np.where(have, norms, 0.0)
    seen = np.bincount(groups, weights=have.astype(np.float64), minlength=n_groups)
    if len(values) and (values.max() > WIDE or ((values > 0) & (values < 1 / WIDE)).any()):
        # squares would overflow or underflow: each module's norms divided by a power of two
        # near its largest first (only the exponents change)
        top = np.zeros(n_groups)
        np.maximum.at(top, groups, values)
        e = np.frexp(top)[1]
        scaled = np.ldexp(values, -e[groups])
        sq = np.bincount(groups, weights=scaled * scaled, minlength=n_groups)
        return np.where(seen > 0, np.ldexp(np.sqrt(sq), e), np.nan)
    sq = np.bincount(groups, weights=values * values, minlength=n_groups)
    with np.errstate(invalid="ignore"):
        return np.where(seen > 0, np.sqrt(sq), np.nan)


class Split:
    """Baselines of [parameters..., modules...], each part growing at its own end: a parameter
    added mid-run gets a new series between the parameters and the modules (appended to one
    array, it took over the first module's baseline: a false spike at the step it appeared,
    and every module moved onto its neighbour's). One array, so one `Baselines.step` a step.

    Example:
        >>> split = Split(SpikeRule(warmup=2))
        >>> for _ in range(3):
        ...     _ = split.step(np.array([1e-3]), np.array([1.0]))
        >>> score, spike, z = split.step(np.array([1e-3, 5.0]), np.array([1.0]))
        >>> np.isnan(score[1]), bool(spike[1]), float(score[2])   # the new one: no baseline yet
        (np.True_, False, 0.0)
    """

    def __init__(self, rule: SpikeRule) -> None:
        self.both = Baselines(rule)
        self.n_params = 0

    def step(self, per: np.ndarray, mods: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(score, spike, z) of [parameters..., modules...]."""
        if len(per) > self.n_params:
            self.both.insert(self.n_params, len(per) - self.n_params)
            self.n_params = len(per)
        elif len(per) < self.n_params:  # the rest have no value this step: not learnt
            per = np.concatenate([per, np.full(self.n_params - len(per), np.nan)])
        return self.both.step(np.concatenate([per, mods]))

    def regroup(self, modules: int, changed: np.ndarray) -> None:
        """`modules` modules now, and the `changed` ones (that gained parameters) start anew."""
        self.both.grow(self.n_params + modules)
        self.both.reset(self.n_params + np.asarray(changed, dtype=np.int64))


class NormSeries:
    """The gradient-norm series of a step: every parameter, then every module."""

    def __init__(self, rule: SpikeRule) -> None:
        self.baselines = Split(rule)
        self.groups = np.zeros(0, dtype=np.int64)
        self.modules: list[str] = []
        #: the modules whose parameters changed at the last step (their baselines restarted)
        self.regrouped = np.zeros(0, dtype=np.int64)

    def step(
        self, norms: np.ndarray, names: list[str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(score, spike, z) of [parameters..., modules...] for one step's full norm vector."""
        self.regrouped = self.regrouped[:0]
        if len(self.groups) != len(names):  # names only grow; a replaced one keeps its place
            before = np.bincount(self.groups, minlength=len(self.modules))
            self.groups, self.modules = module_groups(names)
            now = np.bincount(self.groups, minlength=len(self.modules))
            self.regrouped = np.nonzero(now[: len(before)] != before)[0]
            self.baselines.regroup(len(self.modules), self.regrouped)
        mods = module_norms(norms[: len(self.groups)], self.groups, len(self.modules))
        return self.baselines.step(norms, mods)


class SpikeProbe:
    """The training thread's copy of the gradient-norm rule: whether this step starts a spike
    (a norm spike after `gap` calm steps) or is a calm step worth keeping for compare()."""

    def __init__(self, rule: SpikeRule) -> None:
        self.rule = rule
        self.series = NormSeries(rule)
        self.last_spike = -(1 << 40)
        self.calm_kept = False

    def check(self, step: int, norms: np.ndarray, names: list[str]) -> tuple[bool, bool]:
        """(starts a spike, calm step wanted for comparison) at `step`."""
        score, spike, _ = self.series.step(norms, names)
        spiking = bool(spike.any())
        starts = spiking and step - self.last_spike > self.rule.gap
        if spiking:
            self.last_spike = step
            self.calm_kept = False
        calm = (
            not spiking
            and not self.calm_kept
            and step - self.last_spike > self.rule.gap
            and bool(np.isfinite(score).any())
        )
        if calm:
            self.calm_kept = True
        return starts, calm
