"""HTML for the hook readout panel: what the hooks on one target saw in the newest run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..vocabulary import STYLES, format_norm, html_text

if TYPE_CHECKING:  # torch-free at run time: the readout only reads their fields
    from ..hooks.events import HookEvent
    from ..stats.tensor import TensorStats


#: the class of the readout's one-line hint, shown until a module is chosen (the widget gives
#: the readout its fixed box only once it holds a module's readout)
HINT_CLASS = "gv-readout-hint"


def readout_html(
    events: Sequence[HookEvent],
    target: str | None,
    mechanisms: dict[str, str],
    quiet: str = "hook off, or the module was not reached",
) -> str:
    """A table per firing: each tensor's shape, norm, range, NaN/Inf counts and a histogram;
    `quiet`: why there is none, when the target's hooks did not fire.

    Example:
        >>> "no hook events" in readout_html([], "gate", {})
        True
    """
    if target is None:
        return (
            f'<div class="gv-readout {HINT_CLASS}">Click a node to hook its module and see its '
            "grad_input / grad_output here.</div>"
        )
    mine = [e for e in events if e.target == target]
    title = html_text(target or "(root)")
    if not mine:
        return (
            f'<div class="gv-readout"><b>{title}</b>: no hook events in the newest run '
            f"({html_text(quiet)}).</div>"
        )
    how = mechanisms.get(target)
    parts = [
        f'<div class="gv-readout"><b>{title}</b>'
        + (f" <i>({html_text(how)})</i>" if how else "")
        + '<table style="border-collapse:collapse;font-size:12px">'
        "<tr><th>hook</th><th>call</th><th>phase</th><th>tensor</th><th>shape</th>"
        "<th>‖·‖</th><th>min</th><th>max</th><th>mean</th><th>NaN</th><th>Inf</th>"
        "<th>histogram</th><th>ms</th></tr>"
    ]
    for e in mine[:40]:
        for name, stats in e.tensors.items():
            for i, s in enumerate(stats):
                parts.append(_row(e, f"{name}[{i}]", s))
    if len(mine) > 40:
        parts.append(f"<tr><td colspan=13>… {len(mine) - 40} more firings</td></tr>")
    parts.append("</table></div>")
    return "".join(parts)


def _row(e: HookEvent, name: str, s: TensorStats | None) -> str:
    head = (
        f"<td>{html_text(e.kind)}</td><td>{html_text(e.call)}</td><td>{html_text(e.phase)}</td>"
        f"<td>{html_text(name)}</td>"
    )
    if s is None:
        return f"<tr>{head}<td colspan=8><i>None (no gradient)</i></td><td>{e.seconds * 1e3:.2f}</td></tr>"
    bad = f' style="color:{STYLES["nonfinite"].line};font-weight:bold"' if s.nan or s.inf else ""
    return (
        f"<tr>{head}<td>{'×'.join(map(str, s.shape)) or 'scalar'}</td>"
        f"<td>{format_norm(s.norm)}</td><td>{format_norm(s.min)}</td>"
        f"<td>{format_norm(s.max)}</td><td>{format_norm(s.mean)}</td>"
        f"<td{bad}>{s.nan}</td><td{bad}>{s.inf}</td><td>{_hist_svg(s.histogram)}</td>"
        f"<td>{e.seconds * 1e3:.2f}</td></tr>"
    )


def _hist_svg(counts: Sequence[int], w: int = 64, h: int = 16) -> str:
    top = max(counts) if counts and max(counts) > 0 else 1
    bw = w / max(len(counts), 1)
    bars = "".join(
        f'<rect x="{i * bw:.1f}" y="{h - h * c / top:.1f}" width="{bw - 0.5:.1f}" '
        f'height="{h * c / top:.1f}" fill="{STYLES["vanishing"].line}"/>'
        for i, c in enumerate(counts)
        if c
    )
    return f'<svg width="{w}" height="{h}" role="img">{bars}</svg>'
