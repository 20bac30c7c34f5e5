"""Where a run's flight records are kept, and why an anomaly has none.

Records are saved as `flight-<step>.pt` beside `watch.sqlite` and read back from disk when
asked for (the training process keeps no copy once the file is written); a record that cannot
be saved (a run kept in memory, an unpicklable argument) stays in memory. `flights.json` holds
the recorder's notes: per anomaly kind, the step recorded or why it was not. Under torchrun each
rank keeps its own records (its own batch): `replay_rank` picks the rank to replay.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..run.nonfinite import all_finite, floating_leaves
from .anomalies import KINDS, Anomaly, FlightRecord, replay_again

NOTES = "flights.json"


class FlightBook(Mapping[int, FlightRecord]):
    """step -> FlightRecord of one run (every rank's folder, for a run read from disk)."""

    def __init__(self, folders: list[Path] | None = None) -> None:
        #: where records are saved (the first) and looked for (all); none: memory only
        self.folders = folders or []
        self._memory: dict[int, FlightRecord] = {}
        self.notes: dict[str, Any] | None = None

    @classmethod
    def read(cls, folders: list[Path]) -> FlightBook:
        """The records and notes a run left on disk."""
        book = cls(folders)
        for folder in folders:
            try:
                book.notes = json.loads((folder / NOTES).read_text(encoding="utf-8"))
                break
            except (OSError, ValueError):
                continue
        return book

    # ---- training side -------------------------------------------------------------------
    def keep(self, record: FlightRecord | None, notes: dict[str, Any]) -> None:
        """Save `record` (None: only the notes changed) and the notes."""
        self.notes = notes
        if record is not None:
            self._save(record)
        if self.folders:
            tmp = self.folders[0] / f".{NOTES}.tmp"
            try:
                tmp.write_text(json.dumps(notes, default=str), encoding="utf-8")
                tmp.replace(self.folders[0] / NOTES)
            except OSError:  # the records are what matters; a missing note is explained
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)  # a full disk left half a note behind

    def _save(self, record: FlightRecord) -> None:
        if self.folders:
            try:
                record.save(self.folders[0])
                return
            except Exception as e:
                with contextlib.suppress(OSError):  # a read-only folder: nothing was written
                    (self.folders[0] / f"flight-{record.step}.pt").unlink(missing_ok=True)
                warnings.warn(
                    f"GradWatch could not save the flight record of step {record.step} "
                    f"({type(e).__name__}: {e}); it is kept in memory for this session",
                    stacklevel=5,
                )
        self._memory[record.step] = record

    # ---- Mapping ---------------------------------------------------------------------------
    def _paths(self) -> dict[int, Path]:
        found: dict[int, Path] = {}
        for folder in self.folders:
            for path in folder.glob("flight-*.pt"):
                step = path.stem.partition("-")[2]
                if step.isdigit():
                    found.setdefault(int(step), path)
        return found

    def __getitem__(self, step: int) -> FlightRecord:
        if step in self._memory:
            return self._memory[step]
        path = self._paths().get(step)
        if path is None:
            raise KeyError(step)
        return FlightRecord.load(path)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(set(self._memory) | set(self._paths())))

    def __len__(self) -> int:
        return len(set(self._memory) | set(self._paths()))

    def __contains__(self, step: object) -> bool:
        return step in self._memory or step in self._paths()

    # ---- explaining ------------------------------------------------------------------------
    def explain(self, anomaly: Anomaly) -> str:
        """Why `anomaly` has no flight record, and what to do for one."""
        head = f"no flight record for step {anomaly.step} ({anomaly.kind})"
        steps = list(self)
        recorded = f" (recorded steps: {steps})" if steps else " (no step was recorded)"
        notes = self.notes
        if notes is None:
            return (
                f"{head}: this run left no notes of its flight recorder{recorded}. On a GPU it "
                "needs GradWatch(..., sync_check=True) (one host sync per step)."
            )
        if notes.get("off"):
            return f"{head}: {notes['off']}."
        decided = notes.get("steps", {}).get(str(anomaly.step))
        if decided is not None and not decided["kept"]:
            return f"{head}: {decided['why'] or 'it was made but is no longer on disk'}."
        entry = notes.get("kinds", {}).get(anomaly.kind)
        if entry is not None and entry["step"] == anomaly.step:
            return f"{head}: {entry['why'] or 'it was made but is no longer on disk'}."
        if entry is not None:
            first = (
                f"that step has one: explore the {anomaly.kind} anomaly of step {entry['step']}"
                if entry["kept"]
                else f"it was not recorded either: {entry['why']}"
            )
            return (
                f"{head}: the step pre-hook saw no parameter's first {anomaly.kind} at this "
                f"step (recording stopped before it, or the run was read while still "
                f"writing); {anomaly.kind} first appeared at step {entry['step']} "
                f"({first}){recorded}."
            )
        if notes.get("unchecked"):
            return f"{head}: {notes['unchecked']}."
        if anomaly.kind not in KINDS:
            return (
                f"{head}: {anomaly.kind} is found by the writer thread after the step, when the "
                f"pre-update weights are gone; only the steps of {', '.join(KINDS)} anomalies "
                f"are recorded{recorded}."
            )
        return (
            f"{head}: the step pre-hook did not see {anomaly.kind} at this step (recording "
            f"stopped before it, or the run was read while still writing){recorded}."
        )


# ---- which rank's record to replay -------------------------------------------------------
def replay_rank(
    anomaly: Anomaly,
    records: dict[int, FlightRecord],
    rank: int | None,
    replay_one: Callable[[FlightRecord], Any],
) -> Any:
    """The explorer of one rank's record of `anomaly`'s step (`records`: rank -> record).

    `rank`, or by default: for NaN/Inf, the first rank whose own batch shows them (its
    recorded input holds NaN/Inf, or else its replay has them: the all-reduce spread them
    to every rank's record); for other kinds, the first of the anomaly's ranks. In a run of
    several ranks, a replay that does not show the anomaly is run again with a finding that
    says so and names the ranks to try."""
    order = rank_order(anomaly, records)
    if rank is not None:
        order = [rank, *(r for r in order if r != rank)]
    if len(records) == 1 and not anomaly.ranks:
        return replay_one(records[order[0]])
    searching = rank is None and anomaly.kind == "nonfinite"
    first: tuple[int, Any] | None = None
    tried: list[int] = []
    for r in order if searching else order[:1]:
        ex = replay_one(records[r])
        if shows(ex.report, anomaly):
            return ex
        tried.append(r)
        first = first if first is not None else (r, ex)
    assert first is not None
    others = [r for r in order if r not in tried]
    said = not_shown(anomaly, first[0], tried[1:], others)
    return replay_again(first[1], records[first[0]], said)


def rank_order(anomaly: Anomaly, records: dict[int, FlightRecord]) -> list[int]:
    """The ranks with a record, the anomaly's own first; for NaN/Inf, those whose recorded
    input holds NaN/Inf before them."""
    order = [r for r in anomaly.ranks if r in records]
    order += sorted(r for r in records if r not in order)
    if anomaly.kind == "nonfinite":
        order.sort(key=lambda r: not nonfinite_input(records[r]))
    return order


def nonfinite_input(record: FlightRecord) -> bool:
    """Whether the recorded call's floating-point tensors hold a NaN or an Inf."""
    return not all(all_finite(t) for t in floating_leaves((record.args, record.kwargs)))


def shows(report: Any, anomaly: Anomaly) -> bool:
    """Whether a replay's report shows `anomaly`: NaN/Inf anywhere (loss, a gradient, an
    origin), or for other kinds that status in one of its parameters (parameters the replay
    does not name: not checked)."""
    status = report.param_status
    if anomaly.kind == "nonfinite":
        return (
            report.nonfinite_origin is not None
            or not math.isfinite(report.loss)
            or "nonfinite" in status.values()
        )
    named = [status[p] for p in anomaly.params if p in status]
    return not named or anomaly.kind in named


def not_shown(anomaly: Anomaly, rank: int, tried: list[int], others: list[int]) -> str:
    """The finding of a replay of rank `rank` that does not show `anomaly`; `tried`: other
    ranks replayed that did not either, `others`: ranks with a record to try.

    Example:
        >>> not_shown(Anomaly(2, "nonfinite", ["w"]), 0, [], [1])[:45]
        "the replay of rank 0's batch has no NaN/Inf, "
    """
    step = anomaly.step
    if anomaly.kind == "nonfinite":
        head = f"the replay of rank {rank}'s batch has no NaN/Inf, which step {step}'s record has"
        why = "they likely came from another rank's batch (the all-reduce spreads them)"
    else:
        shown = ", ".join(anomaly.params[:3]) + (" ..." if len(anomaly.params) > 3 else "")
        head = (
            f"the replay of rank {rank}'s batch shows no {anomaly.kind} gradient in {shown}, "
            f"which step {step}'s record has"
        )
        why = "under DDP the record holds the ranks' averaged gradient, a replay one rank's own"
    if others:
        return f"{head}: {why}; other ranks: {_ranks(others)}; explore(rank={others[0]})"
    if tried:
        return (
            f"{head}, nor have the replays of {_ranks(tried)}: it came from what a replay "
            "does not repeat (the training loss_fn or target when none is passed to explore(), "
            "numpy or Python random draws, a collective)"
        )
    return f"{head}; no other rank kept a flight record of step {step}"


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
