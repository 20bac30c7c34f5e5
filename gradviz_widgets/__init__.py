"""gradviz_widgets: see gradient flow in PyTorch models, in Jupyter or from Python."""

from .capture import Capture, capture
from .errors import GradExplorerError
from .explorer import GradExplorer
from .graph import GradEdge, GradGraph, GradNode
from .hook_events import HookEvent
from .report import GradReport, ParamRecord
from .stats import Thresholds
from .watch import GradWatch as GradWatch

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
