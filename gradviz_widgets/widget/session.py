"""What the explorer widget reads and calls on the session it shows, as a Protocol.

`explorer.session.GradExplorer` is the one implementation. The widget package names it here
instead of importing the explorer package, whose `show()` imports the widget: the arrow between
the two packages goes one way (explorer -> widget, lazily, at `show()`).
"""

from __future__ import annotations

from typing import Any, Protocol

from ..graph.grad_graph import GradGraph
from ..report.grad_report import GradReport


class Session(Protocol):
    """The parts of a GradExplorer the widget uses."""

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
    def hooks(self) -> Any: ...

    @property
    def modifiers(self) -> Any: ...

    @property
    def hook_mechanisms(self) -> Any: ...

    def run(self, *args: Any, **kwargs: Any) -> Any: ...

    def toggle_hook(self, *args: Any, **kwargs: Any) -> Any: ...
