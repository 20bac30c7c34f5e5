"""A record read by another connection while it is written and when it ends (found by an
outside try-out): reads are of one moment, a run that ends while read is still one file, and
the record says whether its watch closed."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import torch
from torch import nn

from gradviz_widgets import GradWatch
from gradviz_widgets.watch.store import SQLiteStore


def _train(watch_path: Path, steps: int, close: bool = True) -> GradWatch:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, path=watch_path)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    if close:
        watch.close()
    else:
        watch.history()  # flushes the writer
    return watch


def test_a_run_that_ends_while_read_is_one_file(tmp_path: Path) -> None:
    reader: sqlite3.Connection | None = None
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "runs")
    for _ in range(50):
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
    watch.history()  # flushes the writer
    db = next((tmp_path / "runs").glob("run-*/watch.sqlite"))
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # a notebook reading it
    reader.execute("SELECT count(*) FROM chunks").fetchone()
    watch.close()
    reader.close()
    alone = tmp_path / "copy" / "run-x"
    alone.mkdir(parents=True)
    shutil.copy(db, alone / "watch.sqlite")  # the main file alone holds the record
    copy = GradWatch.open(alone)
    assert copy.history().step.nunique() == 50
    copy.close()


def test_reads_are_of_one_moment(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """history() reads the parameters, the chunks and the exact values in one transaction."""
    _train(tmp_path / "runs", 5)
    run = GradWatch.open(tmp_path / "runs")
    store = run.stores[run.rank]
    seen: list[bool] = []
    chunks = SQLiteStore.chunks

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(self._db.in_transaction)
        yield from chunks(self, *args, **kwargs)

    monkeypatch.setattr(SQLiteStore, "chunks", spy)
    run.history()
    run.overview()
    assert seen and all(seen)
    assert not store._db.in_transaction  # and the transaction ended
    run.close()


def test_the_record_says_whether_its_watch_closed(tmp_path: Path) -> None:
    _train(tmp_path / "runs", 5)
    open_watch = _train(tmp_path / "runs", 5, close=False)  # still running (or killed)
    run = GradWatch.open(tmp_path / "runs")
    assert [r.closed for r in run.runs] == [True, False]
    assert run.ended is False
    assert "not closed" in repr(run.runs[-1]) and "not closed" not in repr(run.runs[0])
    run.close()
    open_watch.close()
    assert GradWatch.open(tmp_path / "runs").ended is True
