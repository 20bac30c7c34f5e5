"""gradviz_widgets: see gradient flow in PyTorch models, in Jupyter or from Python.

The data side (graphs, reports, DOT, charts, exports) loads without torch, so a saved report can
be re-rendered where torch is not installed; the names that run models (GradExplorer, capture,
GradWatch, ...) are there when torch is.
"""

from .errors import GradExplorerError
from .graph import GradEdge, GradGraph, GradNode
from .report import GradReport, ParamRecord
from .vocabulary import Thresholds

try:
    from .capture import Capture, capture
    from .explorer import GradExplorer
    from .hook_events import HookEvent
    from .watch import GradWatch as GradWatch
except ModuleNotFoundError as _missing:  # only a missing torch is expected here
    if _missing.name != "torch":
        raise

__version__ = "0.1.0"

__all__ = [
    "Capture",
    "GradEdge",
    "GradExplorer",
    "GradExplorerError",
    "HookEvent",
    "GradGraph",
    "GradNode",
    "GradReport",
    "GradWatch",
    "ParamRecord",
    "Thresholds",
    "__version__",
    "capture",
]
