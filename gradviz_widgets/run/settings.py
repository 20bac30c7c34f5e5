"""RunSettings: what one run depends on besides the model, the input and the hooks, as one value."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ..graph.measure import FlowScope
from ..vocabulary import Thresholds
from .checks import check_autocast, check_loss_args, check_seed, check_thresholds


@dataclasses.dataclass(frozen=True, eq=False)  # identity: a target tensor has no plain ==
class RunSettings:
    """Loss, target, device, seed, thresholds, flow tracking and autocast of a run, checked once.

    Example:
        >>> RunSettings.checked(seed=3).seed
        3
        >>> RunSettings().device is None
        True
    """

    loss_fn: Callable[..., torch.Tensor] | None = None
    target: Any = None
    device: str | torch.device | None = None  # None: where the model's parameters live
    seed: int | None = 0
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)
    track_flow: bool = True
    autocast: torch.dtype | None = None  # a torch.autocast of this dtype around the forward
    #: look for the first op whose output is NaN/Inf (the rerun of a run whose loss was not
    #: finite: run/forward_nan.py); never set by users
    probe_nonfinite: bool = False
    #: measure the flow only where one view of the graph needs it (graph/measure.FlowScope:
    #: a widget's re-run); None: along every edge
    flow_scope: FlowScope | None = None

    @classmethod
    def checked(
        cls,
        *,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        target: Any = None,
        device: str | torch.device | None = None,
        seed: Any = 0,
        thresholds: Any = None,
        track_flow: bool = True,
        autocast: Any = None,
    ) -> RunSettings:
        """Settings from user arguments; a wrong one raises a GradExplorerError naming it."""
        check_loss_args(loss_fn, target)
        return cls(
            loss_fn,
            target,
            device,
            check_seed(seed),
            check_thresholds(thresholds),
            track_flow,
            check_autocast(autocast),
        )
