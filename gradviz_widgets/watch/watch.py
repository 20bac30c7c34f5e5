"""GradWatch: record the gradients of every training step, durably, cheaply, and watch them live."""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import GradExplorerError, user_stacklevel
from ..vocabulary import Thresholds
from .anomalies import SPIKE, Anomaly, in_order, replay
from .arguments import check_arguments, warn_idle_optimizers
from .baselines import SpikeRule, check_spikes
from .flight import Flights
from .flight_book import FlightBook
from .history import Overview, history_frame
from .ranks import Exchange, rank_setup, release
from .recorded import WATCHED as _WATCHED
from .recorded import HistoryViews, RecordedRun
from .runs import RunInfo, run_name, runs_root, start_run
from .spikes import Spike, open_spike
from .steptable import StepRow
from .store import MemoryStore, SQLiteStore

if TYPE_CHECKING:
    import pandas as pd


class GradWatch(HistoryViews):
    """Records per-parameter gradient statistics at every optimizer step (or every backward
    when no optimizer is given). Each watch is one run with a folder of its own,
    `path/<run_id>/` (`path`: a temporary folder when omitted); a folder reused for another
    run is never merged into: `GradWatch.open(path)` reads the latest run, `.runs` lists them.

    `optimizer`: a torch.optim.Optimizer, a list/tuple of them, or None. A wrapper holding the
    real optimizer in `.optimizer` (lightning's LightningOptimizer, accelerate's
    AcceleratedOptimizer) is unwrapped: the hooks go on the inner torch optimizer, whose step()
    is the one that runs. Wrong arguments raise GradExplorerError before anything is created.

    `update_ratio`: ‖Δp‖/‖p‖ (exact) at the steps divisible by N, NaN between; the default 10
    keeps its cost (a copy of the parameters and three passes over them per measured step, ~5%
    of a CPU ResNet-50 step) under 1%. True: every step; False: never (docs/watch.md, "Cost").

    `flight_recorder`: each anomaly's step (a parameter's first step of a kind) keeps its
    batch, RNG states and pre-update weights for `anomaly.explore()` (a norm: also the first step above it; False:
    off), within `flight_budget_mb` (default: 512 MB or three copies of the model's state,
    whichever is larger; docs/watch.md, "Flight recorder and anomaly.explore()").

    `start_step`: the number of the first recorded step (a resumed run's global step).

    `spikes`: True (default `SpikeRule()`), a `SpikeRule(window=, factor=, ...)` or False:
    values that leave their rolling baseline (gradient norms and update ratios per parameter
    and module, the loss of `log_loss`) are `watch.spikes`, ranked by who moved first
    (docs/watch.md, "Spikes").

    Under torchrun (DDP, FSDP2) every rank creates its own GradWatch on the same `path` and
    writes `path/<run_id>/rank<r>/` (rank 0 picks the id; one broadcast at construction);
    `ranks=None` (default) adds one all_reduce per step, on the writer
    thread, that compares the ranks (FSDP2: makes the norms whole); `ranks=False`: none
    (docs/distributed.md, "GradWatch across ranks").

    Example:
        >>> from gradviz_widgets.examples import dead_branch_example
        >>> net, x, y = dead_branch_example()
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> watch = GradWatch(net, optimizer=opt)
        >>> for _ in range(3):
        ...     opt.zero_grad(); nn.functional.cross_entropy(net(x), y).backward(); opt.step()
        >>> h = watch.history()
        >>> len(h), int(h.step.max()), h[h.param == "gate.weight"].status.iloc[0]
        (24, 2, 'zero')
        >>> watch.close()
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
        path: str | Path | None = None,
        *,
        scaler: torch.amp.GradScaler | None = None,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        thresholds: Thresholds | None = None,
        update_ratio: bool | int = 10,
        flight_recorder: bool | float = True,
        flight_budget_mb: float | None = None,
        sync_check: bool | None = None,
        tensorboard: Any = False,
        flush_s: float = 0.5,
        ranks: bool | None = None,
        rank_timeout_s: float = 60.0,
        start_step: int = 0,
        spikes: bool | SpikeRule = True,
    ) -> None:
        options = dict(locals())  # every argument, checked before anything is created
        args = check_arguments(model, optimizer, path, options)
        self.thresholds, self.loss_fn = args.thresholds, loss_fn
        #: the first step's number (`steps` counts on from it)
        self.start_step = start_step
        existed = args.path is not None and Path(args.path).exists()
        self._ranks = self._start_run(args.path, model, ranks, rank_timeout_s)
        inner = self._inner
        self._optimizers = args.optimizers
        if self._ranks.mode == "fsdp" and not args.optimizers:
            warnings.warn(
                "GradWatch on an FSDP2 model records at optimizer.step(): pass optimizer=",
                stacklevel=2,
            )
        self.closed = False
        self._model: nn.Module | None = model
        _close_previous(model)
        try:
            self._begin(inner, args.optimizers, options)
        except BaseException:  # nothing half made stays behind: no thread, no folder
            self._abandon(existed)
            raise
        _WATCHED[model] = self

    def _begin(self, inner: nn.Module, optimizers: Any, options: dict[str, Any]) -> None:
        """The writer thread, the flight recorder and the recorder's hooks."""
        from .recorder import Recorder

        exchange = Exchange(self._ranks) if self._ranks.checked else None
        #: how spikes are found (None: spikes=False)
        self.spike_rule = check_spikes(options["spikes"])
        self._writer = self._make_writer(options["flush_s"], exchange)
        self._writer.store.set_meta(self._meta(inner))
        self._add_tensorboard(options["tensorboard"])
        self._writer.start()
        flights = self._flight_recorder(
            inner, options["flight_recorder"], options["flight_budget_mb"], options["sync_check"]
        )
        self._recorder = Recorder(
            inner,
            optimizers,
            self._writer.put,
            update_ratio=options["update_ratio"],
            flights=flights,
            ranks=self._ranks,
            scaler=options["scaler"],
            start_step=options["start_step"],
        )
        warn_idle_optimizers(self._recorder.watched.trainable_params(), optimizers)
        self._writer.listeners.append(_rounds_note(self._recorder.rounds))
        self._recorder.attach()

    def _abandon(self, existed: bool) -> None:
        """A construction that failed half way: stop what started, remove the run's folder."""
        self.closed = True
        recorder = getattr(self, "_recorder", None)
        if recorder is not None:
            recorder.detach()
        writer = getattr(self, "_writer", None)
        if writer is not None and writer.is_alive():
            writer.stop()
        elif writer is not None:
            writer.store.close()
        release(self._ranks, writer_done=writer is None or not writer.is_alive())
        shutil.rmtree(self.rank_path, ignore_errors=True)  # this run's own, fresh folder
        for folder in (self.run_path, self.path):
            if folder == self.path and existed:
                break
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty

    def _start_run(self, path: Path | None, model: nn.Module, ranks: Any, timeout: float) -> Any:
        """The ranks, and this run's id and folders (no folder is created here)."""
        self._inner, setup = rank_setup(model, ranks, timeout)
        #: the folder passed (a temporary one when omitted; the folder holding it when it is
        #: an earlier run's): each run records into a folder of its own inside it, `run_path`
        self.path = (
            runs_root(path, say=setup.rank == 0)
            if path
            else Path(tempfile.mkdtemp(prefix="gradwatch-"))
        )
        #: this process's rank and the world size (0 and 1 without torch.distributed)
        self.rank, self.world = setup.rank, setup.world
        #: this run's id (the same on every rank) and folder, `path/<run_id>`
        self.run_id = start_run(self.path, setup)
        self.run_path = self.path / self.run_id
        #: what titles say: `exp1/run-...`, never an absolute path
        self.name = run_name(self.run_path)
        #: where this process writes: `run_path`, or `run_path/rank<r>` under torchrun
        self.rank_path = setup.directory(self.run_path)
        return setup

    def _make_writer(self, flush_s: float, exchange: Exchange | None) -> Any:
        from .writer import Writer

        store = self._open_store()
        return Writer(
            store, self.thresholds, flush_s=flush_s, exchange=exchange, spikes=self.spike_rule
        )

    def _add_tensorboard(self, tensorboard: Any) -> None:
        if tensorboard:
            from .tb import TensorBoardSink

            self._writer.listeners.append(TensorBoardSink(tensorboard, self.rank_path))

    def _meta(self, inner: nn.Module) -> dict[str, str]:
        return {
            **self._ranks.meta(),
            "run": self.run_id,
            "thresholds": json.dumps([self.thresholds.vanishing, self.thresholds.exploding]),
            "model": type(inner).__name__,
            "started": str(time.time()),
            # the writer adds "ended" when the watch closes: a record without it did not close
            # (still running, or the process was killed, crashed or lost its disk)
            "end_marked": "1",
            "optimizer": ", ".join(type(o).__name__ for o in self._optimizers),
        }

    def _flight_recorder(
        self, inner: nn.Module, trigger: bool | float, budget_mb: float | None, sync: Any
    ) -> Flights:
        #: the run's flight records by step, on disk beside watch.sqlite (watch/flight_book.py)
        self._flights = FlightBook(
            [self.rank_path] if isinstance(self._writer.store, SQLiteStore) else None
        )
        return Flights(
            inner,
            trigger,
            self.thresholds,
            sync_check=_sync_default(inner, sync),
            budget_mb=budget_mb,
            keep=self._flights.keep,
            spikes=self.spike_rule,
            rank=self.rank,
        )

    def _open_store(self) -> Any:
        try:
            return SQLiteStore(self.rank_path)
        except Exception as e:
            warnings.warn(
                f"GradWatch cannot write to {self.rank_path} ({type(e).__name__}: {e}); it "
                "keeps this run in memory instead, and training goes on",
                stacklevel=user_stacklevel(),
            )
            self.store_error = f"{type(e).__name__}: {e}"
            return MemoryStore()

    # ---- reading ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, run: str | RunInfo | None = None) -> RecordedRun:
        """A finished (or crashed, or still running) run's record, every rank's; no model
        needed. `path`: the folder passed to GradWatch (its latest run; `run=<id>` for
        another, `.runs` lists them), a run's folder, or an earlier version's record."""
        return RecordedRun(path, run)

    @property
    def steps(self) -> int:
        """The next step's number: `start_step` + the steps recorded so far (the count alone:
        `watch.steps - watch.start_step`)."""
        return self._recorder.step

    @property
    def store_error(self) -> str | None:
        """Why the record is not (or no longer) on disk: the folder could not be written at the
        start, or the writer's store failed later (None: it is on disk)."""
        later = self._writer.store_error if hasattr(self, "_writer") else None
        return later or getattr(self, "_store_error", None)

    @store_error.setter
    def store_error(self, value: str | None) -> None:
        self._store_error = value

    def history(
        self, params: Sequence[str] | None = None, start: int | None = None, stop: int | None = None
    ) -> pd.DataFrame:
        """One row per (step, parameter), columns history.COLUMNS (this process's rows; every
        rank's: `GradWatch.open(path)`); waits for the steps recorded so far to be written."""
        rows = self.step_rows()  # waits for the steps so far
        store, w = self._reader(), self._writer
        frame = (list(w.params), store.chunks(), store.exact(), params, start, stop)
        partly = store.partly_skipped()
        return history_frame(
            *frame, self._ranks.rank, step_rows=rows, events=list(w.events), partly=partly
        )

    def step_rows(self, rank: int | None = None) -> list[StepRow]:
        """The steps with something to say (GradScaler skipped, loss scale, clipped: the
        record's `steps` table, watch/steptable.py) recorded so far, this process's."""
        self._writer.sync()
        return self._reader().step_rows()

    def _reader(self) -> Any:
        """Reads go through their own read-only connection (the writer thread owns its own)."""
        store = self._writer.store
        if not isinstance(store, SQLiteStore):
            return store
        if getattr(self, "_read_store", None) is None:
            self._read_store = SQLiteStore(self.rank_path, readonly=True)
        return self._read_store

    @property
    def anomalies(self) -> list[Anomaly]:
        """First steps where parameters turned nonfinite / exploding / zero / none / vanishing,
        or differed across ranks ("rank_divergence")."""
        self._writer.sync()
        _, rows, _ = self._writer.snapshot()
        return in_order([Anomaly.from_row(row, self._flights.get, self._explore) for row in rows])

    def _all_events(self) -> list:
        return self._writer.synced_events()

    def log_loss(self, loss: Any, step: int | None = None) -> None:
        """The loss of a step, for spike detection and a NaN/Inf loss's anomaly (no host sync:
        a CUDA loss is copied without blocking and read by the writer thread). Call it after
        `loss.backward()`, before or after `optimizer.step()`; several calls for one step
        (accumulation) count as their mean. `step`: the step it belongs to, when called
        elsewhere."""
        if self.closed:
            return
        rec = self._recorder
        where = step if step is not None else (rec.step if rec.fresh else rec.step - 1)
        if isinstance(loss, torch.Tensor):
            value = loss.detach().reshape(-1)[0]
            if value.is_cuda:
                host = torch.empty((), dtype=value.dtype, pin_memory=True)
                host.copy_(value, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self._writer.put("loss", (where, (host, event)))
                return
            loss = float(value)
        self._writer.put("loss", (where, float(loss)))

    def _spike_list(self) -> list[Spike]:
        self._writer.sync()
        found = self._writer.spike_list()
        for s in found:
            s._open = self._open_spike
        return found

    def _open_spike(self, how: str, spike: Spike, model: Any, options: dict) -> Any:
        options.setdefault("thresholds", self.thresholds)
        return open_spike(
            how, spike, self._flights, model or self._model, self.loss_fn, self._recorder, options
        )

    def overview(self) -> Overview:
        return self._writer.overview

    def _explore(self, anomaly: Anomaly, model: nn.Module | None, **options: Any) -> Any:
        if anomaly.kind == SPIKE:  # the spike's first recorded step, maybe a later one
            spike = next((s for s in self._spike_list() if s.step == anomaly.step), None)
            if spike is not None:
                return spike.explore(model, **options)
        record = self._flights.get(anomaly.step)
        if record is None:
            raise GradExplorerError(self._flights.explain(anomaly))
        model = model or self._model
        if model is None:
            raise GradExplorerError("this watch was closed; pass the model: anomaly.explore(model)")
        loss_fn = options.pop("loss_fn", self.loss_fn)
        options.setdefault("thresholds", self.thresholds)
        return replay(record, model, loss_fn, self._recorder, **options)

    # ---- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        """Remove every hook and write what is left; closing twice does nothing."""
        self._close()

    def _close(self, crashed: str = "") -> None:
        """`close`; `crashed`: the uncaught exception ending the process (at exit)."""
        if self.closed:
            return
        self.closed = True
        self._recorder.detach()
        self._writer.sync()
        reader = getattr(self, "_read_store", None)
        if reader is not None:  # an open reader would keep the WAL from folding into the file
            reader.close()
            del self._read_store
        self._writer.stop(crashed=crashed)
        for listener in self._writer.listeners:  # the TensorBoard writer the watch made
            getattr(listener, "close", lambda: None)()
        release(self._ranks, writer_done=not self._writer.is_alive())
        if self._model is not None and _WATCHED.get(self._model) is self:
            del _WATCHED[self._model]
        self._model = None

    def __enter__(self) -> GradWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "recording"
        return f"GradWatch({self.run_path}, {self.steps - self.start_step} steps, {state})"


@atexit.register
def _close_at_exit() -> None:
    """Write what each open watch still holds when the interpreter exits without `close()`:
    a script's end, an uncaught exception, Ctrl-C. The writer is a daemon thread (it must never
    keep a finished script alive), so its queue and its last half second of records were lost
    with it: 258 of 300 steps, and the NaN step that ended a crashed run. A script ended by
    an uncaught exception says so in the record (`RunInfo.crashed`): it read as finished."""
    crashed = uncaught()
    for watch in list(_WATCHED.values()):
        try:
            watch._close(crashed)
        except Exception as e:  # noqa: BLE001  (the exit goes on: say what was not written)
            warnings.warn(
                f"GradWatch could not finish {watch.run_path} at exit: {type(e).__name__}: {e}",
                stacklevel=1,
            )


def _close_previous(model: nn.Module) -> None:
    previous = _WATCHED.get(model)
    if previous is not None and not previous.closed:
        warnings.warn(
            f"GradWatch: this model was already watched (recording to {previous.run_path}); that "
            f"watch is closed now, at step {previous.steps}. One watch per model.",
            stacklevel=3,
        )
        previous.close()


def _rounds_note(rounds: Any) -> Callable[[Any, Any], None]:
    """A writer listener (writer thread, after each flush): the steps left out of a run whose
    optimizers could not be paired into rounds go into the run's meta, key "rounds"."""
    said: list[str | None] = [None]

    def write(writer: Any, chunk: Any) -> None:
        note = rounds.note
        if note is not None and note != said[0]:
            said[0] = note
            writer.store.set_meta({"rounds": note})

    return write


def _sync_default(model: nn.Module, sync_check: bool | None) -> bool:
    """On the CPU the check is free; on accelerators it costs one host sync per step."""
    if sync_check is not None:
        return sync_check
    first = next(model.parameters(), None)
    return first is None or first.device.type == "cpu"


def uncaught() -> str:
    """The uncaught exception ending a script ("ValueError: ..."; `sys.last_value`, which the
    interpreter sets when it prints one), "" otherwise; "" in IPython and Jupyter, where an
    error left by an earlier cell does not end the process.

    Example:
        >>> uncaught() if not hasattr(sys, "last_value") else ""
        ''
    """
    ipython = sys.modules.get("IPython")
    if ipython is not None and ipython.get_ipython() is not None:
        return ""
    exc = getattr(sys, "last_value", None)
    if exc is None:
        return ""
    text = str(exc)
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
