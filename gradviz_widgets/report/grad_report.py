"""GradReport: what one run found, per parameter and per module, as frozen plain data."""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..vocabulary import SEVERITY, STYLES, Thresholds, classify, format_norm


@dataclasses.dataclass(frozen=True)
class ParamRecord:
    """One parameter's gradient in one run.

    `norm` is the L2 norm (None: no gradient), `max_abs` the largest |element|;
    `none_reason` says why there is no gradient; `zero_origin` names the graph node where the
    gradient flowing back became all zeros; `norm_before` is set when a modifier changed it;
    `zero_fraction` is the share of gradient elements that are exactly 0.0 (dead units show
    as zero rows of an otherwise healthy weight).
    """

    name: str
    module: str
    shape: tuple[int, ...]
    dtype: str
    requires_grad: bool
    norm: float | None
    max_abs: float | None
    status: str
    none_reason: str | None = None
    zero_origin: str | None = None
    modified_by: str | None = None
    norm_before: float | None = None
    zero_fraction: float | None = None


@dataclasses.dataclass(frozen=True)
class GradReport:
    """The findings of one forward + backward.

    Example:
        >>> report = GradExplorer(model, x).run()          # doctest: +SKIP
        >>> report.param_status["gate.weight"]               # doctest: +SKIP
        'zero'
    """

    loss: float
    loss_description: str
    params: tuple[ParamRecord, ...]
    module_norms: Mapping[str, float | None]
    thresholds: Thresholds
    device: str
    duration_s: float
    nonfinite_origin: str | None = None
    findings: tuple[str, ...] = ()
    input_norms: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    host_syncs: int = 1
    # under DDP with ranks gathered: rank -> parameter -> (status, none reason, norm)
    ranks: Mapping[int, Mapping[str, tuple[Any, ...]]] | None = None
    #: how the run was made, with nothing wrong in it (the model's own loss was the loss, a
    #: copy kept the model unchanged): said after the findings, never as a problem
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "module_norms", MappingProxyType(dict(self.module_norms)))
        object.__setattr__(self, "input_norms", MappingProxyType(dict(self.input_norms)))

    @property
    def param_norms(self) -> dict[str, float | None]:
        """name -> L2 norm of its gradient, None where there is none."""
        return {p.name: p.norm for p in self.params}

    @property
    def param_status(self) -> dict[str, str]:
        """name -> none | zero | vanishing | healthy | exploding | nonfinite."""
        return {p.name: p.status for p in self.params}

    @property
    def none_reasons(self) -> dict[str, str]:
        """name -> why it has no gradient, for parameters without one."""
        return {p.name: p.none_reason for p in self.params if p.none_reason}

    @property
    def zero_origins(self) -> dict[str, str]:
        """name -> graph node id where its gradient became all zeros."""
        return {p.name: p.zero_origin for p in self.params if p.zero_origin}

    def param(self, name: str) -> ParamRecord:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"no parameter {name!r}; parameters: {[p.name for p in self.params][:8]}...")

    def rows(self) -> list[dict[str, Any]]:
        """One plain dict per parameter (for tables, CSV and JSON)."""
        return [dataclasses.asdict(p) for p in self.params]

    def judged_by(self, thresholds: Thresholds) -> GradReport:
        """This run with its gradients judged by `thresholds` (each parameter's status from
        its norm and max |g|; none stays none): what compare mode sets against a newer run
        whose thresholds changed, so that a threshold alone changes no status."""
        if thresholds == self.thresholds:
            return self
        params = tuple(
            p if p.norm is None else dataclasses.replace(
                p, status=classify(p.norm, p.max_abs, thresholds)
            )
            for p in self.params
        )  # fmt: skip
        return dataclasses.replace(self, params=params, thresholds=thresholds)

    def compare(self, other: GradReport) -> Any:
        """This run (a) next to `other` (b): a pandas DataFrame indexed by parameter with
        norm_a, norm_b, ratio (b / a), status_a, status_b and status_changed."""
        from .compare import compare_reports

        return compare_reports(self, other)

    def summary(self, loss: bool = True) -> str:
        """One line for a status bar; `loss=False` leaves out the loss, its description and the
        device (for a status line under a header that shows them: the widget's)."""
        ms = f"{self.duration_s * 1000:.0f} ms"
        head = (
            f"loss {format_norm(self.loss)} ({self.loss_description}) on {self.device} in {ms}"
            if loss
            else f"ran in {ms}"
        )
        if self.findings:
            return "; ".join((head, *self.findings, *self.notes))
        healthy = self.headline() if self.params else "all gradients healthy"
        return "; ".join((head, healthy, *self.notes))

    def headline(self) -> str:
        """The key facts of a run, whatever it found: how many gradients, how many of them are
        healthy (and what the others are), and the range of their norms, by name (a span of
        many orders of magnitude is the first thing to look at).

        Example:
            >>> rec = lambda n, norm, s: ParamRecord(n, "", (1,), "float32", True, norm, norm, s)
            >>> r = GradReport(1.0, "", (rec("a", 0.5, "healthy"), rec("b", None, "none")),
            ...                {}, Thresholds(), "cpu", 0.01)
            >>> r.headline()
            '2 parameters: 1 healthy, 1 no gradient (None); ‖g‖ 0.5 (a)'
        """
        params = self.params
        if not params:
            return "no parameters"
        normed = [p for p in params if p.norm is not None and math.isfinite(p.norm)]
        span = _span(normed)
        if all(p.status == "healthy" for p in params):
            if len(params) == 1:
                return f"its gradient is healthy: {span}"
            return f"all {len(params)} gradients healthy, {span}"
        counts = collections.Counter(p.status for p in params)  # most severe first, in words
        found = ", ".join(f"{counts[s]} {STYLES[s].label}" for s in SEVERITY if counts.get(s))
        head = f"{len(params)} parameters: {found}" if len(params) > 1 else f"1 parameter: {found}"
        return f"{head}; {span}" if span else head


def _span(normed: list[ParamRecord]) -> str:
    """‖g‖ from the smallest to the largest of these norms, by name ("" for none)."""
    if not normed:
        return ""
    lo = min(normed, key=lambda p: p.norm or 0.0)
    hi = max(normed, key=lambda p: p.norm or 0.0)
    if lo is hi:
        return f"‖g‖ {format_norm(hi.norm)} ({hi.name})"
    return f"‖g‖ from {format_norm(lo.norm)} ({lo.name}) to {format_norm(hi.norm)} ({hi.name})"
