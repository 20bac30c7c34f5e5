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
    `on_train_end`; each training forward's `outputs.loss` goes to its spike detection. The
    Trainer has no event for a failed `train()`: then `callback.close()`
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
        watch = self._run.start(kwargs["model"], optimizer, state.global_step, self.scaler)
        if watch is not None:  # each forward's `outputs.loss`, for the spike detection
            self._loss_hook = kwargs["model"].register_forward_hook(self._on_output)

    def _on_output(self, module: Any, args: Any, output: Any) -> None:
        watch = self._run.watch
        loss = getattr(output, "loss", None)
        if watch is not None and module.training and loss is not None:
            self._run.log_loss(loss, step=watch.steps)  # the step this forward belongs to

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._run.check(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the watch (after a `train()` that raised); closing twice does nothing."""
        hook, self._loss_hook = getattr(self, "_loss_hook", None), None
        if hook is not None:
            hook.remove()
        self._run.close()
