"""Optional TensorBoard output: per-parameter norm scalars and a histogram of log10 norms per
step, written from the writer thread through torch.utils.tensorboard (needs `tensorboard`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GradExplorerError
from ..vocabulary import STATUSES


class TensorBoardSink:
    """A writer-thread listener; `target` is True (logs under `<path>/tb`), a folder, or a
    SummaryWriter."""

    def __init__(self, target: Any, path: Path) -> None:
        #: whether the watch made the SummaryWriter (then it closes it; a user's stays open)
        self.own = not hasattr(target, "add_scalar")
        if not self.own:
            self.tb = target
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise GradExplorerError(
                "tensorboard=True needs the tensorboard package (pip install tensorboard)"
            ) from e
        self.tb = SummaryWriter(str(path / "tb") if target is True else str(target))

    def __call__(self, writer: Any, chunk: Any) -> None:
        if chunk is None:
            return
        names = [p.name for p in writer.params]
        bad = STATUSES.index("nonfinite")
        for i, step in enumerate(chunk.steps.tolist()):
            norms = chunk.norm[i]
            # a NaN/Inf gradient is written as it is (TensorBoard marks it); a missing one
            # (no gradient, not recorded) is not a point: leaving the NaN step out drew the
            # line straight across it
            shown = np.isfinite(norms) | (chunk.status[i] == bad)
            for j, value in enumerate(norms.tolist()):
                if shown[j]:
                    self.tb.add_scalar(f"grad_norm/{names[j]}", value, step)
            positive = norms[np.isfinite(norms) & (norms > 0)]
            if positive.size:
                self.tb.add_histogram("log10_grad_norm", np.log10(positive), step)
        self.tb.flush()

    def close(self) -> None:
        """End the SummaryWriter the watch made (its own writer thread with it)."""
        if self.own:
            self.tb.close()
