"""RunState: what one run builds up, stage by stage (run/stages.py), and its result, Capture."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

import torch
from torch import nn

from ..graph.grad_graph import GradGraph
from ..hooks.events import HookRecord
from ..hooks.modifiers import Modifier
from ..report.grad_report import GradReport
from ..stats.norms import NormBatch
from ..trace.attribution import ScopeTracker
from ..trace.partials import PartialSums
from ..trace.walk import RawGraph
from .inputs import CallArgs
from .model_state import ModelIndex, StandIns
from .settings import RunSettings


class RunHooks(Protocol):
    """What a run needs from its hooks (see hooks.HookRun)."""

    modifiers: Mapping[str, Modifier]
    record: HookRecord

    def attached(self, model: nn.Module, batch: NormBatch) -> contextlib.AbstractContextManager: ...

    def on_graph(self, raw: RawGraph, batch: NormBatch) -> None: ...

    def finish(self, values: list[float]) -> None: ...


@dataclasses.dataclass(frozen=True)
class Capture:
    """The graph and the report of one run, and what its hooks registered and recorded."""

    graph: GradGraph
    report: GradReport
    hooks: HookRecord | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class Subject:
    """What a run runs: `model` names everything (paths, ids, hooks); `runner` is the module
    called (the model, or what a wrapper wraps); `notes` are the report's notes known before
    the run (how a wrapper was seen through)."""

    model: nn.Module
    runner: nn.Module
    sample_input: Any
    device: torch.device
    notes: tuple[str, ...] = ()
    index: ModelIndex | None = None  # the module tree walked once, shared by the reruns


@dataclasses.dataclass(eq=False)
class RunState:
    """One run's working state. `model` names everything (paths, ids, hooks); `runner` is the
    module called (the model, or what a wrapper wraps). Filled in order by the stages
    prepare -> forward -> trace -> backward -> read_back -> report."""

    model: nn.Module
    runner: nn.Module
    settings: RunSettings
    device: torch.device
    call: CallArgs
    stand_ins: StandIns
    target: Any  # the loss target, on the run's device
    tracker: ScopeTracker
    batch: NormBatch
    hooks: RunHooks | None
    started: float
    notes: list[str]  # the report's notes: how the run was made, nothing wrong in it
    index: ModelIndex  # the module tree, walked once (every stage reads it from here)
    #: id(user tensor) -> the run's tensor standing in for it (parameters, sample input)
    replaced: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    # forward
    names: dict[int, tuple[str, str]] = dataclasses.field(default_factory=dict)
    loss: torch.Tensor | None = None
    how: str = ""
    cut_off: bool = False  # a reentrant checkpoint got no input requiring grad
    #: the first op of the forward with a NaN/Inf output (a `probe_nonfinite` run) until the
    #: walk names its node, then that node's id (`nonfinite_at`)
    nonfinite: Any = None
    nonfinite_at: str | None = None
    #: what the run found wrong beyond the gradients' own statuses (diagnose's findings)
    findings: list[str] = dataclasses.field(default_factory=list)
    # trace
    raw: RawGraph | None = None
    #: leaf id -> (pair slot, count slot) of gradients measured on arrival (trace/arrivals.py)
    arrived: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    #: what one module call's consumers sent a producer read elsewhere too (trace/partials.py)
    partials: PartialSums | None = None
    # backward
    grads: dict[str, torch.Tensor | None] = dataclasses.field(default_factory=dict)
    loss_slot: int = 0
    # read back
    values: list[float] = dataclasses.field(default_factory=list)
    leaf_pairs: dict[str, tuple[float, float] | None] = dataclasses.field(default_factory=dict)
    zero_fractions: dict[str, float] = dataclasses.field(default_factory=dict)
