"""GradWatch: record the gradients of every training step, durably, cheaply, and watch them live."""

from __future__ import annotations

import json
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import GradExplorerError
from ..vocabulary import Thresholds
from .anomalies import Anomaly, FlightRecord, replay
from .events import Event
from .history import Overview, history_frame
from .ranks import Exchange, rank_setup, release
from .recorded import WATCHED as _WATCHED
from .recorded import HistoryViews, RecordedRun, no_flight_message
from .store import MemoryStore, SQLiteStore

if TYPE_CHECKING:
    import pandas as pd


class GradWatch(HistoryViews):
    """Records per-parameter gradient statistics at every optimizer step (or every backward
    when no optimizer is given) into `path` (a temporary folder when omitted).

    `update_ratio`: ‖Δp‖/‖p‖ (exact) at the steps divisible by N, NaN between; the default 10
    keeps its cost (a copy of the parameters and three passes over them per measured step, ~5%
    of a CPU ResNet-50 step) under 1%. True: every step; False: never (docs/watch.md, "Cost").

    Under torchrun (DDP, FSDP2) every rank creates its own GradWatch on the same `path` and
    writes `path/rank<r>/`; `ranks=None` (default) adds one all_reduce per step, on the writer
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
        optimizer: torch.optim.Optimizer | None = None,
        path: str | Path | None = None,
        *,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        thresholds: Thresholds | None = None,
        update_ratio: bool | int = 10,
        flight_recorder: bool | float = True,
        sync_check: bool | None = None,
        tensorboard: Any = False,
        flush_s: float = 0.5,
        ranks: bool | None = None,
        rank_timeout_s: float = 60.0,
    ) -> None:
        from .recorder import Recorder
        from .writer import Writer

        if not isinstance(model, nn.Module):
            raise GradExplorerError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.thresholds = thresholds or Thresholds()
        self.loss_fn = loss_fn
        self.path = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="gradwatch-"))
        inner, self._ranks = rank_setup(model, ranks, rank_timeout_s)
        #: this process's rank and the world size (0 and 1 without torch.distributed)
        self.rank, self.world = self._ranks.rank, self._ranks.world
        #: where this process writes: `path`, or `path/rank<r>` under torchrun
        self.rank_path = self._ranks.directory(self.path)
        if self._ranks.mode == "fsdp" and optimizer is None:
            warnings.warn(
                "GradWatch on an FSDP2 model records at optimizer.step(): pass optimizer=",
                stacklevel=2,
            )
        self.closed = False
        self._model: nn.Module | None = model
        self._flights: dict[int, FlightRecord] = {}
        _close_previous(model)
        exchange = Exchange(self._ranks) if self._ranks.group is not None else None
        self._writer = Writer(
            self._open_store(), self.thresholds, flush_s=flush_s, exchange=exchange
        )
        self._writer.store.set_meta(self._meta(inner, optimizer))
        if tensorboard:
            from .tb import TensorBoardSink

            self._writer.listeners.append(TensorBoardSink(tensorboard, self.rank_path))
        self._writer.start()
        self._recorder = Recorder(
            inner,
            optimizer,
            self._writer.put,
            update_ratio=update_ratio,
            flight=flight_recorder,
            sync_check=_sync_default(inner, sync_check),
            on_flight=self._keep_flight,
            ranks=self._ranks,
        )
        self._recorder.attach()
        _WATCHED[model] = self

    def _meta(self, inner: nn.Module, optimizer: Any) -> dict[str, str]:
        return {
            **self._ranks.meta(),
            "thresholds": json.dumps([self.thresholds.vanishing, self.thresholds.exploding]),
            "model": type(inner).__name__,
            "started": str(time.time()),
            "optimizer": type(optimizer).__name__ if optimizer else "",
        }

    def _open_store(self) -> Any:
        try:
            return SQLiteStore(self.rank_path)
        except Exception as e:
            warnings.warn(
                f"GradWatch cannot write to {self.rank_path} ({type(e).__name__}: {e}); it "
                "keeps this run in memory instead, and training goes on",
                stacklevel=3,
            )
            self.store_error = f"{type(e).__name__}: {e}"
            return MemoryStore()

    def _keep_flight(self, record: FlightRecord) -> None:
        self._flights[record.step] = record
        if isinstance(self._writer.store, SQLiteStore):
            try:
                record.save(self.rank_path)
            except Exception as e:
                warnings.warn(
                    f"GradWatch could not save the flight record of step {record.step}: {e}",
                    stacklevel=2,
                )

    # ---- reading ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> RecordedRun:
        """A finished (or crashed, or still running) run's record, every rank's; no model
        needed."""
        return RecordedRun(path)

    @property
    def steps(self) -> int:
        """How many steps were recorded so far."""
        return self._recorder.step

    @property
    def store_error(self) -> str | None:
        return (
            self._writer.store_error
            if hasattr(self, "_writer")
            else getattr(self, "_store_error", None)
        )

    @store_error.setter
    def store_error(self, value: str | None) -> None:
        self._store_error = value

    def history(
        self, params: Sequence[str] | None = None, start: int | None = None, stop: int | None = None
    ) -> pd.DataFrame:
        """One row per (step, parameter): step, rank, param, module, norm, max_abs,
        zero_fraction, status, reason, update_ratio (this process's rows; every rank's:
        `GradWatch.open(path)`). Waits for the steps recorded so far to be written."""
        self._writer.sync()
        store = self._reader()
        return history_frame(
            list(self._writer.params),
            store.chunks(),
            store.exact(),
            params,
            start,
            stop,
            self._ranks.rank,
            list(self._writer.events),
        )

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
        return [Anomaly.from_row(row, self._flights.get, self._explore) for row in rows]

    @property
    def events(self) -> list[Event]:
        """Changes to the parameters, in order: Event(step, param, kind), kind one of frozen,
        unfrozen, replaced, added, removed (the ones frozen at the start: "frozen" at step 0)."""
        self._writer.sync()
        return list(self._writer.events)

    def overview(self) -> Overview:
        return self._writer.overview

    def _explore(self, anomaly: Anomaly, model: nn.Module | None, **options: Any) -> Any:
        record = self._flights.get(anomaly.step)
        if record is None:
            raise GradExplorerError(no_flight_message(anomaly, sorted(self._flights)))
        model = model or self._model
        if model is None:
            raise GradExplorerError("this watch was closed; pass the model: anomaly.explore(model)")
        loss_fn = options.pop("loss_fn", self.loss_fn)
        return replay(record, model, loss_fn, self._recorder, **options)

    # ---- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        """Remove every hook and write what is left; closing twice does nothing."""
        if self.closed:
            return
        self.closed = True
        self._recorder.detach()
        self._writer.sync()
        reader = getattr(self, "_read_store", None)
        if reader is not None:  # an open reader would keep the WAL from folding into the file
            reader.close()
            del self._read_store
        self._writer.stop()
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
        return f"GradWatch({self.path}, {self.steps} steps, {state})"


def _close_previous(model: nn.Module) -> None:
    previous = _WATCHED.get(model)
    if previous is not None and not previous.closed:
        warnings.warn(
            f"GradWatch: this model was already watched (recording to {previous.path}); that "
            f"watch is closed now, at step {previous.steps}. One watch per model.",
            stacklevel=3,
        )
        previous.close()


def _sync_default(model: nn.Module, sync_check: bool | None) -> bool:
    """On the CPU the check is free; on accelerators it costs one host sync per step."""
    if sync_check is not None:
        return sync_check
    first = next(model.parameters(), None)
    return first is None or first.device.type == "cpu"
