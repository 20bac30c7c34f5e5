"""The explorer widget's plumbing that needs no widgets: one guard around every callback,
settings snapshots to undo a change whose re-run failed, and the text the widget shows.

Every string built here from user text (module, parameter, class, output-key and loss names,
error messages) is escaped for HTML: it is data, never markup.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .. import ids
from ..errors import GradExplorerError
from ..graph.grad_graph import GradGraph
from ..graph.nodes import GradNode
from ..graph.nodes import drawn_count as count_drawn
from ..render.hook_marks import plan_text
from ..vocabulary import Thresholds, format_norm, html_text, plain_text

#: the status line, as parts get it: `status(text, level)` (level: info, busy, warning, error)
Status = Callable[[str, str], None]


class Fail(Protocol):
    """The status line's error form: shows `message`, keeps it (and `exc`) as the last error;
    `run_failed`: a run failed, so what is drawn is the last good run's (the loss line says so)."""

    def __call__(
        self, message: str, exc: BaseException | None = None, run_failed: bool = False
    ) -> None: ...


def error_text(e: BaseException) -> str:
    """What the status line says about `e`: our own errors as written, others with their type.

    Example:
        >>> error_text(ValueError("bad shape"))
        'ValueError: bad shape'
    """
    if isinstance(e, GradExplorerError):
        return str(e)
    return f"{type(e).__name__}: {e}"


class ActionGuard:
    """Runs widget callbacks one at a time; any exception goes to `on_error` (the busy state
    ends, the last good view stays). A callback arriving while another one runs (a trait
    observer fired by the running one, say) is queued and runs afterwards, in order.

    Example:
        >>> seen = []
        >>> guard = ActionGuard(lambda e: seen.append(error_text(e)))
        >>> guard.call(int, "x")
        >>> seen
        ["ValueError: invalid literal for int() with base 10: 'x'"]
    """

    def __init__(
        self,
        on_error: Callable[[BaseException], Any],
        on_queued: Callable[[int], Any] | None = None,
    ) -> None:
        self.on_error = on_error
        self.on_queued = on_queued
        self.busy = False
        self.queue: collections.deque[tuple[Callable, tuple]] = collections.deque()

    def wrap(self, fn: Callable) -> Callable:
        """`fn` as a guarded callback (for on_click / observe / message handlers)."""
        return lambda *args: self.call(fn, *args)

    def call(self, fn: Callable, *args: Any) -> None:
        if self.busy:
            self.queue.append((fn, args))
            if self.on_queued is not None:
                self.on_queued(len(self.queue))
            return
        self._run(fn, args)
        while self.queue:
            queued_fn, queued_args = self.queue.popleft()
            self._run(queued_fn, queued_args)

    def _run(self, fn: Callable, args: tuple) -> None:
        self.busy = True
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - any failure must reach the status line
            try:
                self.on_error(e)
            except Exception:  # noqa: BLE001 - reporting must never leave us busy
                pass
        finally:
            self.busy = False


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a re-run depends on that the widget changes: hooks, modifiers, device, thresholds."""

    hooks: tuple[tuple[str, str], ...]
    modifiers: tuple[tuple[str, Any], ...]
    device: str | None
    thresholds: Thresholds

    @classmethod
    def of(cls, explorer: Any) -> Settings:
        # the Modifier objects themselves (kind, value): descriptions cannot be replayed
        mods = explorer.modifier_objects
        return cls(tuple(explorer.hooks), tuple(mods.items()), explorer.device, explorer.thresholds)

    def restore(self, explorer: Any) -> None:
        """Put the explorer back to these settings (hooks, modifiers, device, thresholds)."""
        now = Settings.of(explorer)
        for target, kind in now.hooks:
            if (target, kind) not in self.hooks:
                explorer.set_hook(target, kind, on=False)
        for target, kind in self.hooks:
            if (target, kind) not in now.hooks:
                explorer.set_hook(target, kind, on=True)
        before = dict(self.modifiers)
        for target, modifier in now.modifiers:
            if before.get(target) != modifier:
                explorer.set_modifier(target)
        for target, modifier in self.modifiers:
            if dict(now.modifiers).get(target) != modifier:
                explorer.set_modifier(target, **{modifier.kind: modifier.value})
        explorer.device = self.device
        explorer.thresholds = self.thresholds


def device_in_force(explorer: Any) -> str:
    """The device the explorer's runs go to: the one chosen, else where the model lives."""
    return str(explorer.device or explorer.model_device)


def status_line(
    report: Any, hooks: Sequence[tuple[str, str]] = (), modifiers: Mapping[str, str] | None = None
) -> str:
    """The widget's status line after a run: the run's headline first (`report.headline()`: a
    note or a long finding never pushes it out of the one-line status), its duration, the
    hooks and modifiers on, then the findings (most severe first) and the run's notes.

    Example:
        >>> from gradviz_widgets.report.grad_report import GradReport, ParamRecord
        >>> rec = ParamRecord("w", "", (1,), "float32", True, 2.0, 2.0, "healthy")
        >>> r = GradReport(1.0, "", (rec,), {}, Thresholds(), "cpu", 0.012, findings=("a note",))
        >>> status_line(r, [("fc", "backward")])
        'its gradient is healthy: ‖g‖ 2 (w); ran in 12 ms; hooks on: backward at fc; a note'
    """
    parts = [report.headline(), f"ran in {report.duration_s * 1000:.0f} ms"]
    if hooks or modifiers:
        parts.append(plan_text(list(hooks), dict(modifiers or {})))
    return "; ".join((*parts, *report.findings, *report.notes))


def explain_click(node: GradNode) -> tuple[str, str] | None:
    """(status text, level) for a click on a node that hooks nothing: a ghost (a parameter the
    gradient never reached) or a ×N group of identical blocks; None for every other node."""
    if node.kind == "ghost":
        return (
            f"{' · '.join(plain_text(x) for x in node.label.split(chr(10)) if x)}: no gradient "
            "reaches it (the cut is shown on the "
            "node); nothing to hook",
            "warning",
        )
    if node.kind == "module" and ids.is_group_id(node.id):  # not a module *named* "group:…"
        # the label's lines joined in words: its line break is no ␊ in the status line
        label = " · ".join(plain_text(line) for line in node.label.split("\n") if line)
        return (
            f"{label}: identical blocks folded together; double-click to "
            "unfold them (double-click the frame around them folds them back), then click one to hook it",
            "info",
        )
    return None


def module_of(node: GradNode) -> str | None:
    """The module a click on `node` hooks (None for the loss, inputs and the output)."""
    if node.module == ids.LOSS_SCOPE or node.kind in ("output", "input"):
        return None
    return node.module


def drawn_count(graph: GradGraph) -> int:
    """Nodes the graph draws (AccumulateGrad nodes are merged into their parameters)."""
    return count_drawn(graph.nodes)


def loss_line_html(
    report: Any,
    drawn: int,
    total: int,
    depth: int | None,
    *,
    auto: bool = False,
    leaves: bool = False,
    by_hand: tuple[int, int] = (0, 0),
    stale: bool = False,
) -> str:
    """The toolbar's loss line: one row (ellipsis, full text on hover), user text escaped. It
    says how the view was folded, so that choosing it by hand gives the same view: the depth,
    and for the `auto` fold whether leaf modules were folded into boxes too (`leaves`), and
    how many modules were unfolded / folded by hand (`by_hand`). `stale`: the newest run
    failed, and graph and chart are the last good run's.

    Example:
        >>> from types import SimpleNamespace as R
        >>> r = R(loss=2.0, loss_description="sum of output", device="cpu")
        >>> "the newest run failed" in loss_line_html(r, 3, 3, None, stale=True)
        True
    """
    text = (
        f"loss {format_norm(report.loss)} = {report.loss_description} · {report.device} · "
        f"{drawn} of {total} nodes shown" + fold_text(depth, auto, leaves, by_hand)
    )
    rest = text[len("loss ") :]
    warn = STALE_TEXT if stale else ""
    # width 0 + min-width 100%: a long line ends in an ellipsis instead of widening the widget
    return (
        f'<div class="gv-loss-line{" gv-stale" if stale else ""}" style="white-space:nowrap;'
        "overflow:hidden;text-overflow:ellipsis;width:0;min-width:100%"
        f'{";color:#b00020" if stale else ""}" title="{html_text(warn + text)}">'
        f"{html_text(warn)}<b>loss</b> {html_text(rest)}</div>"
    )


#: the loss line's lead while graph and chart show the last good run (the newest one failed)
STALE_TEXT = "the newest run failed; showing the last good run: "


def fold_text(
    depth: int | None, auto: bool = False, leaves: bool = False, by_hand: tuple[int, int] = (0, 0)
) -> str:
    """How the view is folded, for the loss line ("" when nothing is); `by_hand`: how many
    modules or groups were unfolded and folded by double-click since (the view is no longer
    that depth's alone).

    Example:
        >>> fold_text(3), fold_text(3, auto=True, leaves=True), fold_text(None, True, True)
        (' (folded at depth 3)', ' (auto: folded at depth 3, leaf modules as boxes)', \
' (auto: leaf modules as boxes)')
        >>> fold_text(0, True, by_hand=(1, 0))
        ' (auto: folded at depth 0, 1 unfolded by hand)'
    """
    opened, closed = by_hand
    parts = (
        ([f"folded at depth {depth}"] if depth is not None else [])
        + (["leaf modules as boxes"] if leaves else [])
        + ([f"{opened} unfolded by hand"] if opened else [])
        + ([f"{closed} folded by hand"] if closed else [])
    )
    if not parts:
        return ""
    return f" ({'auto: ' if auto else ''}{', '.join(parts)})"


def find_node(node_id: str, *graphs: GradGraph | None) -> GradNode | None:
    """The node `node_id` from the first of `graphs` holding it."""
    for graph in graphs:
        if graph is not None and node_id in graph:
            return graph.node(node_id)
    return None


def node_showing(view: GradGraph | None, node_id: str) -> str | None:
    """The node of `view` that shows `node_id`: itself, or the folded module holding it."""
    if view is None:
        return None
    if node_id in view:
        return node_id
    return next((n.id for n in view.nodes if node_id in n.members), None)


def node_showing_module(view: GradGraph | None, module: str) -> str | None:
    """The first node of `view` belonging to `module`."""
    if view is None:
        return None
    return next((n.id for n in view.nodes if n.module == module), None)


def ranks_html(report: Any, limit: int = 8) -> str:
    """The ranks line for a distributed run (`report.ranks`): parameters without a gradient on
    some ranks, and parameters whose status differs across ranks; "" when all agree or there
    are no ranks. User text is escaped.

    Example:
        >>> class R: ranks = {0: {"w": ("healthy", None, 1.0)}, 1: {"w": ("none", "unused", None)}}
        >>> ranks_html(R())
        '<div class="gv-ranks"><b>ranks</b> 2 ranks; no gradient on some ranks: w (rank 1)</div>'
    """
    table = getattr(report, "ranks", None) or {}
    ranks = sorted(table)
    if len(ranks) < 2:
        return ""
    missing, differ = [], []
    for name in dict.fromkeys(n for r in ranks for n in table[r]):
        statuses = {r: (table[r].get(name) or ("absent",))[0] for r in ranks}
        without = [r for r in ranks if statuses[r] in ("none", "absent")]
        if without and len(without) < len(ranks):
            label = "rank" if len(without) == 1 else "ranks"
            missing.append(f"{name} ({label} {', '.join(map(str, without))})")
        elif len(set(statuses.values())) > 1:
            differ.append(name)
    if not (missing or differ):
        return ""
    parts = [f"{len(ranks)} ranks"]
    if missing:
        more = f", … {len(missing) - limit} more" if len(missing) > limit else ""
        parts.append("no gradient on some ranks: " + ", ".join(missing[:limit]) + more)
    if differ:
        parts.append("status differs across ranks: " + ", ".join(differ[:limit]))
    return f'<div class="gv-ranks"><b>ranks</b> {html_text("; ".join(parts))}</div>'


def quiet_reason(hooks: Sequence[tuple[str, str]], graph: Any, report: Any, target: str) -> str:
    """Why the hooks on `target` (a module path or a node id) saw nothing in the newest run.

    Example:
        >>> from types import SimpleNamespace as R
        >>> g = R(nodes=[R(module="fc", id="fc/AddmmBackward0#0")])
        >>> quiet_reason([], g, R(none_reasons={}), "fc")
        'its hook is off'
        >>> quiet_reason([("conv", "backward")], g, R(none_reasons={"conv.weight": "frozen"}), "conv")
        'no gradient flowed through it: its parameters get none (frozen), and nothing before it needs one'
    """
    if not any(t == target for t, _ in hooks):
        return "its hook is off"
    inside = f"{target}."
    if any(
        n.module == target or n.module.startswith(inside) or n.id == target for n in graph.nodes
    ):
        return "the module's hook did not fire in the newest run"
    reasons = {
        r for name, r in report.none_reasons.items() if name.startswith(inside) or not target
    }
    if reasons:
        return (
            f"no gradient flowed through it: its parameters get none ({'; '.join(sorted(reasons))}), "
            "and nothing before it needs one"
        )
    return "no gradient flowed through it, or it did not run"
