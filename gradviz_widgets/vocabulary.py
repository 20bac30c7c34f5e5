"""The one vocabulary of gradient health: statuses, thresholds, styles and number text.

No torch here (numpy only, for the classifier on arrays): the data and presentation side (graph, report, render, chart, export, readout)
builds on this module, so a saved report can be re-rendered without torch. Every place that
shows a status (DOT nodes and edges, the chart, the static page, the legend, tooltips and the
watch view) takes its colour, dash, pattern and words from `STYLES`, and every place that shows
a norm takes its text from `format_norm`: a node's label and its tooltip always agree.
"""

from __future__ import annotations

import dataclasses
import html
import math
import numbers
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .errors import GradExplorerError

# The status rules, in one place: the statuses, their orders of severity, their words
# (STYLES) and the classifier of a norm (classify / classify_codes). Everything else (the
# watch's history and anomalies, the pages and the JS, which gets them in its data) derives
# from these; tests/test_status_rules.py checks that no other module keeps a copy.

#: every status, in the order of their codes (watch/ stores indices into this tuple: the
#: SQLite `status` column and the JSON exports keep these names and codes)
STATUSES = ("none", "zero", "vanishing", "healthy", "exploding", "nonfinite")
#: most severe first, in one graph: the status of several things shown as one (merged edges,
#: ×N groups); None is the absence of flow there and ranks last
SEVERITY = ("nonfinite", "exploding", "zero", "vanishing", "healthy", "none")
#: most severe first among the parameters a folded module or ×N group holds: one that gets no
#: gradient (frozen, unused) is said on the box over healthy ones (a frozen weight beside a
#: trainable bias read as a healthy box), and never hides a worse one (LoRA's frozen bases)
PARAM_SEVERITY = ("nonfinite", "exploding", "zero", "vanishing", "none", "healthy")
#: most severe first over a training run (GradWatch's buckets of steps, its anomalies): a None
#: is an event there (a parameter stopped getting a gradient) and ranks above vanishing
SEVERITY_OVER_TIME = ("nonfinite", "exploding", "zero", "none", "vanishing", "healthy")
#: the statuses that are anomalies of a run, most alarming first (all but healthy)
ALARMS = tuple(s for s in SEVERITY_OVER_TIME if s != "healthy")
#: what leaves a folded module along several edges: one healthy path makes the flow healthy
FLOW_STRENGTH = ("nonfinite", "exploding", "healthy", "vanishing", "zero")
#: statuses whose norm has no place on a log scale: drawn in their own colour
OFF_SCALE = ("none", "zero", "nonfinite")
#: the order of legend entries
LEGEND_ORDER = ("healthy", "vanishing", "exploding", "nonfinite", "zero", "none")


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Where "vanishing" and "exploding" start, as L2 norms of one gradient tensor.

    Defaults follow the usual rule of thumb (norms around 1e-8 stop a layer from learning;
    norms in the thousands make steps that overshoot). Set your own:

    Example:
        >>> Thresholds(vanishing=1e-6).exploding
        10000.0
    """

    vanishing: float = 1e-7
    exploding: float = 1e4

    def __post_init__(self) -> None:
        for name in ("vanishing", "exploding"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
                raise GradExplorerError(
                    f"Thresholds({name}=...) must be a number, got {type(value).__name__} {value!r}"
                )
        if not (0 <= self.vanishing < self.exploding):
            raise GradExplorerError(
                f"thresholds must satisfy 0 <= vanishing < exploding, got "
                f"vanishing={self.vanishing}, exploding={self.exploding}"
            )

    def lines(self) -> dict[str, float]:
        """The thresholds a chart draws: a check turned off (vanishing=0, exploding=inf) has
        no line, and no place on a log axis.

        Example:
            >>> Thresholds(vanishing=0.0).lines()
            {'exploding': 10000.0}
        """
        both = {"vanishing": self.vanishing, "exploding": self.exploding}
        return {k: v for k, v in both.items() if 0 < v < math.inf}


def _rules(norm: Any, max_abs: Any, th: Thresholds, nonfinite: Any) -> tuple[tuple[str, Any], ...]:
    """The classifier's tests, first match wins (then "healthy"), on floats or arrays alike
    (`nonfinite` tells NaN/Inf for either). A NaN `max_abs` is unknown (FSDP2 shards; None
    for one value), not a NaN gradient."""
    return (
        ("nonfinite", nonfinite(norm, max_abs)),
        ("zero", max_abs == 0.0),
        ("vanishing", norm < th.vanishing),
        ("exploding", norm > th.exploding),
    )


def _nonfinite(norm: float, max_abs: float) -> bool:
    return not math.isfinite(norm) or math.isinf(max_abs)


def _nonfinite_array(norm: np.ndarray, max_abs: np.ndarray) -> np.ndarray:
    out: np.ndarray = ~np.isfinite(norm) | np.isinf(max_abs)
    return out


def classify(norm: float | None, max_abs: float | None, thresholds: Thresholds) -> str:
    """One of STATUSES for a gradient with this L2 norm and largest absolute element.

    Example:
        >>> classify(0.0, 0.0, Thresholds()), classify(None, None, Thresholds())
        ('zero', 'none')
        >>> classify(1e-9, 1e-9, Thresholds()), classify(float("nan"), None, Thresholds())
        ('vanishing', 'nonfinite')
    """
    if norm is None:
        return "none"
    known = math.nan if max_abs is None else float(max_abs)
    hits = _rules(float(norm), known, thresholds, _nonfinite)
    return next((s for s, hit in hits if hit), "healthy")


def classify_codes(norm: np.ndarray, max_abs: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """`classify` on arrays of norms and largest elements: codes (indices into STATUSES).

    Example:
        >>> [STATUSES[i] for i in classify_codes(np.array([np.nan, 0.0, 1e-9, 1e5, 1.0]),
        ...                                       np.array([1.0, 0.0, 1e-9, 1e4, 0.5]), Thresholds())]
        ['nonfinite', 'zero', 'vanishing', 'exploding', 'healthy']
    """
    out = np.full(np.shape(norm), STATUSES.index("healthy"), dtype=np.uint8)
    with np.errstate(invalid="ignore"):
        for status, hit in reversed(_rules(norm, max_abs, thresholds, _nonfinite_array)):
            out[hit] = STATUSES.index(status)  # earlier rules win: written last
    return out


#: STATUSES as an array, indexed by codes in one step; the code of "none"
_STATUS_NAMES = np.array(STATUSES, dtype=object)
_NONE_CODE = STATUSES.index("none")


def classify_lists(
    norms: Sequence[float | None], maxes: Sequence[float | None], thresholds: Thresholds
) -> list[str]:
    """`classify(norms[i], maxes[i])` for every i, by `classify_codes` (None reads as NaN there,
    so a None norm is set to "none" afterwards).

    Example:
        >>> classify_lists([None, 0.0, 1.0, float("nan")], [None, 0.0, None, None], Thresholds())
        ['none', 'zero', 'healthy', 'nonfinite']
    """
    if not norms:
        return []
    values = np.array(norms, dtype=np.float64)
    codes = classify_codes(values, np.array(maxes, dtype=np.float64), thresholds)
    for i in np.flatnonzero(np.isnan(values)).tolist():  # None or a NaN norm: only these
        if norms[i] is None:
            codes[i] = _NONE_CODE
    names: list[str] = _STATUS_NAMES[codes].tolist()
    return names


def worst(statuses: Iterable[str]) -> str:
    """The most severe of `statuses` ("none" when there are none).

    Example:
        >>> worst(["healthy", "zero", "vanishing"]), worst([])
        ('zero', 'none')
    """
    return _first_of(SEVERITY, statuses, None) or "none"


def alarm_rank(*statuses: str | None) -> int:
    """How alarming the worst of `statuses` is, as a number the page can compare without
    knowing the statuses (the first view opens on the worst: js/pan_zoom.js): NaN/Inf highest,
    then exploding, zero, None, vanishing; healthy and unknown 0.

    Example:
        >>> alarm_rank("healthy", "none"), alarm_rank("nonfinite"), alarm_rank(None)
        (2, 5, 0)
    """
    return max((len(ALARMS) - ALARMS.index(s) for s in statuses if s in ALARMS), default=0)


def worst_param(statuses: Iterable[str]) -> str:
    """The status a folded module's parameters show together (PARAM_SEVERITY).

    Example:
        >>> worst_param(["healthy", "none"]), worst_param(["none", "vanishing"])
        ('none', 'vanishing')
    """
    return _first_of(PARAM_SEVERITY, statuses, None) or "none"


def strongest_flow(statuses: Iterable[str]) -> str | None:
    """What several gradients leaving one place add up to (FLOW_STRENGTH), None if none.

    Example:
        >>> strongest_flow(["zero", "healthy"]), strongest_flow([])
        ('healthy', None)
    """
    return _first_of(FLOW_STRENGTH, statuses, None)


def _first_of(order: Sequence[str], statuses: Iterable[str], default: str | None) -> str | None:
    found = set(statuses)
    return next((s for s in order if s in found), default)


def combine_norms(norms: Sequence[float | None]) -> float | None:
    """The L2 norm of several tensors taken together, from their norms (None if all are None).

    Example:
        >>> combine_norms([3.0, None, 4.0])
        5.0
    """
    present = [n for n in norms if n is not None]
    if not present:
        return None
    if len(present) == 1:  # what the general case gives for one (n * sqrt(1.0) is n exactly)
        return math.nan if math.isnan(present[0]) else present[0]
    if any(map(math.isnan, present)):
        return math.nan
    top = max(present)
    if top == 0.0 or math.isinf(top):
        return top
    # scaled by the largest, so norms of 1e-200 do not square to 0.0
    return top * math.sqrt(math.fsum([(n / top) ** 2 for n in present]))


@dataclasses.dataclass(frozen=True)
class StatusStyle:
    """How one status looks everywhere: Okabe-Ito colours, and each status also differs by
    line style and pattern, so the states stay distinct without colour vision.

    `dash` is a Graphviz style list, `svg_dash` the SVG stroke attributes of the static
    page's bars, `pattern` the Plotly bar pattern; `label` is the short legend text and
    `words` the phrase read out by screen readers, `short` the text of a change badge.
    """

    status: str
    fill: str
    line: str
    dash: str
    pattern: str
    label: str
    words: str
    svg_dash: str = ""
    short: str = ""

    def __post_init__(self) -> None:
        if not self.short:
            object.__setattr__(self, "short", self.status)

    def as_tuple(self) -> tuple[str, str, str, str]:
        """(fill, line, dash, label): the shape of the old `render.STATUS_STYLE` values."""
        return (self.fill, self.line, self.dash, self.label)


STYLES: dict[str, StatusStyle] = {
    s.status: s
    for s in (
        StatusStyle("healthy", "#d5f0e6", "#009e73", "solid", "", "healthy", "healthy"),
        StatusStyle(
            "vanishing", "#d6e9f8", "#0072b2", "dashed", "/", "vanishing", "vanishing gradient"
        ),
        StatusStyle(
            "exploding", "#fbe5c8", "#e69f00", "bold", "\\", "exploding", "exploding gradient"
        ),
        StatusStyle(
            "nonfinite",
            "#f6cdb8",
            "#d55e00",
            "bold,dashed",
            "+",
            "NaN / Inf",
            "NaN or Inf gradient",
            ' stroke-dasharray="6 2" stroke-width="2"',
            "NaN/Inf",
        ),
        StatusStyle(
            "zero",
            "#e6e6e6",
            "#000000",
            "dotted",
            "x",
            "exactly 0.0",
            "gradient exactly zero",
            ' stroke-dasharray="1 2"',
            "0.0",
        ),
        StatusStyle(
            "none",
            "#ffffff",
            "#9a9a9a",
            "dashed",
            ".",
            "no gradient (None)",
            "no gradient",
            ' stroke-dasharray="3 2"',
            "None",
        ),
    )
}

#: the graph's status of a node or edge whose flow its run did not measure (a run that measured
#: one view's: `GradExplorer.run(view=)`; `track_flow=False`): not a gradient's status, so not
#: in STATUSES (nothing over time has it), and never "none", which says no gradient flowed
UNMEASURED = "unmeasured"
UNMEASURED_STYLE = StatusStyle(
    UNMEASURED,
    "#ffffff",
    "#9e9e9e",
    "dotted",
    "?",
    "not measured",
    "not measured in this run",
    ' stroke-dasharray="1 3"',
    "?",
)

#: ghosts (graph/ghosts.py: parameters the gradient never reached) are grey and dashed
GHOST_STYLE = {"style": "dashed,rounded", "color": "#9a9a9a", "fontcolor": "#7a7a7a"}
#: the outline of the selected node
SELECTED_COLOR = "#cc79a7"


def style(status: str) -> StatusStyle:
    """The style of `status` (UNMEASURED's too); unknown statuses look like "none".

    Example:
        >>> style("vanishing").line, style("bogus").status, style(UNMEASURED).label
        ('#0072b2', 'none', 'not measured')
    """
    if status == UNMEASURED:
        return UNMEASURED_STYLE
    return STYLES.get(status, STYLES["none"])


def legend() -> list[dict[str, Any]]:
    """One entry per status for a legend: status, label, colour, fill, dash.

    Example:
        >>> legend()[0]["status"], legend()[3]["label"]
        ('healthy', 'NaN / Inf')
    """
    return [
        {"status": s.status, "label": s.label, "color": s.line, "fill": s.fill, "dash": s.dash}
        for s in (STYLES[k] for k in LEGEND_ORDER)
    ]


def format_norm(x: float | None) -> str:
    """Compact text for a norm: 0.0, 1.2e-23, 0.279, NaN, Inf, None. The one formatter of
    norms and losses: node labels, tooltips, the hook readout, chart text, the status and loss
    lines and the static page use it (a loss of -inf reads "-Inf" everywhere).

    Example:
        >>> format_norm(1.234e-23), format_norm(0.27901), format_norm(None)
        ('1.23e-23', '0.279', 'None')
        >>> format_norm(1234.5), format_norm(1.5e-07)
        ('1234', '1.5e-07')
    """
    if x is None:
        return "None"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    if x == 0:
        return "0.0"
    if 1e-3 <= abs(x) < 1e4:
        return f"{x:.4g}"
    return f"{x:.3g}"


def norm_text(norm: float | None, status: str) -> str:
    """The norm as a node shows it: a gradient whose elements are all exactly 0 reads "0.0".

    Example:
        >>> norm_text(1234.5, "healthy"), norm_text(1e-30, "zero")
        ('1234', '0.0')
    """
    return "0.0" if status == "zero" else format_norm(norm)


# Text from the user's model (module, parameter, class, output-key and loss names) is data:
# control characters become visible Unicode "control pictures", bidi overrides a visible
# [U+XXXX] tag, lone surrogates U+FFFD. Nothing here adds markup.
_PICTURES: dict[int, int | str] = {c: 0x2400 + c for c in range(0x20)}
_PICTURES |= {0x7F: 0x2421}
_PICTURES |= {c: 0xFFFD for c in range(0x80, 0xA0)}
_PICTURES |= {
    c: f"[U+{c:04X}]"
    for c in (
        0x061C,
        0x200E,
        0x200F,
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}
_SURROGATE = re.compile("[\ud800-\udfff]")


def named_few(names: Sequence[str], shown: int) -> str:
    """The first `shown` names, and how many more there are.

    Example:
        >>> named_few(["a", "b"], 3), named_few(list("abcde"), 3)
        ('a, b', 'a, b, c and 2 more')
    """
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def plain_text(text: object) -> str:
    """`text` with control, bidi-override and surrogate characters made visible; safe to show.

    Example:
        >>> plain_text("a\\nb\\x1b")
        'a␊b␛'
    """
    return _SURROGATE.sub("\ufffd", str(text).translate(_PICTURES))


def html_text(text: object) -> str:
    """`text` escaped for HTML (and Plotly's pseudo-HTML): never markup.

    Example:
        >>> html_text("<b>x</b>")
        '&lt;b&gt;x&lt;/b&gt;'
    """
    return html.escape(plain_text(text), quote=True)
