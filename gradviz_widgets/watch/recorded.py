"""A run read back from disk: one process's record, or every rank's (`<path>/rank<r>/`)."""

from __future__ import annotations

import json
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from ..errors import GradExplorerError
from ..vocabulary import Thresholds
from .anomalies import Anomaly, FlightRecord, replay
from .events import Event
from .history import Overview, history_frame
from .store import DB_NAME, SQLiteStore

if TYPE_CHECKING:
    import pandas as pd

#: model -> its recording GradWatch (one watch per model)
WATCHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class HistoryViews:
    """The two views of a history, shared by a live GradWatch and a RecordedRun."""

    def show(self, **options: Any) -> Any:
        """The widget: heat map of parameters x steps and a line chart (a live watch's view
        follows the run while it trains, at most ~4 updates a second)."""
        from .widget import WatchWidget

        return WatchWidget(self, **options)

    def export_html(
        self, path: str | Path, *, max_steps: int = 400, title: str | None = None
    ) -> Path:
        """One self-contained page of this history (heat map, lines, anomalies), offline over
        file:// (see `gradviz_widgets.watch.page.export_watch_html`)."""
        from .page import export_watch_html

        return export_watch_html(self, path, max_steps=max_steps, title=title)


class RecordedRun(HistoryViews):
    """A run read back from disk: history(), anomalies, show(); explore() needs a model.

    Under torchrun each rank wrote `<path>/rank<r>/watch.sqlite`: they are read together, and
    `history()` puts the ranks side by side (its `rank` column; one process: rank 0)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.folders = rank_folders(self.path)
        self.stores = {r: SQLiteStore(d, readonly=True) for r, d in self.folders.items()}
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

    def history(
        self,
        params: Sequence[str] | None = None,
        start: int | None = None,
        stop: int | None = None,
        ranks: Sequence[int] | None = None,
    ) -> pd.DataFrame:
        """One row per (step, rank, parameter), ranks side by side within each step;
        `ranks` picks some. Pivot to compare: `h.pivot_table("norm", ["step", "param"], "rank")`."""
        frames = [
            history_frame(s.params, s.chunks(), s.exact(), params, start, stop, r, self._events(s))
            for r, s in self.stores.items()
            if ranks is None or r in ranks
        ]
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
        out = []
        for a, ranks, details in merged.values():
            a.ranks = tuple(ranks) if len(self.ranks) > 1 else ()
            a.detail = " | ".join(details)
            out.append(a)
        return sorted(out, key=lambda a: a.step)

    @property
    def events(self) -> list[Event]:
        """Changes to the parameters (frozen, unfrozen, replaced, added, removed), in order;
        each once when several ranks recorded it. Records older than this table have none."""
        seen: dict[Event, None] = {}
        for store in self.stores.values():
            seen.update(dict.fromkeys(self._events(store)))
        return sorted(seen, key=lambda e: e.step)

    @staticmethod
    def _events(store: SQLiteStore) -> list[Event]:
        return [Event(*row) for row in store.event_rows]

    def _flight(self, step: int) -> FlightRecord | None:
        for folder in self.folders.values():
            path = folder / f"flight-{step}.pt"
            if path.exists():
                return FlightRecord.load(path)
        return None

    def _explore(self, anomaly: Anomaly, model: nn.Module | None, **options: Any) -> Any:
        record = self._flight(anomaly.step)
        if record is None:
            steps = sorted(
                int(p.stem.split("-")[1])
                for d in self.folders.values()
                for p in d.glob("flight-*.pt")
            )
            raise GradExplorerError(no_flight_message(anomaly, steps))
        if model is None:
            raise GradExplorerError(
                "a run opened from disk has no model: pass one of the same "
                "architecture, anomaly.explore(model); it is copied, not changed"
            )
        watch = WATCHED.get(model)
        return replay(
            record,
            model,
            options.pop("loss_fn", None),
            watch._recorder if watch is not None else None,
            **options,
        )

    def overview(self, n_buckets: int = 400, rank: int | None = None) -> Overview:
        """Buckets of steps for the heat map, of one rank (default: the first)."""
        store = self.stores[self.rank if rank is None else rank]
        ov = Overview(n_buckets)
        for chunk in store.chunks():
            ov.add_chunk(chunk.widened(len(store.params)))
        return ov

    @property
    def params(self) -> list:
        return self._store.params

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


def rank_folders(path: Path) -> dict[int, Path]:
    """rank -> folder holding its watch.sqlite: `path` itself (one process), else `path/rank<r>`."""
    found = {
        int(d.name[4:]): d
        for d in path.glob("rank*")
        if d.name[4:].isdigit() and (d / DB_NAME).exists()
    }
    if (path / DB_NAME).exists():
        if found:  # a folder reused: a one-process run, then a torchrun (or the other way)
            warnings.warn(
                f"{path} holds a one-process record ({DB_NAME}) and rank folders "
                f"({', '.join(d.name for d in found.values())}); reading the one-process "
                f"record: open {path}/rank<r> for a rank's, or move them apart",
                stacklevel=3,
            )
        return {0: path}
    if not found:
        raise FileNotFoundError(f"no GradWatch record at {path / DB_NAME} nor {path}/rank*/")
    return dict(sorted(found.items()))


def no_flight_message(anomaly: Anomaly, recorded: list[int]) -> str:
    return (
        f"no flight record for step {anomaly.step} ({anomaly.kind}): the flight recorder "
        f"keeps the first NaN/Inf step only (recorded: {recorded or 'none'}). On a GPU it "
        "needs GradWatch(..., sync_check=True) (one host sync per step); a threshold "
        "trigger is GradWatch(..., flight_recorder=<norm>)."
    )
