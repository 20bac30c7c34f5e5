"""Where a run's flight records are kept, and why an anomaly has none.

Records are saved as `flight-<step>.pt` beside `watch.sqlite` and read back from disk when
asked for (the training process keeps no copy once the file is written); a record that cannot
be saved (a run kept in memory, an unpicklable argument) stays in memory. `flights.json` holds
the recorder's notes: per anomaly kind, the step recorded or why it was not.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .anomalies import KINDS, Anomaly, FlightRecord

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
            try:
                tmp = self.folders[0] / f".{NOTES}.tmp"
                tmp.write_text(json.dumps(notes, default=str), encoding="utf-8")
                tmp.replace(self.folders[0] / NOTES)
            except OSError:
                pass  # the records themselves are what matters; a missing note is explained

    def _save(self, record: FlightRecord) -> None:
        if self.folders:
            try:
                record.save(self.folders[0])
                return
            except Exception as e:
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
