"""GradWatch as a Lightning callback: `Trainer(callbacks=[GradWatchCallback(path=...)])`.

Example:
    >>> from gradviz_widgets.integrations.lightning import GradWatchCallback
    >>> callback = GradWatchCallback(update_ratio=True)
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..watch.watch import GradWatch
from .common import WatchRun, require

if TYPE_CHECKING:
    from lightning.pytorch import Callback
else:
    Callback = require("lightning.pytorch", "lightning").Callback


def lightning_scaler(trainer: Any) -> torch.amp.GradScaler | None:
    """The GradScaler of precision="16-mixed" (Lightning's MixedPrecision plugin); None for
    32-bit and "bf16-mixed". The spot for GradWatch(scaler=), which tells skipped steps."""
    return getattr(trainer.precision_plugin, "scaler", None)


class GradWatchCallback(Callback):
    """Starts a GradWatch on the LightningModule and its torch optimizer when training starts
    (after a checkpoint's state is restored, so a resumed run counts on from its global step),
    records one row per optimizer step numbered by `trainer.global_step`, and closes it when
    training ends or fails. Each batch's loss goes to the watch's spike detection. `watch_options` go to GradWatch (not optimizer= / start_step=)."""

    def __init__(self, path: str | Path | None = None, **watch_options: Any) -> None:
        self._run = WatchRun(path, watch_options)
        #: the framework's GradScaler (precision="16-mixed") or None, found at training start
        self.scaler: torch.amp.GradScaler | None = None

    @property
    def watch(self) -> GradWatch | None:
        """The GradWatch of the current (or last) training run; None before training starts."""
        return self._run.watch

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        optimizers = list(trainer.optimizers)
        if len(optimizers) > 1:
            warnings.warn(
                f"GradWatchCallback: {len(optimizers)} optimizers; a watch step is one round "
                "of all of them (each parameter read at its own optimizer's step), and "
                "trainer.global_step counts the steps of each, so the step numbers differ",
                stacklevel=2,
            )
        self.scaler = lightning_scaler(trainer)
        self._run.start(pl_module, list(optimizers) or None, trainer.global_step, self.scaler)

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        # args: pl_module, outputs (the training_step's loss), batch, batch_idx; called after
        # the batch's backward (and the optimizer step when there was one): the loss's step
        outputs = args[1] if len(args) > 1 else None
        self._run.log_loss(_step_loss(outputs, trainer, args[0] if args else None))
        if len(trainer.optimizers) == 1:
            self._run.check(trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._run.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._run.close()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._run.close()


def _step_loss(outputs: Any, trainer: Any, module: Any) -> Any:
    """The training_step's own loss: under automatic optimization Lightning hands the hook
    the loss divided by `accumulate_grad_batches` (what it backpropagates), so the watch had
    recorded half the loss with 2 batches a step."""
    k = getattr(trainer, "accumulate_grad_batches", 1)
    if not isinstance(k, int) or k <= 1 or not getattr(module, "automatic_optimization", True):
        return outputs
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return loss * k if isinstance(loss, torch.Tensor) else outputs
