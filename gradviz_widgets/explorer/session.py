"""GradExplorer: the session object a user holds — run, toggle hooks, switch device, keep history."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..distributed.ddp import gathers_ranks, with_ranks
from ..errors import GradExplorerError, did_you_mean
from ..graph.grad_graph import GradGraph
from ..graph.measure import FlowScope, flow_scope, unmeasured
from ..graph.nodes import drawn_count
from ..hooks.clash import HookFacts
from ..hooks.config import DEFAULT_KIND, check_hook, modifier_kind
from ..hooks.events import HookEvent, HookRecord
from ..hooks.modifiers import Modifier, mark_modified
from ..hooks.plan import HookPlan
from ..hooks.run import FALLBACK, FULL, with_fallback
from ..report.grad_report import GradReport
from ..run.capture import run
from ..run.checks import (
    check_autocast,
    check_flag,
    check_loss_args,
    check_model,
    check_seed,
    check_thresholds,
    unwrap_compiled,
)
from ..run.devices import available_devices, model_device, resolve_device
from ..run.fingerprint import model_fingerprint
from ..run.settings import RunSettings
from ..run.state import Capture
from ..vocabulary import Thresholds
from .listeners import ChangeHandle, ChangeListeners, Listener


class GradExplorer:
    """Explore the gradients of `model` on `sample_input` without changing the model.

    Example:
        >>> from gradviz_widgets.examples import dead_branch_example
        >>> net, x, y = dead_branch_example()
        >>> ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
        >>> ex.run().param_status["gate.weight"]
        'zero'

    `autocast`: None, or torch.bfloat16 / torch.float16 to run every forward and loss under
    `torch.autocast` of that dtype on the run's device, as a mixed precision training step
    does (an explorer called inside a `with torch.autocast(...)` block is under it only for
    the runs called there, not for a widget's re-runs).
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
        autocast: torch.dtype | None = None,
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
        #: what compare lines call this explorer's runs ("spike step 412": a replayed step);
        #: None: its device and loss only
        self.label: str | None = None
        self.thresholds = check_thresholds(thresholds)
        self.track_flow = check_flag("track_flow", track_flow)
        self.autocast = check_autocast(autocast)
        # what the user turned on (replaced, never changed, by the hook methods below) and
        # what runs learned about the modules (which backward hooks need the fallback)
        self._plan = HookPlan(keep_tensors=check_flag("keep_tensors", keep_tensors))
        self._learned = HookFacts()
        self._last: Capture | None = None
        self._ran_with: tuple = ()
        self.history: list[GradReport] = []
        self._history_len = history
        self._carried: tuple[str, ...] = ()  # findings every run reports first
        # the newest FlowScope, its view and the size of the graph it was taken of: a click
        # re-runs a model whose graph is the same every time (a 1,000-layer chain's scope
        # costs ~15 ms to make)
        self._scoped: tuple[str, tuple[int, int], FlowScope] | None = None
        #: the newest run's exception when it failed (None: it did not), for open widgets
        self.failure: BaseException | None = None
        self.closed = False

    # ---- running ---------------------------------------------------------------------------
    @property
    def model(self) -> nn.Module:
        if self._model is None:
            raise GradExplorerError("this explorer was closed; create a new GradExplorer")
        return self._model

    def run(
        self,
        device: str | torch.device | None = None,
        *,
        ranks: bool | None = None,
        view: Mapping[str, Any] | None = None,
    ) -> GradReport:
        """One forward + backward with the hooks that are on; returns (and keeps) the report.

        `device` switches the device for this and later runs ("cpu", "cuda", "cuda:1", "mps").
        `ranks` gathers every rank's statuses for this run (one all_gather: every rank must
        run it) or not; None: as the explorer was made (`GradExplorer(ranks=)`; by default for a
        DDP model in a group of several ranks). The widget's runs never gather: it is shown on
        one rank, where a collective would wait for the others for good.
        `view` (`GradGraph.view`'s `depth`, `expand`, `collapse`): measure the flow only where
        that view of the newest graph draws it (what the widget's re-runs do; graph/measure.py).
        The graph's other op nodes and edges read `measured=False`, and views that draw them
        show "not measured"; parameters and the report are measured in full either way.
        """
        self._check_open()
        previous = self.device
        if device is not None:
            self.device = str(resolve_device(device, self.model))
        try:
            report = self._run(self._ranks if ranks is None else ranks, self._scope(view))
        except BaseException as e:
            self.device = previous  # a failed switch leaves the explorer where it was
            self.failure = e
            self._changed("failed")  # an open widget says so (the last good view stays)
            raise
        self.failure = None
        return report

    def _scope(self, view: Mapping[str, Any] | None) -> FlowScope | None:
        """What a run restricted to `view` measures (None: everything; also with no graph yet
        to take the view of, and after a run that found zeros or NaN, whose origins are found
        along every edge: `_needs_every_edge`)."""
        if view is None or self._last is None or not self.track_flow:
            return None
        graph = self._last.graph
        key, size = repr(sorted(dict(view).items())), (len(graph.nodes), len(graph.edges))
        if self._scoped is None or self._scoped[:2] != (key, size):
            # kept while the graph keeps its shape: what another shape lacks is measured anyway
            try:
                self._scoped = (key, size, flow_scope(graph, **view))
            except TypeError as e:
                raise GradExplorerError(
                    f"view takes GradGraph.view's depth, expand and collapse, got {dict(view)!r}"
                ) from e
        # zeros or NaN in the newest run: a view's run would find them again and run twice
        return None if _has_bad_flow(self._last) else self._scoped[2]

    def _run(self, ranks: bool | None, scope: FlowScope | None = None) -> GradReport:
        settings = dataclasses.replace(self._run_settings(), flow_scope=scope)
        plan = self._plan
        baseline = run(self.model, self.sample_input, settings) if plan.modifiers else None
        result = self._capture(settings)
        if scope is not None and _needs_every_edge(result):
            result = self._capture(dataclasses.replace(settings, flow_scope=None))
        if result.hooks is not None:
            self._learned = result.hooks.facts
        if baseline is not None:
            result = dataclasses.replace(
                result, report=mark_modified(result.report, baseline.report, dict(plan.modifiers))
            )
        if gathers_ranks(self.model, ranks):  # one all_gather: every rank runs this
            result = dataclasses.replace(result, report=with_ranks(result.report, self.model))
        if self._carried:
            findings = (*self._carried, *result.report.findings)
            result = dataclasses.replace(
                result, report=dataclasses.replace(result.report, findings=findings)
            )
        self._last = result
        self._ran_with = self._settings()
        self.history.append(result.report)
        del self.history[: -self._history_len]
        self._changed("run")
        return result.report

    def _capture(self, settings: RunSettings) -> Capture:
        """One run with the hooks of the plan (the tensor-hook fallback where they clash)."""
        return with_fallback(
            self._plan,
            self._learned,
            lambda hooks: run(self.model, self.sample_input, settings, hooks),
        )

    def carry_finding(self, text: str) -> None:
        """A finding this explorer's runs report first, this one's and every later one's (a
        replayed training step that called the model twice: the replay's gradients are not
        the step's, after a click's re-run too).

        Example:
            >>> ex = GradExplorer(torch.nn.Linear(2, 1), torch.ones(1, 2))
            >>> ex.carry_finding("replayed from a checkpoint")
            >>> ex.run().findings[0]
            'replayed from a checkpoint'
        """
        self._carried += (str(text),)
        self._changed("findings")

    def _run_settings(self) -> RunSettings:
        """The run settings as they are now (attributes set since are checked here)."""
        return RunSettings.checked(
            loss_fn=self.loss_fn,
            target=self.target,
            device=self.device,
            seed=self.seed,
            thresholds=self.thresholds,
            track_flow=self.track_flow,
            autocast=self.autocast,
        )

    def _settings(self) -> tuple:
        """What a run depends on: to tell whether the newest run is stale."""
        return (
            model_fingerprint(self._model, (self.sample_input, self.target)),
            self._plan.on,
            tuple(self._plan.modifiers.items()),
            self.device,
            self.thresholds,
            self.seed,
            self.track_flow,
            self.autocast,
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
        changed since the newest run, or the model did (a parameter changed in place, frozen,
        unfrozen or replaced, a module added, a mode switched: `run/fingerprint.py`)."""
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

    # ---- hooks and modifiers: the plan is replaced (never changed) on each call ----------
    def toggle_hook(self, target: str, kind: str | None = None) -> bool:
        """Flip a hook on a module path (kind: forward_pre | forward | backward, default backward)
        or a graph node id (kind: tensor). Returns whether it is on now."""
        self._check_open()
        kind = kind or _default_kind(target)
        self._check_node(target, kind)
        on = (target, kind) not in self._plan.on
        if on:  # a hook on a module deleted since can still be turned off
            check_hook(self._paths(), target, kind)
        self._plan = self._plan.with_hook(target, kind, on)
        self._changed("hooks")
        return on

    def set_hook(self, target: str, kind: str | None = None, on: bool = True) -> bool:
        """Turn a hook on or off explicitly."""
        self._check_open()
        kind = kind or _default_kind(target)
        if on:
            self._check_node(target, kind)
        if on or (target, kind) not in self._plan.on:
            check_hook(self._paths(), target, kind)
        self._plan = self._plan.with_hook(target, kind, on)
        self._changed("hooks")
        return on

    def _paths(self) -> frozenset[str]:
        """The model's module paths now (modules added or deleted since the explorer was made
        count)."""
        self._check_open()
        assert self._inner is not None  # open
        return frozenset(p for p, _ in self._inner.named_modules())

    def _check_node(self, target: str, kind: str) -> None:
        """A tensor hook's node must be an op node of the newest graph (when one exists)."""
        if kind != "tensor" or self._last is None or "#" not in target:
            return  # other mistakes are named by check_hook
        graph = self._last.graph
        if target not in graph or graph.node(target).kind != "op":
            close = difflib.get_close_matches(
                target, [n.id for n in graph.nodes if n.kind == "op"], n=5
            )
            raise GradExplorerError(
                f"no op node {target!r} in the newest graph{did_you_mean(close)}; tensor hooks "
                "go on op nodes (parameter gradients are in the report)."
            )

    def set_modifier(
        self,
        target: str,
        *,
        clip_norm: float | None = None,
        clip_value: float | None = None,
        scale: float | None = None,
    ) -> None:
        """Modify the gradient flowing back through `target` in explorer runs (one of the three);
        call with none of them to remove it. The report marks the gradients this changed.

        `clip_norm=c` scales the gradients by min(1, c / (‖g‖ + 1e-6)), exactly as
        `torch.nn.utils.clip_grad_norm_` does (‖g‖ of all of them together): a gradient far
        smaller than 1e-6 ends below `c` by that epsilon, as in training."""
        given = {
            k: v
            for k, v in {"clip_norm": clip_norm, "clip_value": clip_value, "scale": scale}.items()
            if v is not None
        }
        if len(given) > 1:
            raise GradExplorerError(f"give one modifier at a time, got {sorted(given)}")
        try:
            modifier = Modifier(*next(iter(given.items()))) if given else None
        except ValueError as e:
            raise GradExplorerError(str(e)) from e
        if modifier is not None:  # one on a module deleted since can still be removed
            check_hook(self._paths(), target, modifier_kind(target))
        self._plan = self._plan.with_modifier(target, modifier)
        self._changed("hooks")

    def clear_hooks(self) -> None:
        """Turn every hook and modifier off."""
        self._plan = self._plan.cleared()
        self._changed("hooks")

    @property
    def hooks(self) -> list[tuple[str, str]]:
        """(target, kind) for each hook that is on."""
        return self._plan.active

    @property
    def hook_plan(self) -> HookPlan:
        """The hooks and modifiers that are on, as one immutable value (runs never change it)."""
        return self._plan

    @property
    def _hooks(self) -> HookPlan:
        # widget_controller.Settings reads `_hooks.modifiers`; modifier_objects is the public way
        return self._plan

    @property
    def modifier_objects(self) -> dict[str, Modifier]:
        """target -> the Modifier on it (immutable values; set them back with set_modifier)."""
        return dict(self._plan.modifiers)

    @property
    def modifiers(self) -> dict[str, str]:
        """target -> description of the modifier on it."""
        return {t: m.describe() for t, m in self._plan.modifiers.items()}

    @property
    def hook_record(self) -> HookRecord:
        """What the newest run's hooks registered, learned and recorded."""
        last = self._last.hooks if self._last is not None else None
        return last if last is not None else HookRecord(facts=self._learned)

    @property
    def events(self) -> list[HookEvent]:
        """What the hooks saw in the newest run, one record per firing."""
        return list(self.hook_record.events)

    @property
    def hook_mechanisms(self) -> dict[str, str]:
        """target -> how its backward hook is implemented (full backward hook or the fallback)."""
        # the fallback applies to every backward hook once one of them clashes with an
        # in-place op (torch does not say which module's output was modified)
        fallback = self._learned.fallback
        return {t: FALLBACK if t in fallback else FULL for t in self._plan.backward_targets()}

    @property
    def hook_seconds(self) -> float:
        """Wall time spent inside our hooks in the newest run (compare with report.duration_s)."""
        return self.hook_record.seconds

    # ---- exports of the newest run (DOT, SVG, HTML page, CSV, JSON) ---------------------
    def to_dot(self, depth: int | None = None, **options: Any) -> str:
        """DOT text of the newest graph, folded to `depth` module levels (None: everything),
        with a "✂ frozen" / "✂ never called" ghost node for each parameter no gradient reached,
        as the widget and the page draw them (the graph alone showed nothing of them)."""
        from ..graph.ghosts import add_ghosts
        from ..render.dot import to_dot

        graph = add_ghosts(self._measured_graph(), self.report.none_reasons)
        return to_dot(graph if depth is None else graph.view(depth), **options)

    def export_svg(self, path: str | Path, depth: int | None = None) -> Path:
        """Write the graph as SVG with the system `dot` (the widget's button needs no binary)."""
        from ..render.dot import DotTimeout, svg_with_dot

        try:
            return _write(path, svg_with_dot(self.to_dot(depth)))
        except DotTimeout as e:
            # which depth folds is the model's own: a Sequential's depth 1 is its full graph
            raise GradExplorerError(f"{e} This graph's views: {_view_sizes(self.graph)}.") from None

    def export_html(self, path: str | Path, title: str | None = None) -> Path:
        """Write one self-contained interactive page of the newest run (graph with pan/zoom,
        tooltips, search and fold levels; chart linked to it; findings), offline over file://."""
        from ..render.page import page_html

        name = title or f"{type(self.model).__name__}: gradient flow"
        hooks = (self.hooks, self.modifiers)
        return _write(path, page_html(self._measured_graph(), self.report, name, hooks))

    def export_csv(self, path: str | Path) -> Path:
        """Write the per-parameter norms table as CSV."""
        from ..report.export import report_csv

        return _write(path, report_csv(self.report))

    def export_json(self, path: str | Path) -> Path:
        """Write the report and the graph (nodes, edges, norms, statuses) as JSON."""
        from ..report.export import report_json

        graph = self._measured_graph()
        return _write(path, report_json(self.report, graph))

    def _measured_graph(self) -> GradGraph:
        """The newest graph, its flow measured everywhere: an export is read at any depth, so
        a newest run that measured one view's flow only (a widget's re-run) runs again in full."""
        if unmeasured(self.graph) != (0, 0):
            self.run()
        return self.graph

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
        """The notebook widget: graph and gradient-norm chart side by side.

        Options (`ExplorerWidget`): `depth` ("auto", "full" or a fold depth, an int >= 0),
        `max_nodes`, `hook_kind`, `chart_mode` ("param" or "module"), `height` (a CSS length;
        an int is pixels), `export_dir`, and `flow`: "view" (a click's re-run
        measures the flow only where the view draws it, a few % of a large model's step; the
        first unfold after it runs once more, in full) or "all" (every edge at every run)."""
        from ..widget.explorer_widget import (
            ExplorerWidget,  # the analysis never imports widget code
        )
        from ..widget.marimo_mirror import in_marimo, marimo_view
        from ..widget.options import check_names

        check_names(options, ExplorerWidget.__init__)
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


def _needs_every_edge(result: Capture) -> bool:
    """Whether a run that measured one view's flow must run again measuring every edge: a
    parameter's gradient is exactly zero or NaN/Inf, or NaN/Inf flowed somewhere. Where the
    zeros or the NaN began is found along every edge (report/diagnose.py); with some unmeasured
    it could be missed, or pinned on a node whose inflow was not measured."""
    if unmeasured(result.graph) == (0, 0):  # the view drew everything (the quickstart's)
        return False
    return _has_bad_flow(result)


def _has_bad_flow(result: Capture) -> bool:
    """A parameter's gradient is exactly zero or NaN/Inf, or NaN/Inf flowed somewhere."""
    bad = ("zero", "nonfinite")
    return (
        any(p.status in bad for p in result.report.params)
        or result.report.nonfinite_origin is not None
        or any(e.status == "nonfinite" for e in result.graph.edges)
    )


def _view_sizes(graph: GradGraph) -> str:
    """The nodes each fold depth draws, in words ("depth 0: 12 nodes, ..., full: 900")."""
    sizes = [f"depth {d}: {drawn_count(graph.view(d).nodes)} nodes" for d in range(graph.max_depth)]
    return ", ".join([*sizes, f"full: {drawn_count(graph.nodes)} nodes"])


def _default_kind(target: str) -> str:
    return "tensor" if "#" in target else DEFAULT_KIND


def _write(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
