"""What the explorer widget's toolbar does, as two parts of ExplorerWidget: settings changes
that re-run (undone when the run fails, rejected inputs reverted) and downloads / exports."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import GradExplorerError
from ..hooks.modifiers import Modifier
from ..report.export import report_csv, report_json
from ..vocabulary import Thresholds
from .controller import ActionGuard, Fail, Settings, Status, device_in_force, error_text
from .controls import Toolbar
from .graph_pane import GraphPane
from .session import Session


class SettingsActions:
    """Hooks, modifiers, device and thresholds changed from the widget: change, re-run, and on
    failure put the settings back, say so and keep the last good view.

    Owns `acting`: True while one of its changes runs, so the widget lets the explorer's
    notices of that change pass (it draws the result itself when the change has ended).
    `ran()` is called after each change that ran.
    """

    def __init__(
        self,
        explorer: Session,
        toolbar: Toolbar,
        status: Status,
        fail: Fail,
        ran: Callable[[], Any],
        view: Callable[[], Mapping[str, Any] | None] = lambda: None,
    ) -> None:
        self._explorer = explorer
        self._toolbar = toolbar
        self._status = status
        self._fail = fail
        self._ran = ran
        self._view = view  # the view drawn now: a re-run measures the flow it draws
        self.acting = False

    def apply(
        self, change: Callable[[], Any] | None, what: str, run: bool = True, whole: bool = False
    ) -> bool:
        """Make `change` (to hooks, modifiers, device, thresholds) and re-run (`run=False`: the
        change runs itself) measuring the flow the view draws (`whole`: every edge); when
        either fails, put the settings back, say so, keep the last good view. True when it
        ran."""
        ex = self._explorer
        before = Settings.of(ex)
        busy = "measuring every edge for this view: " if whole else ""
        self._status(f"{busy}running forward + backward…", "busy")
        self.acting = True
        running = not run  # with run=False the change is the run
        try:
            if change is not None:
                change()
            running = run
            if run:  # shown on one rank: never a collective
                ex.run(ranks=False, view=None if whole else self._view())
        except Exception as e:  # noqa: BLE001 - any failure: undo and show it
            before.restore(ex)
            self._toolbar.show_settings(device_in_force(ex), ex.thresholds)
            undone = f" ({what} undone)" if what and change is not None else ""
            self._fail(f"{error_text(e)}{undone}", e, run_failed=running)
            return False
        finally:
            self.acting = False
        self._ran()
        return True

    def set_device(self, device: str) -> None:
        """Run on `device`; if that fails, the device in force stays (and the menu shows it)."""
        self.apply(
            lambda: self._explorer.run(device=device, ranks=False, view=self._view()),
            f"switch to {device}",
            run=False,
        )

    def set_thresholds(self) -> None:
        """Classify with the thresholds the toolbar shows (a rejected pair reverts)."""
        c, ex = self._toolbar, self._explorer
        try:
            new = Thresholds(c.vanishing_box.value, c.exploding_box.value)
        except GradExplorerError as e:
            c.show_settings(device_in_force(ex), ex.thresholds)  # reverts to the pair in force
            th = ex.thresholds
            self._fail(f"{e}; kept vanishing < {th.vanishing:g}, exploding > {th.exploding:g}", e)
            return
        self.apply(lambda: setattr(ex, "thresholds", new), "new thresholds")

    def clear_hooks(self) -> None:
        self.apply(self._explorer.clear_hooks, "clearing the hooks")

    def apply_modifier(self, target: str | None) -> None:
        """Put the toolbar's modifier on module `target` (a rejected value reverts)."""
        if target is None:
            self._fail("select a node first: the modifier goes on its module")
            return
        c = self._toolbar
        kind, value = c.modifier_box.value, c.modifier_value.value
        given = {} if kind == "none" else {kind: value}
        try:  # a rejected value reverts to the one in force before anything changes
            if given:
                Modifier(kind, value)
        except ValueError as e:
            c.set_quietly(c.modifier_value, c.modifier_in_force)
            self._fail(f"{e}; kept {c.modifier_in_force:g}", e)
            return
        if self.apply(
            lambda: self._explorer.set_modifier(target, **given),
            f"modifier at {target or '(root)'}",
        ):
            c.modifier_in_force = value


class ExportActions:
    """Toolbar downloads (the browser saves the file) and Python exports (files on the server,
    in `export_dir` unless a folder is given). Reads the newest run from the session."""

    def __init__(
        self,
        explorer: Session,
        pane: GraphPane,
        guard: ActionGuard,
        export_dir: Path,
        status: Status,
        fail: Fail,
    ) -> None:
        self._explorer = explorer
        self._pane = pane
        self._guard = guard
        self.export_dir = export_dir
        self._status = status
        self._fail = fail

    def download_svg(self) -> None:
        """Let the browser save the graph as laid out there."""
        self._pane.download_svg()

    def download_csv(self) -> None:
        """Let the browser save the per-parameter norms as grad_norms.csv."""
        self._pane.download("grad_norms.csv", report_csv(self._explorer.report), "text/csv")
        self._status("grad_norms.csv sent to the browser", "info")

    def download_json(self) -> None:
        """Let the browser save the report and graph as grad_report.json."""
        ex = self._explorer
        self._pane.download(
            "grad_report.json", report_json(ex.report, ex.graph), "application/json"
        )
        self._status("grad_report.json sent to the browser", "info")

    def export_svg(
        self, folder: str | Path | None = None, done: Callable[[Path], Any] | None = None
    ) -> None:
        """Save the graph as laid out in the browser to folder/graph.svg (on the server)."""
        path = Path(folder or self.export_dir) / "graph.svg"

        def save(svg: str) -> None:
            if not svg:
                self._fail("nothing laid out yet to export")
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(svg, encoding="utf-8")
            self._status(f"graph saved to {path}", "info")
            if done:
                done(path)

        self._pane.request_svg(self._guard.wrap(save))

    def export_csv(self, folder: str | Path | None = None) -> Path:
        """Write folder/grad_norms.csv on the server."""
        path = Path(folder or self.export_dir) / "grad_norms.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_csv(self._explorer.report), encoding="utf-8")
        self._status(f"norms saved to {path}", "info")
        return path

    def export_json(self, folder: str | Path | None = None) -> Path:
        """Write folder/grad_report.json on the server."""
        ex = self._explorer
        path = Path(folder or self.export_dir) / "grad_report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_json(ex.report, ex.graph), encoding="utf-8")
        self._status(f"report saved to {path}", "info")
        return path
