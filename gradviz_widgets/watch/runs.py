"""One run, one record: every GradWatch writes into a folder of its own, `<path>/<run id>/`.

A run id (`run-20261201-221500-3f2a`: UTC start time to the second, 4 random hex digits) is
made by the process (rank 0 under torchrun) when the watch is created. Under torchrun the ranks
agree on it with ONE `broadcast_object_list` from rank 0 over the watch's own gloo side group,
at construction: the ranks start seconds apart, so a time-based id cannot be computed on each
rank, and TORCHELASTIC_RUN_ID is "none" under torchrun's static rendezvous (--master-port,
several nodes without --rdzv-id) and stays the same across restarts and several watches. Without the side
group (`ranks=False`: no collective at all) the id comes from TORCHELASTIC_RUN_ID, the restart
count and how many watches this process made; failing that each rank picks its own (warned).

Reading: a folder holds runs (`run-*` folders, each a record) and, from earlier versions, maybe
a record directly in it (`watch.sqlite` or `rank<r>/` folders there), which counts as one run
named after the folder. `find_runs` lists them in start order; the latest is the last.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import re
import secrets
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ..errors import GradExplorerError
from .ranks import RankSetup
from .store import DB_NAME, SQLiteStore

PREFIX = "run-"
_COUNTER = itertools.count()  # the n-th watch of this process (the fallback id)


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """One run in a folder: its id, folder, start time (UTC), steps recorded, ranks, and the
    first and last step's numbers (-1: none yet; a resumed run's start at `start_step`).

    Example:
        >>> RunInfo("run-a", Path("run-a"), None, 10, (0,), 65, 74)
        <run run-a: start unknown, 10 steps (65-74)>
        >>> RunInfo("run-b", Path("run-b"), None, 57, (0,), 0, 56, True, "ValueError: bad")
        <run run-b: start unknown, 57 steps, ended by an uncaught ValueError: bad>
    """

    id: str
    path: Path
    started: datetime.datetime | None
    steps: int
    ranks: tuple[int, ...]
    first_step: int = -1
    last_step: int = -1
    #: the watch closed (True), did not (False: still running, or killed, crashed, its disk
    #: lost), or the record is too old to say (None)
    closed: bool | None = None
    #: the uncaught exception that ended the script ("ValueError: ..."; the watch closed at
    #: exit), "" when none did
    crashed: str = ""

    def __repr__(self) -> str:
        when = f"started {self.started:%Y-%m-%d %H:%M:%S} UTC" if self.started else "start unknown"
        ranks = f", ranks {list(self.ranks)}" if len(self.ranks) > 1 else ""
        span = f" ({self.first_step}-{self.last_step})" if self.first_step > 0 else ""
        end = (
            ", not closed (still running, or stopped without close())"
            if self.closed is False
            else f", ended by an uncaught {self.crashed}"
            if self.crashed
            else ""
        )
        return f"<run {self.id}: {when}, {self.steps} steps{span}{ranks}{end}>"


def new_run_id(now: float | None = None) -> str:
    """Example:
    >>> new_run_id(0.0)[:20]
    'run-19700101-000000-'
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{PREFIX}{stamp}-{secrets.token_hex(2)}"


def start_run(path: Path, setup: RankSetup) -> str:
    """The id of a new run into `path`, the same on every rank; rank 0 says once what `path`
    already holds, a rank whose `path` is not rank 0's says so."""
    box: list[Any] = [None, None]
    if setup.rank == 0:
        box = [_pick(path), str(path.resolve())]
    if setup.world == 1:
        return str(box[0])
    why = setup.why or "ranks=False: no collective"
    if setup.group is not None:
        try:
            dist.broadcast_object_list(box, src=0, group=setup.group)
            _same_path(path, box[1], setup.rank)
            return str(box[0])
        except Exception as e:  # a rank missing: fall through to an id of our own
            why = f"{type(e).__name__}: {str(e)[:200]}"
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    if elastic != "none":
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", elastic)[:40]
        return f"{PREFIX}elastic-{safe}-{restart}-{next(_COUNTER)}"
    own = box[0] or new_run_id()
    warnings.warn(
        f"GradWatch: the ranks could not agree on a run id ({why}; no TORCHELASTIC_RUN_ID "
        f"either); rank {setup.rank} records into {path / own}/rank{setup.rank}/ on its own",
        stacklevel=4,
    )
    return str(own)


def _same_path(path: Path, first: str, rank: int) -> None:
    """Warn where this rank's `path` is not rank 0's: the run's ranks lie in two folders."""
    if str(path.resolve()) == first:
        return
    warnings.warn(
        f"GradWatch: rank {rank} records into {path}, rank 0 into {first}; GradWatch.open() "
        "of either folder reads only the ranks that recorded there: pass the same path= on "
        "every rank",
        stacklevel=5,
    )


def runs_root(path: Path, say: bool = True) -> Path:
    """The folder a new run goes into: `path`, or, when `path` is an earlier run's own folder
    (`run-*` holding a record: a path copied from `watch.run_path`), the folder holding it,
    so the new run lies beside it instead of inside it (where `GradWatch.open(run folder)`
    would read the new run, and the folder's `.runs` would not list it). `say`: warn (rank 0)."""
    if not (path.name.startswith(PREFIX) and path.is_dir() and is_record(path)):
        return path
    if say:
        warnings.warn(
            f"GradWatch: {path} is the folder of run {path.name}; this run records beside it, "
            f"in {path.parent}/ (pass that folder as path=; "
            f"GradWatch.open({str(path.parent)!r}).runs lists both)",
            stacklevel=4,
        )
    return path.parent


def _pick(path: Path) -> str:
    runs = find_runs(path) if path.is_dir() else []
    run_id = new_run_id()
    while (path / run_id).exists():
        run_id = new_run_id()
    if runs:
        n = f"{len(runs)} run" + ("s" if len(runs) > 1 else "")
        warnings.warn(
            f"{path} already holds {n}; this one records into {path / run_id}/; "
            f"GradWatch.open({str(path)!r}) reads the latest (.runs lists them, "
            f"GradWatch.open(path, run=<id>) reads one)",
            stacklevel=5,
        )
    return run_id


def is_record(folder: Path) -> bool:
    """A run's record lies here: `watch.sqlite`, or `rank<r>/watch.sqlite` folders."""
    if (folder / DB_NAME).exists():
        return True
    return any(d.name[4:].isdigit() and (d / DB_NAME).exists() for d in folder.glob("rank*"))


def find_runs(path: Path) -> list[RunInfo]:
    """The runs in `path`, oldest first: its `run-*` folders, and a record lying in `path`
    itself (an earlier version's layout, or a run folder opened directly)."""
    folders = sorted(d for d in path.glob(f"{PREFIX}*") if d.is_dir() and is_record(d))
    if is_record(path):
        folders.append(path)
    runs = [_info(d) for d in folders]
    return sorted(runs, key=lambda r: (r.started is not None, r.started or 0, r.id))


def choose(path: Path, run: str | RunInfo | None) -> tuple[RunInfo, list[RunInfo]]:
    """The run to open (`run`: an id or a RunInfo; None: the latest) and every run there."""
    if path.name == DB_NAME and path.is_file():  # a record's file: its folder
        path = path.parent
    runs = find_runs(path) if path.is_dir() else []
    if not runs:
        raise FileNotFoundError(
            f"no GradWatch record at {path}: no {PREFIX}*/ folders, no {DB_NAME}, no rank*/"
        )
    if run is None:
        return runs[-1], runs
    wanted = run.id if isinstance(run, RunInfo) else run
    for info in runs:
        if info.id == wanted:
            return info, runs
    raise GradExplorerError(
        f"run={wanted!r} is not in {path}; its runs: {', '.join(r.id for r in runs)}"
    )


def run_name(folder: Path) -> str:
    """A run's name for titles: from the folder holding the runs on, never an absolute path.

    Example:
        >>> run_name(Path("/home/me/runs/exp1/run-20261201-221500-3f2a/rank1"))
        'exp1/run-20261201-221500-3f2a/rank1'
        >>> run_name(Path("/home/me/runs/exp1"))
        'exp1'
    """
    parts = folder.absolute().parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i].startswith(PREFIX):
            return "/".join(parts[i - 1 :])
    return parts[-1] if parts else str(folder)


def rank_folders(path: Path) -> dict[int, Path]:
    """rank -> folder holding its watch.sqlite: `path` itself (one process), else `path/rank<r>`."""
    found = {
        int(d.name[4:]): d
        for d in path.glob("rank*")
        if d.name[4:].isdigit() and (d / DB_NAME).exists()
    }
    if (path / DB_NAME).exists():
        if found:  # a folder reused by earlier versions: a one-process run, then a torchrun
            warnings.warn(
                f"{path} holds a one-process record ({DB_NAME}) and rank folders "
                f"({', '.join(d.name for d in found.values())}); reading the one-process "
                f"record: open {path}/rank<r> for a rank's, or move them apart",
                stacklevel=4,
            )
        return {0: path}
    if not found:
        raise FileNotFoundError(f"no GradWatch record at {path / DB_NAME} nor {path}/rank*/")
    return dict(sorted(found.items()))


def _info(folder: Path) -> RunInfo:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a mixed folder warns when it is opened, not listed
        ranks = rank_folders(folder)
    started, span, ends, crashed = None, (0, -1, -1), [], ""
    for d in ranks.values():
        store = SQLiteStore(d, readonly=True)
        try:
            meta = store.meta
            span = max(span, store.step_span())  # the rank with the most steps
        except sqlite3.OperationalError:  # another process is creating this record right now
            meta = {}  # (two ranks with ranks=False, two notebooks): listed, not started yet
        finally:
            store.close()
        stamp = meta.get("started")
        if stamp and started is None:
            started = datetime.datetime.fromtimestamp(float(stamp), tz=datetime.timezone.utc)
        ends.append(ended(meta))
        crashed = crashed or meta.get("crashed", "")
    closed = None if None in ends or not ends else all(ends)
    return RunInfo(
        folder.name, folder, started, span[0], tuple(ranks), span[1], span[2], closed, crashed
    )


def ended(meta: dict[str, str]) -> bool | None:
    """Whether the record's watch closed (its meta "ended"); None: a record too old to say.

    Example:
        >>> ended({"end_marked": "1"}), ended({"end_marked": "1", "ended": "1.0"}), ended({})
        (False, True, None)
    """
    if "ended" in meta:
        return True
    return False if "end_marked" in meta else None
