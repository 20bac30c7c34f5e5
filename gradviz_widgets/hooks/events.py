"""What hooks saw: HookEvent (frozen, per firing), the pending record filled during a run, and
HookRecord, everything one run's hooks registered and recorded."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from ..stats.tensor import PendingStats, TensorStats
from .clash import HookFacts, InplaceClash


@dataclasses.dataclass(frozen=True)
class HookEvent:
    """One firing of one hook in the newest run.

    `tensors` maps "input" / "output" / "grad_input" / "grad_output" to one TensorStats per
    tensor (None where the gradient is None). `phase` is "forward", "backward", or "recompute"
    (a forward hook firing again during backward, as under torch.utils.checkpoint). `call` is the
    index of the module call the event belongs to (0 for the first call in the run, recomputations
    under checkpointing counted too): a backward event with call k is the gradient of the graph
    that forward call k built, whatever order backward visits the calls in. Tensor hooks count
    their firings.
    """

    target: str
    kind: str
    call: int
    phase: str
    mechanism: str
    tensors: Mapping[str, tuple[TensorStats | None, ...]]
    seconds: float
    modifier: str | None = None
    raw: Mapping[str, tuple[torch.Tensor | None, ...]] | None = None


@dataclasses.dataclass
class Pending:
    target: str
    kind: str
    call: int
    phase: str
    mechanism: str
    tensors: dict[str, list[PendingStats | None]]
    seconds: float = 0.0
    modifier: str | None = None
    raw: dict[str, list[torch.Tensor | None]] | None = None
    queued: bool = False  # in HookManager._pending (fallback events: from their first gradient)


@dataclasses.dataclass(frozen=True)
class HookRecord:
    """What one run's hooks registered and recorded (`Capture.hooks`); the plan is untouched.

    `mechanisms`: backward hook target -> how this run implemented it. `facts`: what the run
    went by plus what it learned (the explorer keeps them for its next run). `clash`: why this
    run used tensor hooks for backward hooks, when a first attempt clashed. `registered`: how
    many hooks it registered on modules, tensors and graph nodes (all removed when it ended).
    """

    events: tuple[HookEvent, ...] = ()
    seconds: float = 0.0
    mechanisms: Mapping[str, str] = dataclasses.field(default_factory=dict)
    facts: HookFacts = dataclasses.field(default_factory=HookFacts)
    clash: InplaceClash | None = None
    registered: int = 0
