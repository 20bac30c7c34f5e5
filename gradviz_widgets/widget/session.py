"""What the explorer widget reads and calls on the session it shows, as a Protocol.

`explorer.session.GradExplorer` is the one implementation. The widget package names it here
instead of importing the explorer package, whose `show()` imports the widget: the arrow between
the two packages goes one way (explorer -> widget, lazily, at `show()`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..graph.grad_graph import GradGraph
from ..report.grad_report import GradReport
from ..vocabulary import Thresholds


class Session(Protocol):
    """The parts of a GradExplorer the widget uses. The session owns every setting a run
    depends on and the newest run; the widget shows them and follows them (`on_change`)."""

    history: list[GradReport]
    closed: bool
    failure: BaseException | None
    thresholds: Thresholds

    @property
    def report(self) -> GradReport: ...

    @property
    def graph(self) -> GradGraph: ...

    @property
    def stale(self) -> bool: ...

    @property
    def device(self) -> Any: ...

    @property
    def model_device(self) -> Any: ...

    @property
    def events(self) -> Any: ...

    @property
    def hooks(self) -> list[tuple[str, str]]: ...

    @property
    def modifiers(self) -> dict[str, str]: ...

    @property
    def hook_mechanisms(self) -> Any: ...

    def available_devices(self) -> list[str]: ...

    def run(self, *args: Any, **kwargs: Any) -> Any: ...

    def toggle_hook(self, *args: Any, **kwargs: Any) -> Any: ...

    def set_modifier(self, *args: Any, **kwargs: Any) -> Any: ...

    def clear_hooks(self) -> Any: ...

    def on_change(self, callback: Callable[[str], Any]) -> Any: ...
