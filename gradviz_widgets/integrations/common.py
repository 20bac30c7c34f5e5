"""What the framework callbacks share: the optional import, and one watch per training run that
starts at the framework's global step."""

from __future__ import annotations

import importlib
import inspect
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from ..errors import GradExplorerError
from ..watch.watch import GradWatch


class MissingExtraError(GradExplorerError, ImportError):
    """A framework integration was imported without its framework installed."""


def require(module: str, extra: str) -> ModuleType:
    """`module`, or an error that says which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"gradviz_widgets.integrations.{extra} needs {module.split('.')[0]} ({e}): "
            f"pip install gradviz_widgets[{extra}]"
        ) from e


class WatchRun:
    """The watch of one training run: started at the run's global step, closed at its end, and
    a warning (once) when its step numbers stop matching the framework's."""

    def __init__(self, path: str | Path | None, options: dict[str, Any]) -> None:
        if "optimizer" in options or "start_step" in options:
            raise GradExplorerError(
                "the callback passes optimizer= and start_step= itself (the framework's "
                "optimizer and global step); leave them out"
            )
        try:  # a misspelt option fails here, not at the start of training
            inspect.signature(GradWatch).bind(None, **options)
        except TypeError as e:
            raise GradExplorerError(f"GradWatchCallback: {e} (options go to GradWatch)") from e
        self.path, self.options = path, options
        self.watch: GradWatch | None = None
        self._warned = False

    def start(
        self, model: nn.Module, optimizer: Any, global_step: int, scaler: Any = None
    ) -> GradWatch | None:
        """A new watch (`scaler`: the framework's GradScaler, so skipped mixed-precision steps
        are recorded as skipped); on failure a warning and none: the training run goes on."""
        self.close()
        self.watch, self._warned = None, False
        try:
            # the framework's wrappers (LightningOptimizer, AcceleratedOptimizer) are
            # unwrapped by GradWatch itself (watch/arguments.py)
            self.watch = GradWatch(
                model,
                optimizer=optimizer,
                path=self.path,
                start_step=int(global_step),
                **{"scaler": scaler, **self.options},
            )
        except Exception as e:
            warnings.warn(
                f"GradWatchCallback could not start a GradWatch ({type(e).__name__}: {e}); "
                "training goes on without it",
                stacklevel=3,
            )
        return self.watch

    def check(self, global_step: int) -> None:
        """After an optimizer step: the watch's next step number is the framework's."""
        watch = self.watch
        if watch is None or watch.closed or self._warned or watch.steps == global_step:
            return
        self._warned = True
        warnings.warn(
            f"GradWatch: its next step is {watch.steps}, the trainer's global step is "
            f"{global_step}: an optimizer step did not run (a skipped mixed-precision step?) "
            "or ran outside the trainer; from here on its step numbers differ from the "
            "trainer's",
            stacklevel=3,
        )

    def log_loss(self, loss: Any, step: int | None = None) -> None:
        """A training loss for the watch's spike detection (never raises)."""
        watch = self.watch
        if watch is None or watch.closed or loss is None:
            return
        if isinstance(loss, dict):
            loss = loss.get("loss")
        if isinstance(loss, (torch.Tensor, float, int)):
            try:
                watch.log_loss(loss, step=step)
            except Exception:  # a loss the watch cannot read is no reason to stop training
                pass

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
