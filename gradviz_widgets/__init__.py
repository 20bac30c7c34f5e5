"""gradviz_widgets: see gradient flow in PyTorch models, in Jupyter or from Python.

The data side (graphs, reports, DOT, charts, exports) loads without torch, so a saved report can
be re-rendered where torch is not installed; the names that run models (GradExplorer, capture,
GradWatch, ...) are there when torch is.
"""

from .errors import GradExplorerError
from .graph.grad_graph import GradGraph
from .graph.nodes import GradEdge, GradNode
from .report.grad_report import GradReport, ParamRecord
from .vocabulary import Thresholds

try:
    from .explorer.session import GradExplorer
    from .hooks.events import HookEvent
    from .run.capture import capture
    from .run.state import Capture
    from .watch import GradWatch as GradWatch
except ModuleNotFoundError as _missing:  # only a missing torch is expected here
    if _missing.name != "torch":
        raise
    _NEED_TORCH = {"Capture", "capture", "GradExplorer", "HookEvent", "GradWatch"}

    def __getattr__(name: str) -> object:
        if name in _NEED_TORCH:
            raise ImportError(
                f"gradviz_widgets.{name} runs models and needs PyTorch, which is not installed "
                "here: pip install torch (the data side — GradReport, GradGraph, export.load_json, "
                "render, chart — works without it)",
                name=name,
            )
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "Capture",
    "GradEdge",
    "GradExplorer",
    "GradExplorerError",
    "GradGraph",
    "GradNode",
    "GradReport",
    "GradWatch",
    "HookEvent",
    "ParamRecord",
    "Thresholds",
    "__version__",
    "capture",
]
__all__ = [name for name in __all__ if name in globals()]  # without torch: the data side only
