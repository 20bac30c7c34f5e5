"""GradExplorer: the session object a user holds — run, toggle hooks, switch device, keep history."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..distributed.ddp import gathers_ranks, with_ranks
from ..errors import GradExplorerError
from ..graph.grad_graph import GradGraph
from ..hooks.clash import HookFacts
from ..hooks.modifiers import mark_modified
from ..hooks.plan import HookPlan
from ..hooks.run import with_fallback
from ..report.grad_report import GradReport
from ..run.capture import run
from ..run.checks import (
    check_flag,
    check_loss_args,
    check_model,
    check_seed,
    check_thresholds,
    unwrap_compiled,
)
from ..run.devices import available_devices, model_device, resolve_device
from ..run.settings import RunSettings
from ..run.state import Capture
from ..vocabulary import Thresholds
from .exports import Exports
from .hook_methods import HookControls
from .listeners import ChangeHandle, ChangeListeners, Listener


class GradExplorer(HookControls, Exports):
    """Explore the gradients of `model` on `sample_input` without changing the model.

    Example:
        >>> from gradviz_widgets.examples import dead_branch_example
        >>> net, x, y = dead_branch_example()
        >>> ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
        >>> ex.run().param_status["gate.weight"]
        'zero'
    """

    def __init__(
        self,
        model: nn.Module,
        sample_input: Any,
        *,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        target: Any = None,
        device: str | torch.device | None = None,
        seed: int | None = 0,
        thresholds: Thresholds | None = None,
        track_flow: bool = True,
        keep_tensors: bool = False,
        history: int = 20,
        ranks: bool | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise GradExplorerError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        check_model(model)
        check_loss_args(loss_fn, target)
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise GradExplorerError(f"history must be an int >= 1, got {history!r}")
        self._listeners = ChangeListeners()  # open widgets follow the state through it
        self._model: nn.Module | None = model
        self._inner: nn.Module | None = unwrap_compiled(model)[0]  # wrappers: see-through
        self._ranks = check_flag("ranks", ranks) if ranks is not None else None
        self.sample_input = sample_input
        self.loss_fn = loss_fn
        self.target = target
        self.device = None if device is None else str(resolve_device(device, model))
        self.seed = check_seed(seed)
        self.thresholds = check_thresholds(thresholds)
        self.track_flow = check_flag("track_flow", track_flow)
        self._paths = frozenset(p for p, _ in self._inner.named_modules())
        # what the user turned on (replaced, never changed, by the hook methods below) and
        # what runs learned about the modules (which backward hooks need the fallback)
        self._plan = HookPlan(keep_tensors=check_flag("keep_tensors", keep_tensors))
        self._learned = HookFacts()
        self._last: Capture | None = None
        self._ran_with: tuple = ()
        self.history: list[GradReport] = []
        self._history_len = history
        self.closed = False

    # ---- running ---------------------------------------------------------------------------
    @property
    def model(self) -> nn.Module:
        if self._model is None:
            raise GradExplorerError("this explorer was closed; create a new GradExplorer")
        return self._model

    def run(self, device: str | torch.device | None = None) -> GradReport:
        """One forward + backward with the hooks that are on; returns (and keeps) the report.

        `device` switches the device for this and later runs ("cpu", "cuda", "cuda:1", "mps").
        """
        self._check_open()
        previous = self.device
        if device is not None:
            self.device = str(resolve_device(device, self.model))
        try:
            return self._run()
        except BaseException:
            self.device = previous  # a failed switch leaves the explorer where it was
            raise

    def _run(self) -> GradReport:
        settings = self._run_settings()
        plan = self._plan
        baseline = run(self.model, self.sample_input, settings) if plan.modifiers else None
        result = with_fallback(
            plan, self._learned, lambda hooks: run(self.model, self.sample_input, settings, hooks)
        )
        if result.hooks is not None:
            self._learned = result.hooks.facts
        if baseline is not None:
            result = dataclasses.replace(
                result, report=mark_modified(result.report, baseline.report, dict(plan.modifiers))
            )
        if gathers_ranks(self.model, self._ranks):  # one all_gather: every rank runs this
            result = dataclasses.replace(result, report=with_ranks(result.report, self.model))
        self._last = result
        self._ran_with = self._settings()
        self.history.append(result.report)
        del self.history[: -self._history_len]
        self._changed("run")
        return result.report

    def _run_settings(self) -> RunSettings:
        """The run settings as they are now (attributes set since are checked here)."""
        return RunSettings.checked(
            loss_fn=self.loss_fn,
            target=self.target,
            device=self.device,
            seed=self.seed,
            thresholds=self.thresholds,
            track_flow=self.track_flow,
        )

    def _settings(self) -> tuple:
        """What a run depends on besides the model: to tell whether the newest run is stale."""
        return (
            self._plan.on,
            tuple(self._plan.modifiers.items()),
            self.device,
            self.thresholds,
            self.seed,
            self.track_flow,
            id(self.sample_input),
            id(self.loss_fn),
            id(self.target),
        )

    @property
    def thresholds(self) -> Thresholds:
        """Where vanishing and exploding start; set it to classify the next run with others."""
        return self._thresholds

    @thresholds.setter
    def thresholds(self, value: Thresholds) -> None:
        self._thresholds = value  # checked at the next run, like every run setting
        self._changed("thresholds")

    # ---- who follows the state -------------------------------------------------------------
    def on_change(self, callback: Listener) -> ChangeHandle:
        """Call `callback(what)` after each change of the hooks or modifiers ("hooks"), the
        thresholds ("thresholds"), after each run ("run") and at close ("closed"); every open
        widget of this explorer follows it so. A bound method is held weakly (the explorer
        does not keep its object alive), any other callable until `handle.remove()`."""
        return self._listeners.add(callback)

    def _changed(self, what: str) -> None:
        self._listeners.notify(what)

    @property
    def stale(self) -> bool:
        """True when nothing ran yet or hooks, modifiers, device, thresholds, input or loss
        changed since the newest run."""
        return self._last is None or self._ran_with != self._settings()

    @property
    def report(self) -> GradReport:
        """The newest run's report (runs once if nothing ran yet)."""
        if self._last is None:
            self.run()
        return self._last.report  # type: ignore[union-attr]

    @property
    def graph(self) -> GradGraph:
        """The newest run's backward graph (runs once if nothing ran yet)."""
        if self._last is None:
            self.run()
        return self._last.graph  # type: ignore[union-attr]

    @property
    def model_device(self) -> torch.device:
        """Where the model's parameters live (runs go there unless a device is chosen)."""
        return model_device(self.model)

    @staticmethod
    def available_devices() -> list[str]:
        return available_devices()

    # ---- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Turn everything off and drop the results. Hooks exist only during runs, so nothing of
        ours remains on the model afterwards."""
        self._plan = self._plan.cleared()
        self._last = None
        self.history.clear()
        self._model = self._inner = None  # the explorer no longer keeps the model alive
        self.closed = True
        self._changed("closed")
        self._listeners.clear()

    def _check_open(self) -> None:
        if self.closed:
            raise GradExplorerError("this explorer was closed; create a new GradExplorer")

    def __enter__(self) -> GradExplorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def show(self, **options: Any) -> Any:
        """The notebook widget: graph and gradient-norm chart side by side."""
        from ..widget.explorer_widget import (
            ExplorerWidget,  # the analysis never imports widget code
        )
        from ..widget.marimo_mirror import in_marimo, marimo_view

        widget = ExplorerWidget(self, **options)
        return marimo_view(widget) if in_marimo() else widget  # marimo: drawn whole

    def compare(self, baseline: Any = None, **options: Any) -> Any:
        """The widget in compare mode: `baseline` (another GradExplorer, a GradReport, a
        (report, graph) pair; None: this explorer's current run) is run A, this explorer's runs
        are B: grouped bars, the ratio B/A, edges coloured by the ratio, changed statuses."""
        from ..widget.explorer_widget import compare_with
        from ..widget.marimo_mirror import in_marimo, marimo_view

        widget = compare_with(self, baseline, **options)
        return marimo_view(widget) if in_marimo() else widget

    def __repr__(self) -> str:
        name = type(self._model).__name__ if self._model is not None else "<closed>"
        return (
            f"GradExplorer({name}, device={self.device or 'model device'}, hooks={len(self.hooks)})"
        )
