"""A run read back from disk: one process's record, or every rank's (`<run>/rank<r>/`)."""

from __future__ import annotations

import json
import sqlite3
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from ..errors import GradExplorerError
from ..vocabulary import Thresholds
from .anomalies import SPIKE, Anomaly, FlightRecord, in_order, replay
from .events import Event
from .flight_book import FlightBook, replay_rank
from .history import Overview, history_frame
from .runs import RunInfo, choose, rank_folders, run_name
from .spikes import Spike, open_spike
from .steptable import StepRow
from .store import SQLiteStore

if TYPE_CHECKING:
    import pandas as pd

#: model -> its recording GradWatch (one watch per model)
WATCHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class HistoryViews:
    """The two views of a history, shared by a live GradWatch and a RecordedRun."""

    @property
    def events(self) -> list[Event]:
        """Changes to the parameters, in order: Event(step, param, kind), kind one of frozen,
        unfrozen, replaced, added, removed (the ones frozen at the start: "frozen" at step 0;
        several ranks: each once). Records older than the events table have none."""
        return self._all_events()

    def _all_events(self) -> list[Event]:
        raise NotImplementedError

    @property
    def spikes(self) -> list[Spike]:
        """Spike events, oldest first: `.step`, `.params` / `.modules` (who left their
        baseline first and furthest, first), `.sentence`, `.explore()`, `.compare()`."""
        return self._spike_list()

    def _spike_list(self) -> list[Spike]:
        raise NotImplementedError

    def spike_frame(self) -> pd.DataFrame:
        """Every spike's ranked series, one row each (`spike` = the spike's step)."""
        import pandas as pd

        frames = [s.frame().assign(spike=s.step, rank=s.rank) for s in self.spikes]
        if not frames:
            return pd.DataFrame(columns=["spike", "rank", *Spike.frame_columns()])
        out = pd.concat(frames, ignore_index=True)
        return out[["spike", "rank", *Spike.frame_columns()]]

    def show(self, **options: Any) -> Any:
        """The widget: heat map of parameters x steps and a line chart (a live watch's view
        follows the run while it trains, at most ~4 updates a second). In marimo, which draws
        no ipywidgets: the record as it stands, as the offline page (`export_html`)."""
        from ..widget.marimo_mirror import in_marimo

        if in_marimo():
            return marimo_snapshot(self)
        from .widget import WatchWidget

        return WatchWidget(self, **options)

    def export_html(
        self, path: str | Path, *, max_steps: int = 400, title: str | None = None
    ) -> Path:
        """One self-contained page of this history (heat map, lines, anomalies), offline over
        file:// (see `gradviz_widgets.watch.page.export_watch_html`)."""
        from .page import export_watch_html

        return export_watch_html(self, path, max_steps=max_steps, title=title)


def _check_readable(
    stores: dict[int, SQLiteStore], folders: dict[int, Path], runs: list[RunInfo]
) -> None:
    """A GradExplorerError (the stores closed) when a record holds no tables: its run could
    not write it (a full disk at its start leaves a 0-byte watch.sqlite)."""
    for r, store in stores.items():
        try:
            store.meta  # noqa: B018 (read to find out)
        except sqlite3.DatabaseError as e:
            for s in stores.values():
                s.close()
            others = [
                i.id for i in runs if i.path != folders[r] and i.path not in folders[r].parents
            ]
            also = f"; the other runs here: {', '.join(others)} (GradWatch.open(path, run=<id>))"
            raise GradExplorerError(
                f"the record at {folders[r]} holds nothing to read ({e}): its run could not "
                "write it (the folder's disk was full or unwritable when it started; that "
                f"run's steps were kept in memory only){also if others else ''}"
            ) from e


def marimo_snapshot(run: Any) -> Any:
    """marimo's view of a watch: a line saying what it is, and the offline page of the record
    as it stands (the cell showed `<WatchWidget object at 0x...>`: marimo draws no ipywidgets,
    and the live view is one)."""
    import html

    import marimo as mo  # only ever called inside marimo

    from .page import watch_page_html

    note = mo.md(
        "**GradWatch** in marimo: the record as it stands (run this cell again for the newest "
        "steps); the live view is drawn in Jupyter. `watch.export_html(path)` saves this page."
    )
    page = watch_page_html(run)
    frame = mo.Html(
        f'<iframe srcdoc="{html.escape(page, quote=True)}" '
        'style="width:100%;height:900px;border:1px solid #ddd"></iframe>'
    )
    return mo.vstack([note, frame])


class RecordedRun(HistoryViews):
    """A run read back from disk: history(), anomalies, show(); explore() needs a model.

    `path` is a folder of runs (the latest is read; `run=` picks one by id, `.runs` lists
    them), a run's folder, or a record of an earlier version lying directly in `path`.
    Under torchrun each rank wrote `<run>/rank<r>/watch.sqlite`: they are read together, and
    `history()` puts the ranks side by side (its `rank` column; one process: rank 0)."""

    def __init__(self, path: str | Path, run: str | RunInfo | None = None) -> None:
        #: the folder opened, as given
        self.path = Path(path)
        info, runs = choose(self.path, run)
        #: every run in `path`, oldest first (id, start time, steps, ranks)
        self.runs: list[RunInfo] = runs
        #: the run read: its id and folder
        self.run_id, self.run_path = info.id, info.path
        #: what titles say: from the experiment's folder on (`exp1/run-...`)
        self.name = run_name(self.run_path)
        self.folders = rank_folders(self.run_path)
        self.stores = {r: SQLiteStore(d, readonly=True) for r, d in self.folders.items()}
        _check_readable(self.stores, self.folders, runs)
        if list(self.stores) == [0]:  # one folder: the rank it says it is (`path/rank1` opened)
            rank = int(self.stores[0].meta.get("rank", "0"))
            self.folders, self.stores = {rank: self.folders[0]}, {rank: self.stores[0]}
        #: the ranks found on disk, and the one the view shows first
        self.ranks = sorted(self.stores)
        self.rank = self.ranks[0]
        self._store = self.stores[self.rank]
        self.meta = self._store.meta
        vanishing, exploding = json.loads(self.meta.get("thresholds", "[1e-7, 1e4]"))
        self.thresholds = Thresholds(vanishing, exploding)
        self.closed = True
        #: whether the run's watch closed (False: still running, or killed, crashed, its disk
        #: lost: the record ends where it stopped); None: a record too old to say
        self.ended = info.closed
        #: the uncaught exception that ended the run's script ("" when none did)
        self.crashed = info.crashed

    def history(
        self,
        params: Sequence[str] | None = None,
        start: int | None = None,
        stop: int | None = None,
        ranks: Sequence[int] | None = None,
    ) -> pd.DataFrame:
        """One row per (step, rank, parameter), ranks side by side within each step;
        `ranks` picks some. Pivot to compare: `h.pivot_table("norm", ["step", "param"], "rank")`."""
        frames = []
        for r, s in self.stores.items():
            if ranks is not None and r not in ranks:
                continue
            with s.snapshot():  # one moment of a record still being written
                frames.append(
                    history_frame(
                        s.params,
                        s.chunks(),
                        s.exact(),
                        params,
                        start,
                        stop,
                        r,
                        s.step_rows(),
                        self._events(s),
                        s.partly_skipped(),
                    )
                )
        if len(frames) == 1:
            return frames[0]
        import pandas as pd

        out = pd.concat(frames, ignore_index=True)
        return out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)

    @property
    def anomalies(self) -> list[Anomaly]:
        """Every rank's anomalies; one entry per finding with the ranks that recorded it."""
        merged: dict[tuple, list] = {}
        for r, store in self.stores.items():
            for row in store.anomaly_rows:
                a = Anomaly.from_row(row, self._flight, self._explore)
                key = (a.step, a.kind, tuple(a.params))
                entry = merged.setdefault(key, [a, [], []])
                entry[1].append(r)
                entry[2] += [a.detail] if a.detail and a.detail not in entry[2] else []
                entry[0].held += [h for h in a.held if h not in entry[0].held]
        out = []
        for a, ranks, details in merged.values():
            a.ranks = tuple(ranks) if len(self.ranks) > 1 else ()
            a.detail = " | ".join(details)
            out.append(a)
        return in_order(out)

    def _spike_list(self) -> list[Spike]:
        out = [
            Spike.from_json(data, rank, self._open_spike)
            for rank, store in self.stores.items()
            for _, data in store.spike_rows
        ]
        return sorted(out, key=lambda s: (s.step, s.rank))

    def _open_spike(self, how: str, spike: Spike, model: Any, options: dict) -> Any:
        watch = WATCHED.get(model) if model is not None else None
        options.setdefault("thresholds", self.thresholds)
        recorder = watch._recorder if watch is not None else None
        book = self._book(spike.rank if spike.rank in self.folders else None)
        return open_spike(how, spike, book, model, None, recorder, options, from_disk=True)

    def _all_events(self) -> list[Event]:
        seen: dict[Event, None] = {}
        for store in self.stores.values():
            seen.update(dict.fromkeys(self._events(store)))
        return sorted(seen, key=lambda e: e.step)

    @staticmethod
    def _events(store: SQLiteStore) -> list[Event]:
        return [Event(*row) for row in store.event_rows]

    def _book(self, rank: int | None = None) -> FlightBook:
        """Read afresh (a run still recording may have added records): every rank's folder
        (rank 0's record of a step first), or one rank's."""
        folders = self.folders.values() if rank is None else [self.folders[rank]]
        return FlightBook.read(list(folders))

    def _flight(self, step: int) -> FlightRecord | None:
        return self._book().get(step)

    def _explore(
        self, anomaly: Anomaly, model: nn.Module | None, rank: int | None = None, **options: Any
    ) -> Any:
        if rank is not None and rank not in self.folders:
            raise GradExplorerError(
                f"rank={rank}: this run has ranks {', '.join(map(str, self.ranks))} on disk"
            )
        if anomaly.kind == SPIKE:
            spike = self._spike_of(anomaly, rank)
            if spike is not None:
                return spike.explore(model, **options)
        records = self._records(anomaly, rank)
        if model is None:
            raise GradExplorerError(
                "a run opened from disk has no model: pass one of the same "
                "architecture, anomaly.explore(model); it is copied, not changed"
            )
        watch = WATCHED.get(model)
        recorder = watch._recorder if watch is not None else None
        options.setdefault("thresholds", self.thresholds)
        loss_fn = options.pop("loss_fn", None)

        def replay_one(record: FlightRecord) -> Any:
            return replay(record, model, loss_fn, recorder, from_disk=True, **dict(options))

        return replay_rank(anomaly, records, rank, replay_one)

    def _records(self, anomaly: Anomaly, rank: int | None) -> dict[int, FlightRecord]:
        """rank -> its flight record of the anomaly's step, every rank's that has one (an
        error saying why when none has, or `rank` has none)."""
        found = {}
        for r in self.folders:
            record = self._book(r).get(anomaly.step)
            if record is not None:
                found[r] = record
        if rank is None and not found:
            raise GradExplorerError(self._book().explain(anomaly))
        if rank is not None and rank not in found:
            also = f"; ranks with one: {', '.join(map(str, found))}" if found else ""
            raise GradExplorerError(f"rank {rank}: {self._book(rank).explain(anomaly)}{also}")
        return found

    def _spike_of(self, anomaly: Anomaly, rank: int | None) -> Spike | None:
        """The spike event of a `spike` anomaly: `rank`'s, or the first of its ranks'."""
        ranks = [rank] if rank is not None else [*anomaly.ranks, *self.ranks]
        spikes = [s for s in self._spike_list() if s.step == anomaly.step]
        for r in ranks:
            for s in spikes:
                if s.rank == r:
                    return s
        return spikes[0] if spikes and rank is None else None

    def overview(self, n_buckets: int = 400, rank: int | None = None) -> Overview:
        """Buckets of steps for the heat map, of one rank (default: the first)."""
        store = self.stores[self.rank if rank is None else rank]
        ov = Overview(n_buckets)
        with store.snapshot():  # one moment of a record still being written
            params = store.params
            starts = [p.first_step for p in params]  # no record before a parameter existed
            for chunk in store.chunks():
                ov.add_chunk(chunk.widened(len(params)), starts)
        return ov

    def step_rows(self, rank: int | None = None) -> list[StepRow]:
        """The steps with something to say (GradScaler skipped, loss scale, clipped: the
        record's `steps` table, watch/steptable.py) of `rank` (default: the one read first)."""
        store = self.stores.get(self.rank if rank is None else rank)
        return store.step_rows() if store is not None else []

    @property
    def params(self) -> list:
        return self._store.params

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
