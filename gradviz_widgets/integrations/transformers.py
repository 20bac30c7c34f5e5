"""GradWatch as a Hugging Face Trainer callback: `Trainer(..., callbacks=[GradWatchCallback()])`.

Example:
    >>> from gradviz_widgets.integrations.transformers import GradWatchCallback
    >>> callback = GradWatchCallback(update_ratio=True)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..watch.watch import GradWatch
from .common import WatchRun, require

if TYPE_CHECKING:
    from transformers import TrainerCallback
else:
    TrainerCallback = require("transformers", "transformers").TrainerCallback


def trainer_scaler(optimizer: Any) -> torch.amp.GradScaler | None:
    """The GradScaler of `fp16=True` (accelerate's, on its AcceleratedOptimizer); None for fp32
    and bf16. The spot for GradWatch(scaler=), which tells skipped steps."""
    return getattr(optimizer, "scaler", None)


class GradWatchCallback(TrainerCallback):
    """Starts a GradWatch on the Trainer's model and its torch optimizer (inside accelerate's
    AcceleratedOptimizer) at `on_train_begin` (a resumed run counts on from its global step),
    records one row per optimizer step numbered by `state.global_step`, and closes it at
    `on_train_end`. The Trainer has no event for a failed `train()`: then `callback.close()`
    (or the next `train()`) closes it. `watch_options` go to GradWatch."""

    def __init__(self, path: str | Path | None = None, **watch_options: Any) -> None:
        self._run = WatchRun(path, watch_options)
        #: the framework's GradScaler (fp16=True) or None, found at on_train_begin
        self.scaler: torch.amp.GradScaler | None = None

    @property
    def watch(self) -> GradWatch | None:
        """The GradWatch of the current (or last) training run; None before training starts."""
        return self._run.watch

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        optimizer = kwargs.get("optimizer")
        self.scaler = trainer_scaler(optimizer)
        self._run.start(kwargs["model"], optimizer, state.global_step, self.scaler)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._run.check(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._run.close()

    def close(self) -> None:
        """Close the watch (after a `train()` that raised); closing twice does nothing."""
        self._run.close()
