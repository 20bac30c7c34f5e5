"""GradWatch: per-step gradient statistics of a training run, on disk, live in a notebook.

Example:
    >>> from gradviz_widgets.watch import GradWatch, minmax_downsample
"""

from .anomalies import Anomaly, FlightRecord
from .history import Overview, minmax_downsample
from .recorded import RecordedRun
from .watch import GradWatch

__all__ = ["Anomaly", "FlightRecord", "GradWatch", "Overview", "RecordedRun", "minmax_downsample"]
