"""GradWatch never stops a training loop: misuse, disk trouble and model changes give a message."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from small_models import CE, data, mlp
from torch import nn

from gradviz_widgets.watch import GradWatch, store


def train(model, opt, steps=3, x=None, y=None):
    if x is None:
        x, y = data()
    for _ in range(steps):
        opt.zero_grad()
        CE(model(x), y).backward()
        opt.step()


def test_watching_twice_closes_the_first_and_closing_twice_is_fine(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = GradWatch(model, optimizer=opt, path=tmp_path / "a")
    train(model, opt, 2)
    with pytest.warns(UserWarning, match="already watched"):
        second = GradWatch(model, optimizer=opt, path=tmp_path / "b")
    assert first.closed
    train(model, opt, 3)
    assert first.history().step.nunique() == 2
    assert second.history().step.nunique() == 3
    second.close()
    second.close()
    first.close()
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks


def test_unwritable_path_keeps_the_run_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="cannot write"):
        watch = GradWatch(model, optimizer=opt, path=blocker / "run")
    train(model, opt, 4)
    assert watch.history().step.nunique() == 4
    watch.close()


def test_full_disk_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_PAGE_COUNT", 12)  # a tiny "disk"
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(40)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", flush_s=0.05)
    x = torch.randn(4, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(60):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        h = watch.history()
    full = [w for w in caught if "could not write" in str(w.message)]
    assert len(full) == 1, [str(w.message) for w in caught]
    assert "full" in str(full[0].message)
    assert watch.store_error and h.step.nunique() == 60
    watch.close()


def test_parameter_added_later_is_watched_from_then_on(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    x, y = data()
    train(model, opt, 2, x, y)
    model.extra = nn.Parameter(torch.ones(3))
    opt.add_param_group({"params": [model.extra]})
    with pytest.warns(UserWarning, match="appeared at step 2"):
        for _ in range(2):
            opt.zero_grad()
            (CE(model(x), y) + model.extra.sum()).backward()
            opt.step()
    h = watch.history()
    extra = h[h.param == "extra"]
    assert extra.step.tolist() == [2, 3] and extra.norm.tolist() == pytest.approx([3**0.5] * 2)
    assert h.step.nunique() == 4
    watch.close()
    assert set(GradWatch.open(tmp_path / "run").history().param) >= {"extra", "fc1.weight"}


def test_model_moved_mid_run(tmp_path):
    # the same code path as a device move (CPU-only here): parameters change dtype in place
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    x, y = data()
    train(model, opt, 2, x, y)
    model.double()
    with pytest.warns(UserWarning, match="moved from cpu"):
        train(model, opt, 2, x.double(), y)
    h = watch.history()
    assert h.step.nunique() == 4 and h[h.step == 3].update_ratio.notna().all()
    watch.close()


def test_an_error_inside_the_watch_stops_recording_not_training(tmp_path, monkeypatch):
    from gradviz_widgets.watch import timing

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    train(model, opt, 2)

    def boom(tensors):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(timing, "grad_stats", boom)
    with pytest.warns(UserWarning, match="stopped recording at step 2"):
        train(model, opt, 3)
    assert watch.history().step.nunique() == 2
    watch.close()


def test_tensorboard_output_is_optional(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", tensorboard=True)
    train(model, opt, 3)
    watch.close()
    assert watch.rank_path.parent == tmp_path / "run"  # the run's own folder
    events = EventAccumulator(str(watch.rank_path / "tb")).Reload()
    assert "grad_norm/fc1.weight" in events.Tags()["scalars"]
    assert [e.step for e in events.Scalars("grad_norm/fc1.weight")] == [0, 1, 2]
    assert "log10_grad_norm" in events.Tags()["histograms"]


def test_tensorboard_keeps_a_nonfinite_step(tmp_path):
    """A NaN gradient is a point of its own in TensorBoard (TensorBoard marks it); leaving it out
    drew the line straight across it. A step without a gradient stays out."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", tensorboard=True)
    x = torch.randn(4, model.fc1.in_features)
    for step in range(4):
        opt.zero_grad()
        model(x).sum().backward()
        if step == 2:
            model.fc1.weight.grad[0, 0] = float("nan")
        if step == 3:
            model.fc1.weight.grad = None
        opt.step()
    watch.close()
    events = EventAccumulator(str(watch.rank_path / "tb")).Reload()
    points = {e.step: e.value for e in events.Scalars("grad_norm/fc1.weight")}
    assert sorted(points) == [0, 1, 2]
    assert math.isnan(points[2])


def test_an_unwritable_folder_is_named_by_store_error(tmp_path):
    """The start's failure stays in `store_error` once the writer runs (it read None)."""
    (tmp_path / "file").write_text("not a folder")
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="cannot write"):
        watch = GradWatch(model, optimizer=opt, path=tmp_path / "file" / "run")
    train(model, opt, 2)
    assert watch.store_error and "Error" in watch.store_error
    assert watch.history().step.nunique() == 2  # kept in memory
    watch.close()


def test_a_run_folder_deleted_mid_run_is_said_and_kept_in_memory(tmp_path):
    """`rm -rf runs/` while training: SQLite went on writing into the unlinked file, and the
    whole record was lost at close without a word."""
    import shutil

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "runs", flush_s=0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(model, opt, 5)
        watch.history()  # steps 0-4 reach the disk
        shutil.rmtree(tmp_path / "runs")
        train(model, opt, 5)
        watch.close()
    said = [str(w.message) for w in caught if "deleted or moved" in str(w.message)]
    assert len(said) == 1 and "in memory" in said[0]
    assert "deleted or moved" in (watch.store_error or "")
    assert watch.history().step.tolist() == sorted(watch.history().step.tolist())
    assert watch.history().step.nunique() == 10


def test_a_flight_record_that_cannot_be_saved_on_a_read_only_disk_stops_nothing(
    tmp_path, monkeypatch
):
    """Saving a flight record raised OSError (a read-only filesystem) and so did removing the
    half-written file: that stopped all recording, the anomaly's own step included."""
    from pathlib import Path

    from gradviz_widgets.watch import anomalies

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(anomalies.FlightRecord, "save", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    x, y = data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(6):
            opt.zero_grad()
            CE(model(x * (1e9 if k == 3 else 1.0)), y).backward()
            opt.step()
        h = watch.history()
    assert not [w for w in caught if "stopped recording" in str(w.message)]
    assert [w for w in caught if "could not save the flight record" in str(w.message)]
    assert h.step.nunique() == 6
    assert 3 in {a.step for a in watch.anomalies}
    monkeypatch.undo()
    watch.close()


def test_a_flight_note_that_cannot_be_written_leaves_no_half_file(tmp_path, monkeypatch):
    """A full disk left `.flights.json.tmp` behind in the run's folder."""
    from pathlib import Path

    from gradviz_widgets.watch.flight_book import FlightBook

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", full)
    FlightBook([tmp_path]).keep(None, {"kinds": {}})
    assert list(tmp_path.iterdir()) == []
