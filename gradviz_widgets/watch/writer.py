"""The writer thread: turns step records into statuses, anomalies and stored chunks.

It owns everything slow: waiting for device copies, `stats.classify` per parameter, the live
overview, compression and SQLite writes (one transaction per flush, at least every
`flush_s` seconds), TensorBoard, and waking the live widget. The training thread only puts
records on a queue.
"""

from __future__ import annotations

import collections
import math
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..vocabulary import STATUSES, Thresholds, classify_codes
from .anomalies import NONFINITE_LOSS, SPIKE, Tracker
from .baselines import SpikeRule
from .events import Event, quiet
from .history import Overview
from .holders import Held, held_detail
from .ranks import Exchange
from .spikes import Spike, SpikeFinder
from .steps import StepRecord, step_info
from .steptable import StepRow
from .store import Chunk, MemoryStore, ParamInfo, SQLiteStore

_NONE = STATUSES.index("none")


class Writer(threading.Thread):
    """Background thread between the recorder and the store."""

    def __init__(
        self,
        store: Any,
        thresholds: Thresholds,
        *,
        flush_s: float = 0.5,
        listeners: list[Callable[[Writer, Chunk | None], None]] | None = None,
        exchange: Exchange | None = None,
        spikes: SpikeRule | None = None,
    ) -> None:
        super().__init__(name="GradWatch-writer", daemon=True)
        self.store = store
        self.thresholds = thresholds
        self.flush_s = flush_s
        self._items: collections.deque = collections.deque()
        self._wake = threading.Event()
        self.poll_s = min(0.1, flush_s)
        self.params: list[ParamInfo] = []
        self.tracker = Tracker()
        self.anomaly_rows: list[tuple[int, str, Any]] = []
        #: changes to the parameter set (watch/events.py), in order
        self.events: list[Event] = []
        self._quiet: np.ndarray | None = None  # frozen or removed: their None is no anomaly
        self.exchange = exchange
        self.overview = Overview()
        self.listeners = listeners if listeners is not None else []
        self.last_step = -1
        self.steps_written = 0
        self.store_error: str | None = None
        self._rows: list[tuple[StepRecord, np.ndarray, np.ndarray]] = []
        self._new_anomalies: list[tuple[int, str, Any]] = []
        self._last_flush = time.monotonic()
        self._lock = threading.RLock()
        #: spike events (watch/spikes.py); None: spikes=False
        self.spikes = SpikeFinder(spikes) if spikes is not None else None
        self._new_spikes: list[Spike] = []
        self._losses: list[tuple[int, Any]] = []
        #: a NaN/Inf loss was said (its first step only, as each parameter's first NaN/Inf)
        self._loss_said = False
        #: (first, last) steps whose `clipped` is unknown (watch/timing.py's `.data` probe)
        self._unknown: list[tuple[int, int]] = []
        #: meta "crashed": the uncaught exception that ended the process (`stop`)
        self._crashed: dict[str, str] = {}

    # ---- called from the training thread ----
    def put(self, kind: str, item: Any) -> None:
        """Queue without waking the thread (a deque append: no lock hand-over per step)."""
        self._items.append((kind, item))

    def sync(self, timeout: float = 30.0) -> None:
        """Wait until everything queued so far is processed and written."""
        if not self.is_alive():
            return
        done = threading.Event()
        self._items.append(("flush", done))
        self._wake.set()
        done.wait(timeout)

    def stop(self, timeout: float = 30.0, crashed: str = "") -> None:
        """Write what is queued and end the thread; `crashed`: the uncaught exception that
        ended the process (the watch closed at exit), kept in the record's meta."""
        if self.is_alive():
            self._items.append(("stop", crashed))
            self._wake.set()
            self.join(timeout)

    # ---- the thread ----
    def run(self) -> None:
        while True:
            self._wake.wait(self.poll_s)
            self._wake.clear()
            stop, waiting, steps = False, [], []
            while self._items:
                kind, item = self._items.popleft()
                if kind == "step" and not item.ready() and not self._must_wait():
                    self._items.appendleft((kind, item))  # its device copy is still running:
                    break  # never block (and hold the GIL) while the training thread launches
                if kind == "step":
                    steps.append(item)
                    continue
                if steps:
                    self._guard(self._add_steps, steps)
                    steps = []
                stop |= kind == "stop"
                if kind == "flush":
                    waiting.append(item)
                else:
                    self._guard(self._handle, kind, item)
            if steps:
                self._guard(self._add_steps, steps)
            self._guard(self._take_losses, stop or bool(waiting))
            if stop:
                self._guard(self._finish_spikes)
            if stop or waiting or time.monotonic() - self._last_flush >= self.flush_s:
                self._guard(self._flush)
            for done in waiting:
                done.set()
            if stop:
                if isinstance(self.store, SQLiteStore) and self.store_error is None:
                    end = {"ended": str(time.time())}
                    self._store_call(self.store.set_meta, {**end, **self._crashed})
                self.store.close()
                return

    def _must_wait(self) -> bool:
        """A flush or stop request is queued: then device copies are waited for."""
        return any(k in ("flush", "stop") for k, _ in list(self._items))

    def _handle(self, kind: str, item: Any) -> None:
        if kind == "stop":
            self._crashed = {"crashed": item} if item else {}
        elif kind == "params":
            self._add_params(item)
        elif kind == "events":
            with self._lock:
                self.events += item
            self._quiet = None
            self._store_call(self.store.add_events, item)
        elif kind == "step":
            self._add_steps([item])
        elif kind == "clip_unknown":  # steps already queued or written: their rows say so
            self._unknown += item
            for lo, hi in item:
                self._store_call(self.store.clip_unknown, lo, hi)
        elif kind == "loss":
            step, value = item
            if isinstance(value, tuple):  # a device copy: read once it is done
                self._losses.append(item)
                return
            self._loss_seen(step, float(value))
            if self.spikes is not None:
                # in step order with the gradients queued around it: handed over only after
                # the drain, it came after every step of the batch, and a batch longer than
                # the event's gap had ended the step's event without its loss
                with self._lock:
                    self.spikes.queue_loss(step, float(value))

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # never take the training down; say it
            warnings.warn(f"GradWatch writer: {type(e).__name__}: {e}", stacklevel=1)

    def _add_params(self, infos: list[ParamInfo]) -> None:
        with self._lock:
            for info in infos:  # a replaced parameter of another shape keeps its id
                if info.id < len(self.params):
                    self.params[info.id] = info
                else:
                    self.params.append(info)
        self._quiet = None
        self._store_call(self.store.add_params, infos)

    def _add_steps(self, records: list[StepRecord]) -> None:
        """Every step queued since the last wake-up at once: a few vectorised calls per batch
        (statuses, anomalies, overview), not per step, so the thread holds the GIL briefly."""
        n, k = len(self.params), len(records)
        cols = np.full((4, k, n), np.nan)  # norm, max_abs, zero_fraction, update_ratio
        moved = np.full((2, k, n), np.nan)  # ‖Δp‖, ‖p‖: the spikes' module update ratios
        status = np.full((k, n), _NONE, dtype=np.uint8)
        numel = np.array([p.numel for p in self.params], dtype=np.float64)
        names = [p.name for p in self.params]
        across: list[tuple[int, str, Any]] = []
        for r, record in enumerate(records):
            values, ids = record.resolve(), record.ids
            if self.exchange is not None:  # one collective per step, in step order
                across += self.exchange.combine(record.step, ids, values, record.extra, names)
            cols[0, r, ids], cols[1, r, ids] = values[:, 0], values[:, 1]
            cols[2, r, ids] = values[:, 2]
            with np.errstate(invalid="ignore", divide="ignore"):
                cols[3, r, ids] = values[:, 3] / values[:, 4]
            moved[0, r, ids], moved[1, r, ids] = values[:, 3], values[:, 4]
            status[r, ids] = 255  # measured: classified below
        measured = status == 255
        with np.errstate(invalid="ignore", divide="ignore"):
            zf = np.where(numel > 0, 1.0 - cols[2] / np.maximum(numel, 1), 0.0)
        cols[2] = np.where(measured, zf, np.nan)
        status[measured] = classify_codes(cols[0][measured], cols[1][measured], self.thresholds)
        steps = np.array([r.step for r in records], dtype=np.int64)
        if self._quiet is None:
            self._quiet = quiet(self.events, names)
        found = _nonfinite_said(
            self.tracker.update_many(steps, status, names, self._quiet), records
        )
        if self.spikes is not None:
            with self._lock:
                ended = self.spikes.add_steps(steps, cols[0], moved[0], moved[1], names)
            across += self._spiked(ended)
        found = sorted(found + across, key=_step_of)
        with self._lock:
            self.anomaly_rows += found
            self.overview.add_many(steps, cols[0], status)
            self.last_step = records[-1].step
        self._new_anomalies += found
        self._rows += [(rec, cols[:, r], status[r]) for r, rec in enumerate(records)]

    def _take_losses(self, wait: bool) -> None:
        """Losses from `watch.log_loss` whose device copy is done (all of them: `wait`)."""
        if not self._losses:
            return
        keep, ended = [], []
        for step, value in self._losses:
            if isinstance(value, tuple):  # (pinned host copy, CUDA event)
                host, event = value
                if not wait and not event.query():
                    keep.append((step, value))
                    continue
                event.synchronize()
                value = float(host)
            self._loss_seen(step, float(value))
            if self.spikes is not None:
                with self._lock:
                    ended += self.spikes.add_loss(step, float(value))
        self._losses = keep
        if self.spikes is not None:
            self._record_rows(self._spiked(ended))

    def _loss_seen(self, step: int, value: float) -> None:
        """A NaN/Inf loss is an anomaly of its own: a loop that skips the batch (a NaN guard
        that zeroes the gradients and never calls `optimizer.step`) leaves no NaN/Inf gradient
        in the record, and a loss averaged with it read NaN without a word."""
        if math.isfinite(value) or self._loss_said:
            return
        self._loss_said = True
        row = {"params": ["loss"], "detail": LOSS_DETAIL.format(value=value)}
        self._record_rows([(step, NONFINITE_LOSS, row)])

    def _finish_spikes(self) -> None:
        if self.spikes is not None:
            with self._lock:
                ended = self.spikes.finish()
            self._record_rows(self._spiked(ended))

    def _spiked(self, ended: list[Spike]) -> list[tuple[int, str, Any]]:
        """Spike anomaly rows: an event's as soon as it opens (the series that spiked at its
        step), replaced by the ranked parameters when it ends (then stored whole)."""
        assert self.spikes is not None
        with self._lock:
            self._new_spikes += ended
            opened, self.spikes.opened = self.spikes.opened, []
            done = {s.step for s in ended}
            self.anomaly_rows = [
                r for r in self.anomaly_rows if not (r[1] == SPIKE and r[0] in done)
            ]
        rows = [(s, SPIKE, p) for s, p in opened if s not in done]
        return rows + [(s.step, SPIKE, list(s.params) or ["loss"]) for s in ended]

    def _record_rows(self, rows: list[tuple[int, str, Any]]) -> None:
        """Anomaly rows found outside a batch of steps (a loss's spike or NaN/Inf, the end)."""
        if rows:
            with self._lock:
                self.anomaly_rows = sorted(self.anomaly_rows + rows, key=_step_of)
            self._new_anomalies += rows

    def spike_list(self) -> list[Spike]:
        """The ended spike events, and the open one as it reads now (not stored yet)."""
        if self.spikes is None:
            return []
        with self._lock:
            open_one = self.spikes.provisional()
            return list(self.spikes.found) + ([open_one] if open_one is not None else [])

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if self._new_spikes:
            with self._lock:
                spikes, self._new_spikes = self._new_spikes, []
            self._store_call(self.store.add_spikes, [(s.step, s.to_json()) for s in spikes])
        if not self._rows and not self._new_anomalies:
            self._notify(None)  # lets a throttled live view catch up
            return
        if self._rows:
            width = max(len(s) for _, _, s in self._rows)
            chunk = Chunk(
                steps=np.array([r.step for r, _, _ in self._rows], dtype=np.int64),
                times=np.array([r.time for r, _, _ in self._rows]),
                **{
                    name: np.stack([_pad(v[k], width, np.nan) for _, v, _ in self._rows])
                    for k, name in enumerate(("norm", "max_abs", "zero_fraction", "update_ratio"))
                },
                status=np.stack([_pad(s, width, _NONE) for _, _, s in self._rows]),
            )
            records = [r for r, _, _ in self._rows]
            partly = [
                (r.step, int(i))
                for r in records
                if r.skipped_ids is not None
                for i in r.skipped_ids
            ]
            steps = self._step_rows(records)
            self._store_call(self.store.write, chunk, self._new_anomalies, steps, partly)
        else:
            chunk = None
        self.steps_written += len(self._rows)
        self._rows, self._new_anomalies = [], []
        self._notify(chunk)

    def _step_rows(self, records: list[StepRecord]) -> list[StepRow]:
        """The `steps` rows of `records`: those with something to say, and those whose
        `clipped` turned out unknown (`clip_unknown`)."""
        rows = []
        for r in records:
            unknown = any(lo <= r.step <= hi for lo, hi in self._unknown)
            if r.info is None and not unknown:
                continue
            skipped, scale, clipped = step_info(r.info)
            rows.append(
                (r.step, int(skipped), scale, None if unknown or clipped is None else int(clipped))
            )
        return rows

    def _notify(self, chunk: Chunk | None) -> None:
        for listener in list(self.listeners):
            try:
                listener(self, chunk)
            except Exception as e:
                self.listeners.remove(listener)
                warnings.warn(
                    f"GradWatch: a live view failed and was detached: {type(e).__name__}: {e}",
                    stacklevel=1,
                )

    def _store_call(self, fn: Callable[..., None], *args: Any) -> None:
        """Store errors (unwritable, full disk) become one warning; recording goes on in memory."""
        try:
            fn(*args)
        except Exception as e:
            if isinstance(self.store, MemoryStore):
                self.store_error = f"{type(e).__name__}: {e}"
                warnings.warn(
                    f"GradWatch stopped keeping history ({self.store_error}); training goes on",
                    stacklevel=1,
                )
                self.store = _Discard()
                return
            self.store_error = f"{type(e).__name__}: {e}"
            warnings.warn(
                f"GradWatch could not write its record ({self.store_error}); it keeps "
                "the rest of this run in memory, and training goes on",
                stacklevel=1,
            )
            old, self.store = self.store, MemoryStore()
            self.store.add_params(list(self.params))
            self.store.add_events(list(self.events))
            try:  # what reached the disk stays readable through the memory copy
                for done in old.chunks():
                    self.store.write(done, [])
                self.store._steps = list(old.step_rows())
                self.store._partly = list(old.partly_skipped())
                self.store.anomaly_rows = list(self.anomaly_rows)
                self.store.spike_rows = list(old.spike_rows)
            except Exception:
                pass
            old.close()
            if fn.__name__ == "write":
                self.store.write(*args)

    def synced_events(self) -> list[Event]:
        """The parameter events, once everything queued so far is processed."""
        self.sync()
        return list(self.events)

    def snapshot(self) -> tuple[list[ParamInfo], list[tuple[int, str, Any]], int]:
        with self._lock:
            return list(self.params), list(self.anomaly_rows), self.last_step


class _Discard(MemoryStore):
    def add_params(self, params: list[ParamInfo]) -> None:
        pass

    def write(self, chunk: Chunk, anomalies: list, steps: Any = (), partly: Any = ()) -> None:
        pass

    def add_events(self, events: list[tuple[int, str, str]]) -> None:
        pass

    def add_spikes(self, spikes: list[tuple[int, str]]) -> None:
        pass


#: the detail of the anomaly of the first NaN/Inf loss (`watch.log_loss`)
LOSS_DETAIL = (
    "the loss is {value}: watch.log_loss got it for this step (a step's losses are averaged; "
    "a batch the loop skipped without optimizer.step, e.g. a NaN guard, is recorded only by "
    "its loss, here)"
)
#: the detail of a NaN/Inf anomaly at a step the GradScaler skipped
SKIPPED_DETAIL = "the GradScaler skipped this step (Inf/NaN gradients): no update was made"
#: the same where one optimizer's step was skipped and the others' went on
PARTLY_SKIPPED_DETAIL = (
    "the GradScaler skipped the step of the optimizer holding these parameters (Inf/NaN "
    "gradients): they were not updated at this step; the other optimizers' parameters were"
)


def _nonfinite_said(
    found: list[tuple[int, str, Any]], records: list[StepRecord]
) -> list[tuple[int, str, Any]]:
    """`found` with each NaN/Inf anomaly saying what its step knows: that the GradScaler
    skipped the step (that NaN/Inf is the scaler's overflow check at work: it lowers the scale,
    not a broken model), and which parameters held NaN/Inf values before the update
    (watch/holders.py; `held`: [name, non-finite elements, elements, earlier step its gradient
    turned NaN/Inf or None] each)."""
    if not any(kind == "nonfinite" for _, kind, _ in found):
        return found
    by_step = {r.step: r for r in records}
    out: list[tuple[int, str, Any]] = []
    for step, kind, names in found:
        rec = by_step.get(step)
        if kind != "nonfinite" or rec is None:
            out.append((step, kind, names))
            continue
        skipped = rec.info is not None and step_info(rec.info)[0]
        partly = rec.skipped_ids is not None
        held: Held | None = rec.held if isinstance(rec.held, Held) else None
        said = [SKIPPED_DETAIL] if skipped else [PARTLY_SKIPPED_DETAIL] if partly else []
        said += [held_detail(held, skipped or partly)] if held is not None else []
        row: dict[str, Any] = {"params": list(names), "detail": "; ".join(t for t in said if t)}
        if held is not None and not held.unchecked:
            row["held"] = held.to_json()
        out.append((step, kind, row if row["detail"] or "held" in row else names))
    return out


def _step_of(row: tuple[int, str, Any]) -> int:
    return row[0]


def _pad(a: np.ndarray, width: int, value: float) -> np.ndarray:
    return a if len(a) == width else np.concatenate([a, np.full(width - len(a), value, a.dtype)])
