"""One self-contained HTML page of a GradWatch history: works offline over file://.

The page shows the live view's two charts without Plotly or a kernel: a heat map of parameters
x buckets of steps (canvas; each bucket keeps its smallest and largest norm and its most
alarming status, history.py's min/max rule), a log-scale line chart of a few parameters (the
most alarming first; pick others in the list or by clicking a heat-map row), the vanishing and
exploding lines, and the anomalies (first step each parameter turned NaN/Inf, zero, None,
exploding or vanishing); steps a GradScaler skipped (Inf/NaN refused, no update) are hatched
columns, named on hover and counted in the summary. Numbers are formatted here; the page's
script and stylesheet (js/watch_page.js, js/watch_page.css, built into static/) only draw. No
request leaves the page.

Example:
    >>> import tempfile, torch
    >>> from torch import nn
    >>> from gradviz_widgets.watch import GradWatch
    >>> net = nn.Linear(3, 2)
    >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> watch = GradWatch(net, optimizer=opt)
    >>> for _ in range(3):
    ...     opt.zero_grad(); net(torch.randn(4, 3)).sum().backward(); opt.step()
    >>> out = export_watch_html(watch, Path(tempfile.mkdtemp()) / "run.html")
    >>> out.stat().st_size < 100_000, "bias" in out.read_text(encoding="utf-8")
    (True, True)
    >>> watch.close()
"""

from __future__ import annotations

import contextlib
import functools
import html
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..frontend import script_json, script_text, static_text
from ..vocabulary import OFF_SCALE, SELECTED_COLOR, STATUSES, STYLES, format_norm, plain_text
from .anomalies import SPIKE
from .events import NONE_WORDS, none_why
from .figures import NONFINITE_MARK, WATCH_KIND_LOOKS, default_selection, module_order
from .history import EMPTY, Overview
from .page_data import merge_buckets, view_data
from .store import DB_NAME, ParamInfo

#: what the page calls a step the GradScaler skipped, and what that means
SKIPPED_LABEL = "skipped by GradScaler"
SKIPPED_TEXT = "Inf/NaN gradients not applied, no update"
#: a skipped column is hatched; its NaN/Inf cells are drawn in the fill, not as applied NaN/Inf
SKIPPED_STYLE = ("#e4e4e4", "#4d4d4d")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: step columns of the heat map: a 1,000-parameter page stays near 1-2 MB
MAX_STEPS = 400


def export_watch_html(
    source: Any,
    path: str | os.PathLike[str],
    *,
    max_steps: int = MAX_STEPS,
    title: str | None = None,
) -> Path:
    """Write the page of `source` (a GradWatch, what GradWatch.open returns, or the folder /
    watch.sqlite file of a record) to `path`; at most `max_steps` step columns. Returns the path."""
    out = Path(path)
    text = watch_page_html(source, max_steps=max_steps, title=title)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def watch_page_html(source: Any, *, max_steps: int = MAX_STEPS, title: str | None = None) -> str:
    """The page as text (see export_watch_html)."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    with _opened(source) as run:
        data = page_data(run, max_steps=max_steps)
    data["title"] = title or f"GradWatch: {data['name']}"
    return _TEMPLATE.format(
        title=html.escape(_CONTROL.sub(" ", data["title"])),
        style=static_text("watch_page.css"),
        data=script_json(data),
        script=script_text(static_text("watch_page.js")),
    )


@contextlib.contextmanager
def _opened(source: Any) -> Any:
    """A run object for a path (closed afterwards), or the object itself."""
    if isinstance(source, (str, os.PathLike)):
        from .watch import GradWatch

        folder = Path(source)
        if folder.name == DB_NAME and folder.is_file():
            folder = folder.parent
        run = GradWatch.open(folder)
        try:
            yield run
        finally:
            run.close()
    else:
        yield source


def page_data(run: Any, *, max_steps: int = MAX_STEPS) -> dict[str, Any]:
    """Everything the page draws, as JSON-ready data (numbers already formatted)."""
    anomalies = list(run.anomalies)  # on a live GradWatch this waits for the queued steps
    spikes = list(getattr(run, "spikes", None) or [])
    said = functools.partial(_detail, sentences={int(s.step): s.sentence for s in spikes})
    ranks, apart = _alike_ranks(run, _rank_overviews(run, max_steps))
    params, overview = (list(run.params), ranks[0][1]) if ranks else _snapshot(run, max_steps)
    order = module_order(params)
    index = {params[i].name: row for row, i in enumerate(order)}
    views = (
        [
            view_data(merge_buckets(ov, max_steps), order, f"rank {r}", skipped_steps(run, r))
            for r, ov in ranks
        ]
        if ranks
        else [view_data(merge_buckets(overview, max_steps), order, "", skipped_steps(run))]
    )
    th = run.thresholds
    return {
        # the run's name (`exp1/run-...`), never an absolute path: the page is shared
        "name": str(getattr(run, "name", None) or Path(getattr(run, "path", "")).name)
        + apart
        + _crashed(run),
        # shown as text, never markup; bidi overrides and controls made visible (a U+202E in
        # a name drew "layers.thgiew.live")
        "names": [plain_text(params[i].name) for i in order],
        "modules": [plain_text(params[i].module) for i in order],
        "shapes": [" x ".join(map(str, params[i].shape)) or "scalar" for i in order],
        "selected": [
            index[n] for n in default_selection(overview, params, anomalies=anomalies) if n in index
        ],
        # a check turned off (vanishing 0, exploding inf) draws no line: null
        "thresholds": [th.lines().get("vanishing"), th.lines().get("exploding")],
        "threshold_text": [format_norm(th.vanishing), format_norm(th.exploding)],
        "statuses": list(STATUSES),
        "plain": list(OFF_SCALE),  # drawn in their own colour, not on the norm scale
        "colors": {s: [STYLES[s].fill, STYLES[s].line] for s in STATUSES},
        "labels": {s: STYLES[s].label for s in STATUSES},
        "marks": {"nonfinite": NONFINITE_MARK},  # drawn on NaN/Inf cells, and in the legend
        # steps a GradScaler skipped: hatched columns (views[k]["skipped"] says which)
        "skipped_label": SKIPPED_LABEL,
        "skipped_text": SKIPPED_TEXT,
        "skipped_style": list(SKIPPED_STYLE),  # [fill of its NaN/Inf cells, hatch]
        "kinds": _kinds(anomalies),
        "anomalies": [[int(a.step), a.kind, _rows(a, index), said(a)] for a in anomalies],
        "views": views,
        # spike events: [step, end, rows of the first movers (first first), sentence]
        "spikes": _spikes(spikes, index),
        # why a row reads None: per row, [step, index into none_words] from that step on
        "none_why": none_why(getattr(run, "events", None) or [], [params[i].name for i in order]),
        "none_words": list(NONE_WORDS),
    }


def _crashed(run: Any) -> str:
    """What the title says of a run an uncaught exception ended ("" for any other)."""
    crashed = getattr(run, "crashed", "")
    return f" (ended by an uncaught {plain_text(crashed)})" if crashed else ""


def skipped_steps(run: Any, rank: Any = None) -> list[int]:
    """The steps the GradScaler skipped (Inf/NaN gradients refused, no update), from the
    record's `steps` table (steptable.py) of `rank` (default: the one the page draws first),
    as `run.step_rows` gives them (GradWatch, GradWatch.open's run, a store); [] for a run
    that keeps no such table."""
    rows_of = getattr(run, "step_rows", None)
    if not callable(rows_of):
        return []
    rows = rows_of() if rank is None else rows_of(rank)
    return sorted({int(r[0]) for r in rows if r[1]})


def _spikes(spikes: list[Any], index: dict[str, int]) -> list[list[Any]]:
    return [
        [int(s.step), int(s.end), [index[p] for p in s.params[:3] if p in index], s.sentence]
        for s in spikes  # every one: a long run's spikes after the 200th went unmarked
    ]


def _snapshot(run: Any, max_steps: int) -> tuple[list[ParamInfo], Overview]:
    """Parameters and overview; a live watch's are copied under its writer's lock."""
    writer = getattr(run, "_writer", None)
    if writer is None:
        params = list(run.params)
        try:
            overview = run.overview(n_buckets=max(max_steps, 2))
        except TypeError:  # an overview() without a size
            overview = run.overview()
        return params, overview
    with writer._lock:
        params = list(writer.params)
        live = run.overview()
        copy = Overview(live.n_buckets)
        copy.first, copy.width, copy.used = live.first, live.width, live.used
        for name in ("hi", "lo", "hi_step", "lo_step", "status"):
            setattr(copy, name, getattr(live, name).copy())
    return params, copy


def _kinds(anomalies: list[Any]) -> dict[str, list[str]]:
    """Colour and label of each anomaly kind (statuses, and others such as rank_divergence)."""
    out = {s: [STYLES[s].line, STYLES[s].label] for s in STATUSES}
    out.update({kind: list(look) for kind, look in WATCH_KIND_LOOKS.items()})
    for a in anomalies:
        out.setdefault(a.kind, [SELECTED_COLOR, a.kind.replace("_", " ")])
    return out


def _detail(anomaly: Any, sentences: dict[int, str]) -> str:
    """The anomaly's detail (a spike's: its event's sentence), after the ranks that hold it."""
    ranks = getattr(anomaly, "ranks", ())
    where = f"ranks {', '.join(map(str, ranks))}" if ranks else ""
    detail = getattr(anomaly, "detail", "") or ""
    if not detail and anomaly.kind == SPIKE:
        detail = sentences.get(int(anomaly.step), "")
    return " · ".join(t for t in (where, detail) if t)


def _rows(anomaly: Any, index: dict[str, int]) -> list[int]:
    """The rows an anomaly names: a spike's first mover first (its ranking), the others in
    the page's row order."""
    rows = [index[p] for p in anomaly.params if p in index]
    return rows if anomaly.kind == SPIKE else sorted(rows)


def _rank_overviews(run: Any, max_steps: int) -> list[tuple[Any, Overview]]:
    """One overview per rank when the run holds several (GradWatch.open of a torchrun record:
    `ranks` and `overview(rank=)`), else []."""
    ranks = getattr(run, "ranks", None)
    if not isinstance(ranks, (list, tuple)) or len(ranks) < 2:
        return []
    try:
        return [(r, run.overview(n_buckets=max(max_steps, 2), rank=r)) for r in ranks]
    except TypeError:  # an overview() without ranks: built from the history's rank column
        return _history_overviews(run, list(run.params), max_steps)


def _alike_ranks(
    run: Any, ranks: list[tuple[Any, Overview]]
) -> tuple[list[tuple[Any, Overview]], str]:
    """The ranks that watched the parameters of the first one (the page names every view's rows
    by them), and what the title says of the others: ranks that watched other models
    (pipeline stages) were drawn under the first rank's names."""
    stores = getattr(run, "stores", None)
    if not ranks or not isinstance(stores, dict):
        return ranks, ""
    names = [[p.name for p in stores[r].params] if r in stores else None for r, _ in ranks]
    keep = [k for k, n in enumerate(names) if n is None or n == names[0]]
    if len(keep) == len(ranks):
        return ranks, ""
    apart = [str(ranks[k][0]) for k in range(len(ranks)) if k not in keep]
    said = (
        f" · rank {', '.join(apart)} watched other parameters: not drawn here "
        "(GradWatch.open(<run>/rank<r>) draws one rank)"
    )
    return [ranks[k] for k in keep], said


def _history_overviews(
    run: Any, params: list[ParamInfo], max_steps: int
) -> list[tuple[Any, Overview]]:
    """Per rank, an overview of `run.history()` (min/max rule of history.Overview)."""
    frame = run.history()
    ids = {p.name: p.id for p in params}
    out = []
    for rank in sorted(frame["rank"].dropna().unique().tolist()):
        part = frame[frame["rank"] == rank]
        steps = np.unique(part["step"].to_numpy(dtype=np.int64))
        row = np.searchsorted(steps, part["step"].to_numpy(dtype=np.int64))
        col = np.array([ids[str(n)] for n in part["param"]], dtype=np.int64)
        norm = np.full((len(steps), len(params)), np.nan)
        # a (step, parameter) without a row is no record, never a made-up status
        status = np.full((len(steps), len(params)), EMPTY, dtype=np.uint8)
        norm[row, col] = part["norm"].to_numpy(dtype=np.float64)
        codes = [STATUSES.index(str(s)) for s in part["status"]]
        status[row, col] = np.array(codes, dtype=np.uint8)
        ov = Overview(max(max_steps, 2))
        ov.add_many(steps, norm, status)
        out.append((rank, ov))
    return out


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head><body>
<header><h1 id="title"></h1><div id="summary"></div><div id="legend"></div></header>
<main>
<section id="heat-section"><h2>Gradient norm per parameter and step
<label id="rank-box" hidden>· rank <select id="rank"></select></label></h2>
<div id="heat-wrap"><div id="heat-labels"></div>
<div id="heat-box"><canvas id="heat"></canvas><div id="heat-skips"></div></div></div>
<svg id="heat-axis" height="34"></svg>
<p class="hint">Each column is a bucket of steps; it shows the bucket's largest norm (its
smallest where it dipped below the vanishing line), so no spike or dip disappears.
Click a row to add it to the lines.</p></section>
<section id="lines-section"><h2>Norm over steps (log axis)</h2>
<div id="lines-legend"></div>
<div id="lines-row"><svg id="lines" height="340"></svg>
<label id="pick-box">parameters<select id="pick" multiple size="14"></select></label></div>
</section>
<section id="anomaly-section"><h2>Anomalies (each parameter's first step per kind; every spike)</h2>
<table id="anomalies"><thead><tr><th>step</th><th>kind</th><th>parameters</th><th>detail</th></tr></thead>
<tbody></tbody></table>
<p id="no-anomalies" class="hint" hidden>No anomalies in this record: no gradient turned
NaN/Inf, exactly 0.0, None, vanishing or exploding.</p></section>
</main>
<div id="tip" role="tooltip" hidden></div>
<noscript>This page needs JavaScript to draw its charts.</noscript>
<script type="application/json" id="watch-data">{data}</script>
<script type="module">{script}</script>
</body></html>
"""
