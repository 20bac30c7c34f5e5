"""The on-disk record of a watched run: SQLite in WAL mode, steps packed into compressed chunks.

One row per (step, parameter) would cost ~50 bytes in SQLite (record header, two integer keys,
four REALs, b-tree cell); 1,000 parameters x 100,000 steps would be ~5 GB. So a row of `chunks`
holds every parameter for a run of consecutive steps: columns stored parameter-major (one
parameter's steps side by side), float32, byte-shuffled (the exponent bytes of neighbouring
values sit together) and zlib-compressed: ~8-9 bytes per (step, parameter). Values float32 cannot
hold (norms below 1.2e-38 or above 3.4e38 of float64 gradients) go to the small `exact` table as
float64, so a vanishing gradient never reads 0.0.

Writes happen on the writer thread only, one transaction per flush; readers open their own
connection (WAL lets them read while the run writes). A killed process loses only what was not
yet flushed: committed WAL transactions survive the process (synchronous=NORMAL). Closing the
writer leaves WAL mode, so reading a finished record adds no files to its folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..vocabulary import STATUSES
from .steptable import StepRow

DB_NAME = "watch.sqlite"
FLOATS = ("norm", "max_abs", "update_ratio")
_F32 = np.finfo(np.float32)
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS params (id INTEGER PRIMARY KEY, name TEXT NOT NULL, module TEXT NOT NULL,
    shape TEXT NOT NULL, numel INTEGER NOT NULL, first_step INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (first_step INTEGER PRIMARY KEY, last_step INTEGER NOT NULL,
    n_steps INTEGER NOT NULL, n_params INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS exact (step INTEGER NOT NULL, param INTEGER NOT NULL,
    col INTEGER NOT NULL, value REAL, PRIMARY KEY (step, param, col)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS anomalies (step INTEGER NOT NULL, kind TEXT NOT NULL,
    params TEXT NOT NULL, PRIMARY KEY (step, kind)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (step INTEGER PRIMARY KEY, skipped INTEGER NOT NULL,
    scale REAL, clipped INTEGER);
CREATE TABLE IF NOT EXISTS skipped_params (step INTEGER NOT NULL, param INTEGER NOT NULL,
    PRIMARY KEY (step, param)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (step INTEGER NOT NULL, param TEXT NOT NULL, kind TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spikes (step INTEGER NOT NULL, data TEXT NOT NULL);
"""
#: test hook: cap the database at this many pages (simulates a full disk)
MAX_PAGE_COUNT: int | None = None


@dataclasses.dataclass
class Chunk:
    """Consecutive recorded steps; 2-d arrays are (steps, params).

    `status` holds indices into stats.STATUSES; `zero_fraction` and `update_ratio` are NaN
    where unknown (no gradient; no optimizer step)."""

    steps: np.ndarray
    times: np.ndarray
    norm: np.ndarray
    max_abs: np.ndarray
    zero_fraction: np.ndarray
    status: np.ndarray
    update_ratio: np.ndarray

    @property
    def n_params(self) -> int:
        return self.norm.shape[1]

    def widened(self, n_params: int) -> Chunk:
        """The same steps with columns for parameters added later (status "none")."""
        extra = n_params - self.n_params
        if extra <= 0:
            return self

        def pad(a: np.ndarray, value: float) -> np.ndarray:
            return np.pad(a, ((0, 0), (0, extra)), constant_values=value)

        return Chunk(
            self.steps,
            self.times,
            pad(self.norm, np.nan),
            pad(self.max_abs, np.nan),
            pad(self.zero_fraction, np.nan),
            pad(self.status, STATUSES.index("none")),
            pad(self.update_ratio, np.nan),
        )


def _shuffle(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a.view(np.uint8).reshape(-1, a.itemsize).T).tobytes()


def _unshuffle(raw: bytes, dtype: type, count: int) -> np.ndarray:
    size = np.dtype(dtype).itemsize
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(size, count)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(-1)


def encode(chunk: Chunk) -> tuple[bytes, list[tuple[int, int, int, float]]]:
    """Compressed bytes of a chunk, and the (step, param, column, value) float32 cannot hold."""
    parts = [chunk.steps.astype(np.int64).tobytes(), chunk.times.astype(np.float64).tobytes()]
    exact: list[tuple[int, int, int, float]] = []
    for col, name in enumerate(FLOATS):
        values = getattr(chunk, name)
        with np.errstate(over="ignore", under="ignore"):
            small = values.astype(np.float32)
        finite = np.isfinite(values) & (values != 0)
        lost = finite & ((np.abs(values) < _F32.tiny) | ~np.isfinite(small))
        for s, p in zip(*np.nonzero(lost)):
            exact.append((int(chunk.steps[s]), int(p), col, float(values[s, p])))
        parts.append(_shuffle(np.ascontiguousarray(small.T)))
    zf = np.where(
        np.isnan(chunk.zero_fraction), 65535, np.round(np.nan_to_num(chunk.zero_fraction) * 65534)
    ).astype(np.uint16)
    parts.append(_shuffle(np.ascontiguousarray(zf.T)))
    parts.append(np.ascontiguousarray(chunk.status.astype(np.uint8).T).tobytes())
    return zlib.compress(b"".join(parts), 1), exact


def decode(data: bytes, n_steps: int, n_params: int) -> Chunk:
    raw = zlib.decompress(data)
    count = n_steps * n_params
    sizes = [8 * n_steps, 8 * n_steps, 4 * count, 4 * count, 4 * count, 2 * count, count]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    part = [raw[offsets[i] : offsets[i + 1]] for i in range(len(sizes))]
    floats = [
        _unshuffle(part[2 + i], np.float32, count).reshape(n_params, n_steps).T.astype(np.float64)
        for i in range(3)
    ]
    zf = _unshuffle(part[5], np.uint16, count).reshape(n_params, n_steps).T.astype(np.float64)
    zf = np.where(zf == 65535, np.nan, zf / 65534)
    status = np.frombuffer(part[6], dtype=np.uint8).reshape(n_params, n_steps).T.copy()
    return Chunk(
        np.frombuffer(part[0], dtype=np.int64).copy(),
        np.frombuffer(part[1], dtype=np.float64).copy(),
        floats[0],
        floats[1],
        zf,
        status,
        floats[2],
    )


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    module: str
    shape: tuple[int, ...]
    numel: int
    first_step: int


class MemoryStore:
    """The same record kept in memory (compressed): no path, or the disk failed."""

    limit_bytes = 512 << 20

    def __init__(self) -> None:
        self.meta: dict[str, str] = {}
        self.params: list[ParamInfo] = []
        self._chunks: list[tuple[int, int, bytes]] = []
        self._exact: list[tuple[int, int, int, float]] = []
        self.anomaly_rows: list[tuple[int, str, Any]] = []
        self._steps: list[StepRow] = []
        #: (step, param id) of parameters whose optimizer's step alone was skipped
        self._partly: list[tuple[int, int]] = []
        self.event_rows: list[tuple[int, str, str]] = []
        #: spike events (watch/spikes.py): (step, JSON)
        self.spike_rows: list[tuple[int, str]] = []
        self.bytes = 0

    def set_meta(self, meta: dict[str, str]) -> None:
        self.meta.update(meta)

    def add_params(self, params: list[ParamInfo]) -> None:
        for p in params:  # a replaced parameter of another shape keeps its id
            self.params[p.id : p.id + 1] = [p]

    def add_events(self, events: list[tuple[int, str, str]]) -> None:
        self.event_rows += [(int(s), str(p), str(k)) for s, p, k in events]

    def add_spikes(self, spikes: list[tuple[int, str]]) -> None:
        self.spike_rows += [(int(s), str(d)) for s, d in spikes]

    def write(
        self,
        chunk: Chunk,
        anomalies: list[tuple[int, str, Any]],
        steps: Sequence[StepRow] = (),
        partly: Sequence[tuple[int, int]] = (),
    ) -> None:
        if self.bytes > self.limit_bytes:
            raise MemoryError(f"the in-memory record reached {self.limit_bytes >> 20} MB")
        data, exact = encode(chunk)
        self._chunks.append((len(chunk.steps), chunk.n_params, data))
        self._exact += exact
        self.anomaly_rows += anomalies
        self._steps += steps
        self._partly += partly
        self.bytes += len(data)

    def step_rows(self) -> list[StepRow]:
        return list(self._steps)

    def partly_skipped(self) -> list[tuple[int, int]]:
        """(step, param id) of the parameters whose optimizer's step the GradScaler skipped
        while the other optimizers' went on."""
        return list(self._partly)

    def clip_unknown(self, lo: int, hi: int) -> None:
        """Steps `lo`-`hi` written so far: `clipped` unknown (a row each)."""
        said: dict[int, StepRow] = {r[0]: r for r in self._steps}
        for chunk in self.chunks():
            for s in chunk.steps.tolist():
                if lo <= s <= hi:
                    row = said.get(s, (s, 0, None, None))
                    said[s] = (s, row[1], row[2], None)
        self._steps = list(said.values())

    def chunks(self) -> Iterator[Chunk]:
        for n_steps, n_params, data in self._chunks:
            yield decode(data, n_steps, n_params)

    def exact(self) -> list[tuple[int, int, int, float]]:
        return list(self._exact)

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """Reads as of one moment (in memory: the writer's lock is the caller's)."""
        return contextlib.nullcontext()

    def close(self) -> None:
        pass


class SQLiteStore:
    """Writes (writer thread only) and reads (own connection per reader) of `<dir>/watch.sqlite`."""

    def __init__(self, directory: str | Path, readonly: bool = False) -> None:
        self.directory = Path(directory)
        self.file = self.directory / DB_NAME
        self.readonly = readonly
        if readonly:
            if not self.file.exists():
                raise FileNotFoundError(f"no GradWatch record at {self.file}")
            self._db = sqlite3.connect(
                f"file:{self.file}?mode=ro", uri=True, check_same_thread=False
            )
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.file, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            if MAX_PAGE_COUNT is not None:
                self._db.execute(f"PRAGMA max_page_count={int(MAX_PAGE_COUNT)}")
            self._db.executescript(SCHEMA)
            self._db.commit()
            self._inode = self.file.stat().st_ino

    def check_file(self) -> None:
        """Raise OSError when the record's file is no longer where it was made (its folder
        deleted or moved: SQLite would go on writing into the unlinked file, lost at close)."""
        try:
            same = self.file.stat().st_ino == self._inode
        except OSError:
            same = False
        if not same:
            raise FileNotFoundError(
                f"the record's file {self.file} was deleted or moved while the run wrote it"
            )

    # ---- writing (writer thread) ----
    def set_meta(self, meta: dict[str, str]) -> None:
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())

    def add_params(self, params: list[ParamInfo]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO params VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (p.id, p.name, p.module, json.dumps(list(p.shape)), p.numel, p.first_step)
                    for p in params
                ],
            )

    def add_events(self, events: list[tuple[int, str, str]]) -> None:
        with self._db:
            self._db.executemany("INSERT INTO events VALUES (?, ?, ?)", [tuple(e) for e in events])

    def add_spikes(self, spikes: list[tuple[int, str]]) -> None:
        with self._db:
            self._db.executemany("INSERT INTO spikes VALUES (?, ?)", spikes)

    def write(
        self,
        chunk: Chunk,
        anomalies: list[tuple[int, str, Any]],
        steps: Sequence[StepRow] = (),
        partly: Sequence[tuple[int, int]] = (),
    ) -> None:
        self.check_file()
        data, exact = encode(chunk)
        with self._db:  # one transaction: all of it or nothing
            self._db.executemany("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?)", steps)
            self._db.executemany("INSERT OR REPLACE INTO skipped_params VALUES (?, ?)", partly)
            self._db.execute(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)",
                (int(chunk.steps[0]), int(chunk.steps[-1]), len(chunk.steps), chunk.n_params, data),
            )
            self._db.executemany("INSERT OR REPLACE INTO exact VALUES (?, ?, ?, ?)", exact)
            self._db.executemany(
                "INSERT OR REPLACE INTO anomalies VALUES (?, ?, ?)",
                [(s, k, json.dumps(p)) for s, k, p in anomalies],
            )

    def close(self) -> None:
        """Close; the writer moves everything into the main file and leaves WAL mode, so the
        finished record is one plain file that readers open without creating any (a WAL reader
        makes `-wal` and `-shm` files beside it). While another process still reads it, it
        stays in WAL mode, but with the WAL checkpointed: the main file alone holds the record
        (a notebook reading the run as it ended had left it all in `watch.sqlite-wal`, and a
        copy of `watch.sqlite` opened as an empty file)."""
        if not self.readonly:
            for pragma in ("wal_checkpoint(TRUNCATE)", "journal_mode=DELETE"):
                try:
                    self._db.execute(f"PRAGMA {pragma}")
                except sqlite3.Error:
                    pass
        try:
            self._db.close()
        except sqlite3.Error:
            pass

    # ---- reading ----
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees the record as of one moment (one read transaction): the
        parameters, the chunks and the values float32 cannot hold, read one by one while the
        writer went on, had mixed two moments (a new chunk's tiny norms read 0.0)."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    @property
    def meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta"))

    @property
    def params(self) -> list[ParamInfo]:
        rows = self._db.execute(
            "SELECT id, name, module, shape, numel, first_step FROM params ORDER BY id"
        )
        return [ParamInfo(i, n, m, tuple(json.loads(s)), k, f) for i, n, m, s, k, f in rows]

    @property
    def anomaly_rows(self) -> list[tuple[int, str, Any]]:
        rows = self._db.execute("SELECT step, kind, params FROM anomalies ORDER BY step")
        return [(s, k, json.loads(p)) for s, k, p in rows]

    @property
    def event_rows(self) -> list[tuple[int, str, str]]:
        try:  # records written before the events table have none
            return list(self._db.execute("SELECT step, param, kind FROM events ORDER BY rowid"))
        except sqlite3.OperationalError:
            return []

    @property
    def spike_rows(self) -> list[tuple[int, str]]:
        try:  # records written before the spikes table have none
            return list(self._db.execute("SELECT step, data FROM spikes ORDER BY step, rowid"))
        except sqlite3.OperationalError:
            return []

    def chunks(self, first: int | None = None, last: int | None = None) -> Iterator[Chunk]:
        query = (
            "SELECT n_steps, n_params, data FROM chunks WHERE last_step >= ? AND "
            "first_step <= ? ORDER BY first_step"
        )
        lo = -(1 << 62) if first is None else first
        hi = 1 << 62 if last is None else last
        for n_steps, n_params, data in self._db.execute(query, (lo, hi)).fetchall():
            yield decode(data, n_steps, n_params)

    def exact(self) -> list[tuple[int, int, int, float]]:
        return list(self._db.execute("SELECT step, param, col, value FROM exact"))

    def last_step(self) -> int:
        """The last step on disk (-1: none yet)."""
        (last,) = self._db.execute("SELECT MAX(last_step) FROM chunks").fetchone()
        return -1 if last is None else int(last)

    def step_span(self) -> tuple[int, int, int]:
        """(steps on disk, first step, last step); (0, -1, -1) when none yet. A run started
        with `start_step` (a resumed run) counts from there: its steps are not its last + 1."""
        row = self._db.execute(
            "SELECT SUM(n_steps), MIN(first_step), MAX(last_step) FROM chunks"
        ).fetchone()
        return (0, -1, -1) if row[0] is None else (int(row[0]), int(row[1]), int(row[2]))

    def clip_unknown(self, lo: int, hi: int) -> None:
        """Steps `lo`-`hi`: `clipped` unknown (a row each, for the steps written so far and
        those still to come: a row of a step written later replaces its own)."""
        with self._db:
            self._db.execute("UPDATE steps SET clipped = NULL WHERE step BETWEEN ? AND ?", (lo, hi))
            self._db.executemany(
                "INSERT OR IGNORE INTO steps VALUES (?, 0, NULL, NULL)",
                [(s,) for s in range(lo, hi + 1)],
            )

    def step_rows(self) -> list[StepRow]:
        """Skipped / loss-scaled / clipped steps; none in records older than the table."""
        try:
            return list(self._db.execute("SELECT step, skipped, scale, clipped FROM steps"))
        except sqlite3.OperationalError:  # written before the table existed
            return []

    def partly_skipped(self) -> list[tuple[int, int]]:
        """(step, param id) of the parameters whose optimizer's step the GradScaler skipped
        while the other optimizers' went on; none in records older than the table."""
        try:
            return list(self._db.execute("SELECT step, param FROM skipped_params"))
        except sqlite3.OperationalError:
            return []
