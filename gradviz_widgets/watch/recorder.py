"""The hooks of a GradWatch: they read the gradients once per step and hand the numbers on.

A post-accumulate-grad hook on each parameter queues one end-of-backward callback (and, under
DDP, notes which parameters this rank's backward reached). Without an optimizer each backward
is a step, read there (after DDP averaged). With optimizers, each one's step is read as
watch/timing.py says (the gradient given to the optimizer, before clipping changed it in place;
accumulation is one step), parameters are snapshot there and the step post-hook measures the
update. FSDP2: this rank's shard, made whole by the writer's one collective (watch/ranks.py).
On an accelerator nothing here waits for the device (numbers go to pinned memory, non-blocking).
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.autograd import Variable
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ..errors import user_stacklevel
from .arguments import wrapped_optimizer
from .arrivals import Arrivals
from .events import describe, listed
from .flight import Flights, on_host
from .holders import HeldCheck
from .model_hooks import ModelHook
from .params import ParamSet
from .ranks import RankSetup, rank_part
from .ratio import Snapshot
from .rounds import Rounds, as_list
from .steps import assemble
from .timing import StepTiming, stats_reader


class Recorder:
    """Attaches to `model` (and its optimizers) and calls `emit` with params and step records;
    when a step is read: watch/timing.py; several optimizers: watch/rounds.py."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None,
        emit: Callable[[str, Any], None],
        *,
        update_ratio: bool | int = True,
        flights: Flights | None = None,
        ranks: RankSetup | None = None,
        scaler: Any = None,
        start_step: int = 0,
    ) -> None:
        opts: list[torch.optim.Optimizer] = as_list(optimizer)
        self.optimizers = opts
        self.model, self.optimizer, self.emit = model, opts[0] if opts else None, emit
        self.rounds = Rounds(list(opts) or [None], start_step)  # type: ignore[list-item]
        self.ranks = ranks or RankSetup()
        #: ids of the parameters this rank's own backward reached since the last step (DDP)
        checked = self.ranks.checked
        self._used: set[int] | None = set() if self.ranks.mode == "ddp" and checked else None
        self._deferred = False
        fsdp = self.ranks.mode == "fsdp"  # Δp of a shard is not the update: off
        self.update_ratio = bool(update_ratio) and bool(opts) and not fsdp
        #: update ratios are measured at the steps divisible by this (True: every step)
        self.ratio_every = max(int(update_ratio), 1)
        #: which steps get a flight record (watch/flight.py); None: no flight recorder
        self.flights = flights
        if fsdp and flights is not None and flights.active:
            flights.stop("an FSDP2 model's shards cannot be replayed in one process")
        #: which parameters hold NaN/Inf at a step whose gradients turned NaN/Inf (holders.py)
        self.held = HeldCheck()
        if fsdp:
            self.held.off = "which parameters held NaN/Inf was not checked (FSDP2 shards)"
        self._handles: list[Any] = []
        self.step = start_step
        self.enabled = True
        self._queued = False
        #: a backward ran since the last step ended (which step `watch.log_loss` belongs to)
        self.fresh = False
        self._pre: dict[int, tuple | None] = {}
        #: look for gradients no optimizer holds at the next step (first, and after changes)
        self._owners_due = True
        self._snaps = [Snapshot() for _ in range(max(len(opts), 1))]
        self._where: tuple | None = None
        #: optimizers not watched that were seen stepping (each warned about once)
        self._foreign: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        #: a watched optimizer's step is running: an optimizer stepping inside it is its own
        #: part (ZeroRedundancyOptimizer's local optimizer over this rank's shard), not foreign
        self._inside_step = False
        # every parameter by name (frozen ones too), each trainable one hooked: its
        # post-accumulate hook queues the end-of-backward reading (watch/params.py)
        self.watched = ParamSet(model, self._on_accumulated)
        self.params, self.names = self.watched.params, self.watched.names  # shared, in place
        # FSDP2: each rank reads its own shards (no collective; the writer's one all_reduce
        # makes them whole), at the end of backward too, so clipping keeps the pre-clip sums
        reader = stats_reader(self.ranks.world if fsdp else None)
        self.timing = StepTiming(self.params, reader, scaler, compare=fsdp)
        #: without an optimizer: gradients another hook may drop inside backward, read first
        self.arrivals = Arrivals(reader)
        self._publish(first=True)

    # ---- attaching ----------------------------------------------------------------------
    def attach(self) -> None:
        for j, opt in enumerate(self.optimizers):
            pre, post = functools.partial(self._pre_step, j), functools.partial(self._post_step, j)
            self._handles.append(opt.register_step_pre_hook(self._guarded(pre)))
            self._handles.append(opt.register_step_post_hook(self._guarded(post)))
        self.timing.wrap_scaler(self.optimizers, self.rounds.stepped, self._guarded(self._skipped))
        # the model's hook dicts get ModelHooks: a copy of the model (EMA, SWA, torch.save)
        # copies them as inert hooks, never the recorder (watch/model_hooks.py)
        if self.flights is not None and self.flights.active:
            on_forward = ModelHook(self._on_forward)
            self._handles.append(self.model.register_forward_pre_hook(on_forward, with_kwargs=True))
        if not self.optimizers:  # hooks for parameters unfrozen / replaced before a backward
            refresh = ModelHook(self._guarded(self._refresh))
            self._handles.append(self.model.register_forward_pre_hook(refresh))
        else:  # another optimizer stepping these parameters takes steps we do not record
            hook = register_optimizer_step_pre_hook
            self._handles.append(hook(self._guarded(self._foreign_step)))

    def detach(self) -> None:
        """Remove every hook; parameters whose hook dict we created get None back."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.watched.detach()
        self.timing.unwrap_scaler()
        for record in self.rounds.flush():  # rounds some optimizer did not finish
            self.emit("step", record)
        self.enabled = False
        self._pre = {}
        if self.flights is not None:
            self.flights.forget()
        self._reset_snapshots()  # every optimizer's copy of the parameters is freed

    def _publish(self, first: bool = False) -> None:
        """Hand new / changed parameters and their events on; one warning per batch of them."""
        infos, events = self.watched.take()
        if infos:
            self.emit("params", infos)
        if events:
            self.emit("events", events)
            self._owners_due = True
        if events and not first:
            self.timing.forget()
            self._reset_snapshots()  # the snapshot buffers follow the new set of tensors
            warnings.warn(describe(events), stacklevel=user_stacklevel())

    def _guarded(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def hook(*args: Any) -> Any:
            if not self.enabled:
                return None
            try:
                return fn(*args)
            except Exception as e:  # the training loop must go on
                self.enabled = False
                warnings.warn(
                    f"GradWatch stopped recording at step {self.step}: "
                    f"{type(e).__name__}: {e}. Training goes on; the steps recorded "
                    "so far stay readable.",
                    stacklevel=user_stacklevel(),
                )
                return None

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
        if self.enabled and not self.optimizers and Arrivals.shared(p):
            self.arrivals.take(p)
        if self.enabled and not self._queued:
            self._queued = True
            Variable._execution_engine.queue_callback(self._guarded(self._end_backward))

    def _end_backward(self) -> None:
        if self.ranks.world > 1 and not self._deferred:
            # DDP averages the gradients in a callback queued during backward: read after it
            self._deferred = True
            Variable._execution_engine.queue_callback(self._guarded(self._end_backward))
            return
        self._queued = self._deferred = False
        self.fresh = True
        self._inside_step = False  # a step that raised never reached its post hook
        if self.optimizers:  # the numbers of the gradients as backward left them
            self.timing.end_backward()
            return
        self._pre_step(0, None, (), {})
        self._post_step(0, None, (), {})

    def _pre_step(self, j: int, opt: Any, args: tuple, kwargs: dict) -> Any:
        """Optimizer j's step starts: read now, or after the closure's first call."""
        self._check_model()
        self.step = self.rounds.counts[j]
        self.rounds.stepped[j] = True
        self._pre[j] = None
        self._inside_step = True
        read = functools.partial(self._guarded(self._read_point), j)
        wrapped = self.timing.with_closure(args, kwargs, read, self.step)
        if wrapped is None:
            self._read_point(j)
        return wrapped

    def _read_point(self, j: int, skipped: bool = False) -> None:
        only = set(self.rounds.owned(j, self.params)) if len(self.optimizers) > 1 else None
        ids, grads = self.watched.gradients(self.step, only=only)  # catches changes, `lacking`
        self._publish()
        if self._owners_due and self.optimizers:
            self._owners_due = False
            self._warn_unowned(ids)
        owned = self.rounds.owned(j, self.params)
        if len(owned) < len(self.params):  # several optimizers: this one's parameters only
            mine = set(owned)
            keep = [k for k, i in enumerate(ids) if i in mine]
            ids, grads = [ids[k] for k in keep], [grads[k] for k in keep]
        opt = self.optimizers[j] if self.optimizers else None
        reading = self.timing.read(ids, grads, self.step, skipped, opt)
        stats = reading.stats
        if not self.optimizers and not self.ranks.checked:
            ids, stats = self._with_arrivals(ids, stats)
        if self.timing.unknown:  # earlier steps' `clipped` turned out unknown: the record says so
            self.emit("clip_unknown", self.timing.unknown)
            self.timing.unknown = []
        extra = None
        if self.ranks.checked:
            extra = rank_part(self.ranks, self._used, self.params, ids, grads)
        host = self._host_stats(stats)  # None: on a device, not read this step
        if self.flights is not None:  # before the update: the pre-update weights
            lacking = self.watched.lacking
            got = set(ids)
            without = [i for i in owned if i not in got] if lacking else []
            trainable = self.watched.trainable
            missing = [i for i in without if trainable[i]]  # this optimizer's, not another's
            seen = stats if host is None else host
            scale = float(reading.scale) if skipped and reading.scale is not None else None
            self.flights.check(self.step, seen, bool(missing), ids, missing, self.names, scale)
        scan, made = self._unmoved(j), reading.made
        held = self.held.check(self.step, host, ids, self.params, self.names, scan, made)
        due = bool(ids) and not skipped and self.update_ratio and self.step % self.ratio_every == 0
        if due:
            self._snaps[j].take(ids, [self.params[i] for i in ids])
        plain = reading.scale is None and reading.clipped is False and reading.skipped is False
        info = None if plain else (reading.skipped, reading.scale, reading.clipped)
        self._pre[j] = (ids, stats, due, extra, info, held)

    def _with_arrivals(self, ids: list[int], stats: Any) -> tuple[list[int], Any]:
        """The gradients a hook took away inside backward (an optimizer step in backward),
        as read when they arrived (watch/arrivals.py): those parameters did get one."""
        found, stats = self.arrivals.merged(ids, stats, self.params)
        if len(found) > len(ids):
            self.watched.arrived(found)
        return found, stats

    def _unmoved(self, j: int) -> list[int] | None:
        """Slots no optimizer updated yet in optimizer j's round (None: all of them, one
        optimizer): a weight another optimizer just made NaN did not hold NaN at the start."""
        if len(self.optimizers) < 2:
            return None
        counts = self.rounds.counts
        return [
            i
            for k in range(len(self.optimizers))
            if counts[k] <= counts[j]
            for i in self.rounds.owned(k, self.params)
        ]

    def _host_stats(self, stats: Any) -> Any:
        """The step's statistics on the host when they are there at no cost (the CPU) or are
        read anyway (the flight recorder's `sync_check`); else None."""
        if self.flights is not None:
            return self.flights.host_stats(stats)
        return on_host(stats, read_device=False)

    def _warn_unowned(self, ids: Sequence[int]) -> None:
        """Say when parameters get a gradient that no watched optimizer applies (unfrozen
        without `add_param_group`, or left out of the optimizer): their rows show the
        gradient, but they do not train, which nothing else in the record says."""
        held = {id(p) for o in self.optimizers for g in o.param_groups for p in g["params"]}
        lost = [self.names[i] for i in ids if id(self.params[i]) not in held]
        if lost:
            warnings.warn(
                f"GradWatch: {len(lost)} parameter(s) get a gradient at step {self.step} but "
                f"no watched optimizer holds them ({listed(lost)}): they are not trained (update "
                "ratio 0). Add them with optimizer.add_param_group({'params': [...]}), or pass "
                "the optimizer that holds them to GradWatch(optimizer=...).",
                stacklevel=user_stacklevel(),
            )

    def _foreign_step(self, opt: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        """Warn, once per optimizer, when one that is not watched steps watched parameters (a
        new optimizer for a second phase of training): its steps are not recorded, and the
        record would otherwise just stop at the last step of the watched one."""
        if self._inside_step or any(opt is o for o in self.optimizers) or opt in self._foreign:
            return
        if any(wrapped_optimizer(opt) is o for o in self.optimizers):
            return  # a wrapper of a watched one (SAM): its base optimizer's step is recorded
        self._foreign.add(opt)
        mine = {id(p) for p in self.params}
        held = [p for g in opt.param_groups for p in g["params"] if id(p) in mine]
        if not held:
            return  # another model's optimizer (a GAN's other half): none of our business
        names = [self.names[i] for i, p in enumerate(self.params) if any(p is h for h in held)]
        warnings.warn(
            f"GradWatch: an optimizer it does not watch ({type(opt).__name__}) steps "
            f"{len(names)} watched parameter(s) ({listed(names)}) "
            f"{f'after step {self.step - 1}' if self.step > 0 else 'before any recorded step'}; "
            "its steps are NOT recorded (GradWatch records the optimizer(s) it was given). "
            "To record them: watch.close(), then GradWatch(model, optimizer=<this optimizer>, "
            f"path=<the same folder>, start_step={self.step}).",
            stacklevel=user_stacklevel(),
        )

    def _skipped(self, j: int) -> None:
        """A step the GradScaler skipped (Inf/NaN): recorded from the gradients it refused."""
        self._check_model()
        self.step = self.rounds.counts[j]
        self._read_point(j, skipped=True)
        self._post_step(j, None, (), {})

    def _post_step(self, j: int, opt: Any, args: tuple, kwargs: dict) -> None:
        self._inside_step = False
        if self.flights is not None:  # calls inside the step after its reading (LBFGS's
            self.flights.step_done()  # closure again) are not the next step's
        pre = self._pre.pop(j, None)
        if pre is None:
            return
        ids, stats, due, extra, info, held = pre
        dnorm = pnorm = None
        if due:
            dnorm, pnorm = self._snaps[j].measure([self.params[i] for i in ids])
        record = assemble(self.rounds.counts[j], ids, stats, dnorm, pnorm, extra)
        record.info, record.held = info, held
        for done in self.rounds.add(j, record):
            self.emit("step", done)
        self.step = self.rounds.done
        self.fresh = False

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
                stacklevel=user_stacklevel(),
            )
            self._reset_snapshots()
        self._where = where

    def _reset_snapshots(self) -> None:
        for snap in self._snaps:
            snap.reset()
