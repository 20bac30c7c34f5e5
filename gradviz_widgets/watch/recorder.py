"""The hooks of a GradWatch: they read the gradients once per step and hand the numbers on.

With an optimizer: `register_step_pre_hook` reads the gradients the optimizer is about to apply
(so gradient accumulation over several backward calls is one step) and snapshots the parameters;
`register_step_post_hook` measures the update. Without one: a post-accumulate-grad hook on each
parameter queues one end-of-backward callback, so each backward is one step and the numbers are
those of `p.grad` after accumulation.

Across ranks (watch/ranks.py): under DDP a post-accumulate-grad hook also notes which parameters
this rank's own backward reached, and without an optimizer the step is read after DDP has
averaged the gradients; under FSDP2 the numbers are those of this rank's shard, made whole by
the writer thread's one collective.

On an accelerator nothing here waits for the device: the per-step numbers are reduced on the
device into one small tensor and copied to pinned host memory without blocking; the writer
thread reads it once the copy's event completes. On the CPU the numbers are plain floats at once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.autograd import Variable

from .events import describe
from .flight import Flights
from .params import ParamSet
from .ranks import RankSetup, local_part
from .ratio import Snapshot
from .reduce import by_device, grad_stats
from .steps import assemble


class Recorder:
    """Attaches to `model` (and `optimizer`) and calls `emit` with params and step records."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        emit: Callable[[str, Any], None],
        *,
        update_ratio: bool | int = True,
        flights: Flights | None = None,
        ranks: RankSetup | None = None,
    ) -> None:
        self.model, self.optimizer, self.emit = model, optimizer, emit
        self.ranks = ranks or RankSetup()
        #: ids of the parameters this rank's own backward reached since the last step (DDP)
        checked = self.ranks.group is not None
        self._used: set[int] | None = set() if self.ranks.mode == "ddp" and checked else None
        self._deferred = False
        fsdp = self.ranks.mode == "fsdp"  # Δp of a shard is not the update: off
        self.update_ratio = bool(update_ratio) and optimizer is not None and not fsdp
        #: update ratios are measured at the steps divisible by this (True: every step)
        self.ratio_every = max(int(update_ratio), 1)
        #: which steps get a flight record (watch/flight.py); None: no flight recorder
        self.flights = flights
        if fsdp and flights is not None and flights.active:
            flights.stop("an FSDP2 model's shards cannot be replayed in one process")
        self._handles: list[Any] = []
        self.step = 0
        self.enabled = True
        self._queued = False
        self._pre: tuple[list[int], Any, Any, Any] | None = None
        self._snap = Snapshot()
        self._where: tuple | None = None
        # every parameter by name (frozen ones too); hooked where the step comes from them
        hooked = optimizer is None or self._used is not None
        self.watched = ParamSet(model, self._on_accumulated if hooked else None)
        self.params, self.names = self.watched.params, self.watched.names
        self._publish(first=True)

    # ---- attaching ----------------------------------------------------------------------
    def attach(self) -> None:
        if self.optimizer is not None:
            self._handles.append(
                self.optimizer.register_step_pre_hook(self._guarded(self._pre_step))
            )
            self._handles.append(
                self.optimizer.register_step_post_hook(self._guarded(self._post_step))
            )
        if self.flights is not None and self.flights.active:
            self._handles.append(
                self.model.register_forward_pre_hook(self._on_forward, with_kwargs=True)
            )
        if self.optimizer is None:  # hooks for parameters unfrozen / replaced before a backward
            self._handles.append(self.model.register_forward_pre_hook(self._guarded(self._refresh)))

    def detach(self) -> None:
        """Remove every hook; parameters whose hook dict we created get None back."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.watched.detach()
        self.enabled = False
        self._pre = None
        if self.flights is not None:
            self.flights.forget()
        self._snap.reset()

    def _publish(self, first: bool = False) -> None:
        """Hand new / changed parameters and their events on; one warning per batch of them."""
        infos, events = self.watched.take()
        if infos:
            self.emit("params", infos)
        if events:
            self.emit("events", events)
        if events and not first:
            self._snap.reset()  # the snapshot buffers follow the new set of tensors
            warnings.warn(describe(events), stacklevel=3)

    def _guarded(self, fn: Callable[..., None]) -> Callable[..., None]:
        def hook(*args: Any) -> None:
            if not self.enabled:
                return
            try:
                fn(*args)
            except Exception as e:  # the training loop must go on
                self.enabled = False
                warnings.warn(
                    f"GradWatch stopped recording at step {self.step}: "
                    f"{type(e).__name__}: {e}. Training goes on; the steps recorded "
                    "so far stay readable.",
                    stacklevel=2,
                )

        return hook

    # ---- hooks --------------------------------------------------------------------------
    def _on_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        # a reference only: the batch is copied if (and when) the flight recorder fires
        if self.enabled and self.flights is not None and self.flights.active:
            self.flights.seen_call(args, kwargs)

    def _refresh(self, *args: Any) -> None:
        self.watched.refresh(self.step)
        self._publish()

    def _on_accumulated(self, p: torch.Tensor) -> None:
        if self._used is not None:
            self._used.add(id(p))
        if self.enabled and not self._queued and self.optimizer is None:
            self._queued = True
            Variable._execution_engine.queue_callback(self._guarded(self._end_backward))

    def _end_backward(self) -> None:
        if self.ranks.world > 1 and not self._deferred:
            # DDP averages the gradients in a callback queued during backward: read after it
            self._deferred = True
            Variable._execution_engine.queue_callback(self._guarded(self._end_backward))
            return
        self._queued = self._deferred = False
        self._pre_step(None, (), {})
        self._post_step(None, (), {})

    def _pre_step(self, opt: Any, args: tuple, kwargs: dict) -> None:
        ids, grads = self.watched.gradients(self.step)
        self._check_model()
        extra = self._rank_part(ids, grads) if self.ranks.group is not None else None
        if self.ranks.mode == "fsdp":
            grads = [local_part(g, self.ranks.world)[0].detach() for g in grads]
        stats = by_device(grad_stats, grads, 3)
        if self.flights is not None:  # before the update: the pre-update weights
            self.flights.check(self.step, stats, self.watched.lacking)
        due = bool(ids) and self.update_ratio and self.step % self.ratio_every == 0
        if due:
            self._snap.take(ids, [self.params[i] for i in ids])
        self._pre = (ids, stats, due, extra)

    def _rank_part(self, ids: list[int], grads: list[torch.Tensor]) -> tuple:
        """Which parameters this rank's own backward reached; FSDP2: the weights of the shards."""
        own = np.zeros(len(self.params), dtype=bool)
        if self._used is not None:
            own[[i for i, p in enumerate(self.params) if id(p) in self._used]] = True
            self._used.clear()
        else:
            own[ids] = True
        weights = None
        if self.ranks.mode == "fsdp":
            weights = np.array([local_part(g, self.ranks.world)[1] for g in grads])
        return own, weights

    def _post_step(self, opt: Any, args: tuple, kwargs: dict) -> None:
        if self._pre is None:
            return
        ids, stats, due, extra = self._pre
        self._pre = None
        dnorm = pnorm = None
        if due:
            dnorm, pnorm = self._snap.measure([self.params[i] for i in ids])
        self.emit("step", assemble(self.step, ids, stats, dnorm, pnorm, extra))
        self.step += 1

    # ---- helpers ------------------------------------------------------------------------
    def _check_model(self) -> None:
        """Changed parameters are handed on; a move to another device or dtype resets buffers."""
        self._publish()
        first = self.watched.first()
        if first is None:
            return
        where = (first.device, first.dtype)
        if self._where is not None and where != self._where:
            warnings.warn(
                f"GradWatch: the model moved from {self._where[0]} ({self._where[1]}) "
                f"to {where[0]} ({where[1]}) at step {self.step}; recording goes on "
                "there",
                stacklevel=3,
            )
            self._snap.reset()
        self._where = where
