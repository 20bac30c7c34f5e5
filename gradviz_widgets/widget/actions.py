"""What the explorer widget's toolbar does, as mixins of ExplorerWidget: settings changes that
re-run (undone when the run fails, rejected inputs reverted) and downloads / exports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import GradExplorerError
from ..hooks.modifiers import Modifier
from ..report.export import report_csv, report_json
from ..vocabulary import Thresholds
from .controller import Settings, error_text


class SettingsActions:
    """Hooks, modifiers, device and thresholds: change, re-run, undo on failure.

    Needs from the widget: explorer, controls, runs, last_error, _modifier_value, _quiet,
    refresh(), _set_status(), _fail(), _device_in_force().
    """

    explorer: Any
    controls: Any
    selected_module: str | None
    runs: int
    last_error: str | None
    _modifier_value: float
    _quiet: bool
    refresh: Callable[[], None]
    _set_status: Callable[[str, str], None]
    _fail: Callable[..., None]
    _device_in_force: Callable[[], str]

    def _apply(self, change: Callable[[], Any] | None, what: str, run: bool = True) -> bool:
        """Make `change` (to hooks, modifiers, device, thresholds) and re-run (`run=False`: the
        change runs itself); when either fails, put the settings back, say so, keep the last
        good view. True when it ran."""
        before = Settings.of(self.explorer)
        self._set_status("running forward + backward…", "busy")
        try:
            if change is not None:
                change()
            if run:
                self.explorer.run()
        except Exception as e:  # noqa: BLE001 - any failure: undo and show it
            before.restore(self.explorer)
            self._sync_controls()
            undone = f" ({what} undone)" if what and change is not None else ""
            self._fail(f"{error_text(e)}{undone}", e)
            return False
        self.runs += 1
        self.last_error = None
        self.refresh()
        return True

    def set_device(self, device: str) -> None:
        """Run on `device`; if that fails, the device in force stays (and the menu shows it)."""
        self._apply(lambda: self.explorer.run(device=device), f"switch to {device}", run=False)

    def set_thresholds(self) -> None:
        c = self.controls
        try:
            new = Thresholds(c.vanishing_box.value, c.exploding_box.value)
        except GradExplorerError as e:
            self._sync_controls()  # a rejected input reverts to the value in force
            th = self.explorer.thresholds
            self._fail(f"{e}; kept vanishing < {th.vanishing:g}, exploding > {th.exploding:g}", e)
            return
        self._apply(lambda: setattr(self.explorer, "thresholds", new), "new thresholds")

    def clear_hooks(self) -> None:
        self._apply(self.explorer.clear_hooks, "clearing the hooks")

    def apply_modifier_to_selected(self) -> None:
        target = self.selected_module
        if target is None:
            self._fail("select a node first: the modifier goes on its module")
            return
        kind, value = self.controls.modifier_box.value, self.controls.modifier_value.value
        given = {} if kind == "none" else {kind: value}
        try:  # a rejected value reverts to the one in force before anything changes
            if given:
                Modifier(kind, value)
        except ValueError as e:
            self._set_quietly(self.controls.modifier_value, self._modifier_value)
            self._fail(f"{e}; kept {self._modifier_value:g}", e)
            return
        if self._apply(
            lambda: self.explorer.set_modifier(target, **given), f"modifier at {target or '(root)'}"
        ):
            self._modifier_value = value

    def _sync_controls(self) -> None:
        """Show the settings in force (after a rejected input or an undone change)."""
        c, ex = self.controls, self.explorer
        device = self._device_in_force()
        if device not in c.device_box.options:
            self._set_quietly(c.device_box, None)
            c.device_box.options = [device, *c.device_box.options]
        self._set_quietly(c.device_box, device)
        self._set_quietly(c.vanishing_box, ex.thresholds.vanishing)
        self._set_quietly(c.exploding_box, ex.thresholds.exploding)

    def _set_quietly(self, control: Any, value: Any) -> None:
        """Show `value` in `control` without acting on it (a rejected input reverting)."""
        self._quiet = True
        try:
            control.value = value
        finally:
            self._quiet = False


class ExportActions:
    """Toolbar downloads (the browser saves the file) and Python exports (files on the server).

    Needs from the widget: explorer, pane, guard, export_dir, _set_status(), _fail().
    """

    explorer: Any
    pane: Any
    guard: Any
    export_dir: Path
    _set_status: Callable[[str, str], None]
    _fail: Callable[..., None]

    def download_svg(self) -> None:
        """Let the browser save the graph as laid out there."""
        self.pane.download_svg()

    def download_csv(self) -> None:
        """Let the browser save the per-parameter norms as grad_norms.csv."""
        self.pane.download("grad_norms.csv", report_csv(self.explorer.report), "text/csv")
        self._set_status("grad_norms.csv sent to the browser", "info")

    def download_json(self) -> None:
        """Let the browser save the report and graph as grad_report.json."""
        self.pane.download(
            "grad_report.json",
            report_json(self.explorer.report, self.explorer.graph),
            "application/json",
        )
        self._set_status("grad_report.json sent to the browser", "info")

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
            self._set_status(f"graph saved to {path}", "info")
            if done:
                done(path)

        self.pane.request_svg(self.guard.wrap(save))

    def export_csv(self, folder: str | Path | None = None) -> Path:
        """Write folder/grad_norms.csv on the server."""
        path = Path(folder or self.export_dir) / "grad_norms.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_csv(self.explorer.report), encoding="utf-8")
        self._set_status(f"norms saved to {path}", "info")
        return path

    def export_json(self, folder: str | Path | None = None) -> Path:
        """Write folder/grad_report.json on the server."""
        path = Path(folder or self.export_dir) / "grad_report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_json(self.explorer.report, self.explorer.graph), encoding="utf-8")
        self._set_status(f"report saved to {path}", "info")
        return path
