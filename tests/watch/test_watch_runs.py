"""One run, one record: a GradWatch reusing a path records into a folder of its own
(`<path>/<run id>/`), `GradWatch.open(path)` reads the latest run and lists the others, and
records of earlier versions lying directly in the path still open (issue 18 item 1)."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorerError
from gradviz_widgets.watch import GradWatch

N_PARAMS = 4


def train(path: Path | str, steps: int, nan_at: int | None = None, model=None) -> GradWatch:
    torch.manual_seed(0)
    model = model or nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, path=path, flush_s=0.05)
    for step in range(steps):
        x = torch.randn(5, 3)
        if step == nan_at:
            x[0, 0] = float("nan")
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    return watch


def rerun(path: Path) -> tuple[GradWatch, GradWatch, list[str]]:
    """Run A (5 steps, NaN at step 3), then run B (2 steps) into the same path."""
    a = train(path, 5, nan_at=3)
    a.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = train(path, 2)
    b.close()
    return a, b, [str(w.message) for w in caught]


def test_a_rerun_into_the_same_path_is_a_run_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "exp1"
    a, b, messages = rerun(path)
    assert a.run_id != b.run_id and a.path == b.path == path
    assert b.run_path == path / b.run_id == b.rank_path and (b.run_path / "watch.sqlite").exists()
    assert re.fullmatch(r"run-\d{8}-\d{6}-[0-9a-f]{4}", b.run_id)
    assert messages == [
        f"{path} already holds 1 run; this one records into {path / b.run_id}/; "
        f"GradWatch.open({str(path)!r}) reads the latest (.runs lists them, "
        "GradWatch.open(path, run=<id>) reads one)"
    ]
    run = GradWatch.open(path)
    h = run.history()
    assert run.run_id == b.run_id and sorted(set(h.step)) == [0, 1] and len(h) == 2 * N_PARAMS
    assert "nonfinite" not in {x.kind for x in run.anomalies}  # run A's NaN stays in run A
    assert [(r.id, r.steps, r.ranks) for r in run.runs] == [
        (a.run_id, 5, (0,)),
        (b.run_id, 2, (0,)),
    ]
    assert run.runs[0].started is not None and run.runs[0].started <= run.runs[1].started
    assert a.run_id in repr(run.runs[0]) and "5 steps" in repr(run.runs[0])
    first = GradWatch.open(path, run=a.run_id)
    assert sorted(set(first.history().step)) == [0, 1, 2, 3, 4]
    assert [(x.step, x.kind) for x in first.anomalies][:1] == [(3, "nonfinite")]
    replay = first.anomalies[0].explore(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)))
    assert replay.report.nonfinite_origin is not None  # run A's flight record, from its folder
    assert list(a.run_path.glob("flight-*.pt")) and not list(b.run_path.glob("flight-*.pt"))
    assert GradWatch.open(path, run=run.runs[0]).run_id == a.run_id  # a RunInfo works too
    for opened in (run, first):
        opened.close()


def test_a_run_another_process_is_creating_does_not_stop_a_new_one(tmp_path: Path) -> None:
    """Two processes starting into one path (ranks=False under torchrun, two notebooks): one
    lists the other's run folder while its watch.sqlite has no tables yet. That failed with
    "no such table: meta" (CI, the two-rank watch test); the new run starts beside it, and the
    half-made run is listed as not started."""
    import sqlite3

    path = tmp_path / "exp"
    half = path / "run-20261202-133120-518b"
    half.mkdir(parents=True)
    sqlite3.connect(half / "watch.sqlite").close()  # the file exists, its tables do not
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "already holds 1 run"
        watch = train(path, 2)
    watch.close()
    assert watch.run_path != half
    runs = GradWatch.open(path).runs
    assert [(r.id, r.started, r.steps) for r in runs][0] == (half.name, None, 0)
    assert runs[-1].id == watch.run_id and runs[-1].steps == 2


def test_a_run_folder_opens_itself_and_unknown_ids_are_named(tmp_path: Path) -> None:
    a, b, _ = rerun(tmp_path / "exp1")
    alone = GradWatch.open(a.run_path)
    assert alone.run_id == a.run_id and [r.id for r in alone.runs] == [a.run_id]
    assert len(alone.history()) == 5 * N_PARAMS
    assert GradWatch.open(a.run_path / "watch.sqlite").run_id == a.run_id  # the file works too
    with pytest.raises(GradExplorerError, match=f"run='nope' is not in .*{b.run_id}"):
        GradWatch.open(tmp_path / "exp1", run="nope")
    with pytest.raises(FileNotFoundError, match="no GradWatch record"):
        GradWatch.open(tmp_path / "empty")
    alone.close()


def test_the_first_run_into_a_folder_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "exp1").mkdir()
    (tmp_path / "exp1" / "notes.txt").write_text("mine")  # not a run
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(tmp_path / "exp1", 1).close()


def test_a_record_of_an_earlier_version_still_opens(tmp_path: Path) -> None:
    """Earlier versions wrote watch.sqlite (and rank<r>/) directly into the path."""
    old = train(tmp_path / "src", 3)
    old.close()
    legacy = tmp_path / "exp1"
    shutil.copytree(old.rank_path, legacy)  # watch.sqlite directly in exp1/
    run = GradWatch.open(legacy)
    assert run.run_id == "exp1" and len(run.history()) == 3 * N_PARAMS and run.name == "exp1"
    run.close()
    with pytest.warns(UserWarning, match="already holds 1 run"):
        new = train(legacy, 2)
    new.close()
    run = GradWatch.open(legacy)
    assert [r.id for r in run.runs] == ["exp1", new.run_id] and run.run_id == new.run_id
    assert len(run.history()) == 2 * N_PARAMS
    old_run = GradWatch.open(legacy, run="exp1")
    assert len(old_run.history()) == 3 * N_PARAMS
    run.close()
    old_run.close()


def test_notebook_style_rerun_of_the_same_model(tmp_path: Path, monkeypatch) -> None:
    """A cell run twice: the same model, the same relative path, the first watch left open."""
    monkeypatch.chdir(tmp_path)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    first = train("runs/exp1", 3, model=model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = train("runs/exp1", 2, model=model)
    texts = [str(w.message) for w in caught]
    assert first.closed and any("already watched" in t for t in texts)
    assert sum("already holds 1 run" in t for t in texts) == 1
    assert second.path == Path("runs/exp1") and second.run_path.parent == Path("runs/exp1")
    assert sorted(set(second.history().step)) == [0, 1]
    second.close()
    run = GradWatch.open("runs/exp1")
    assert [r.steps for r in run.runs] == [3, 2] and len(run.history()) == 2 * N_PARAMS
    run.close()


def test_the_page_and_the_view_name_the_run_not_an_absolute_path(tmp_path: Path) -> None:
    _, b, _ = rerun(tmp_path / "exp1")
    run = GradWatch.open(tmp_path / "exp1")
    assert run.name == f"exp1/{b.run_id}" and b.name == run.name
    text = run.export_html(tmp_path / "page.html").read_text(encoding="utf-8")
    assert f"<title>GradWatch: exp1/{b.run_id}</title>" in text
    assert str(tmp_path) not in text
    pytest.importorskip("plotly")
    view = run.show()
    assert f"exp1/{b.run_id}" in view.status.value and str(tmp_path) not in view.status.value
    run.close()


def test_a_record_its_run_could_not_write_is_said_so(tmp_path: Path) -> None:
    """A full disk at the start leaves a 0-byte watch.sqlite (the run goes on in memory):
    GradWatch.open raised sqlite3's 'no such table: meta'."""
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):  # two runs in one folder
        watch = GradWatch(model, optimizer=opt, path=tmp_path)
        opt.zero_grad()
        model(torch.randn(4, 2)).sum().backward()
        opt.step()
        watch.close()
    opened = GradWatch.open(tmp_path)  # its latest run: the one broken below
    (broken,) = [r for r in opened.runs if r.id == opened.run_id]
    (good,) = [r for r in opened.runs if r.id != opened.run_id]
    opened.close()
    (broken.path / "watch.sqlite").write_bytes(b"")  # as the full disk left it
    for extra in broken.path.glob("watch.sqlite-*"):
        extra.unlink()
    with pytest.raises(GradExplorerError, match="holds nothing to read") as said:
        GradWatch.open(tmp_path, run=broken.id)
    assert good.id in str(said.value)  # the folder's other runs are named
    # the folder itself opens its latest run that says when it started: the good one
    assert GradWatch.open(tmp_path).run_id == good.id
    assert GradWatch.open(tmp_path, run=good.id).history().step.tolist() == [0, 0]
    # a folder holding only the broken run says so too
    alone = tmp_path / "alone"
    shutil.copytree(broken.path, alone / broken.id)
    with pytest.raises(GradExplorerError, match="holds nothing to read"):
        GradWatch.open(alone)
