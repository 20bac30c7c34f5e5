"""A step that calls the model more than once (two views of a batch, accumulation): the flight
record counts the calls, and `anomaly.explore()`, which replays one call, says so (a warning and
a finding of the report) instead of showing that call's norms as the step's."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.anomalies import FlightRecord, replay

BAD = 3  # the step whose first input holds an Inf


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def two_views(model: nn.Module, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    return ((model(x1) - model(x2)) ** 2).mean()


def one_call(model: nn.Module, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    return (model(torch.cat([x1, x2])) ** 2).mean()


def train(model: nn.Module, path, loss: Callable, steps: int = 5, **options) -> GradWatch:
    """SGD steps on random pairs of views; the first view of step BAD holds an Inf."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=path, **options)
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        x1, x2 = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
        if step == BAD:
            x1[0, 0] = float("inf")
        opt.zero_grad()
        loss(model, x1, x2).backward()
        opt.step()
    return watch


def nonfinite(watch) -> object:
    return next(a for a in watch.anomalies if a.kind == "nonfinite" and a.step == BAD)


def explored(anomaly, model: nn.Module | None = None) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ex = anomaly.explore(model, loss_fn=lambda out: (out**2).mean())
    return ex, [str(w.message) for w in seen]


def about_calls(texts) -> list[str]:
    return [t for t in texts if "called the model" in t or "no call of the model" in t]


def test_two_calls_warn_and_the_report_says_so(tmp_path):
    watch = train(net(), tmp_path / "run", two_views)
    anomaly = nonfinite(watch)
    assert anomaly.flight_record.calls == 2
    assert watch._flights.notes["steps"][str(BAD)]["calls"] == 2
    ex, texts = explored(anomaly)
    [said] = about_calls(texts)
    assert f"step {BAD} called the model 2 times" in said
    assert "replays one call, the last" in said and "not the step's" in said
    assert "watch a module whose one forward makes every call" in said
    assert ex.report.findings[0].startswith(f"step {BAD} called the model 2 times")
    assert "not the step's" in ex.report.findings[0]
    again = ex.run()  # a click's re-run of the replay still says so
    assert again is not ex.history[-2] and again.findings[0] == ex.history[-2].findings[0]
    watch.close()


def test_a_run_opened_from_disk_warns_too(tmp_path):
    watch = train(net(), tmp_path / "run", two_views)
    watch.close()
    _, texts = explored(nonfinite(GradWatch.open(tmp_path / "run")), net())
    assert len(about_calls(texts)) == 1


def test_one_call_a_step_replays_without_a_word(tmp_path):
    watch = train(net(), tmp_path / "run", one_call)
    anomaly = nonfinite(watch)
    assert anomaly.flight_record.calls == 1
    ex, texts = explored(anomaly)
    assert about_calls(texts) == [] and about_calls(ex.report.findings) == []
    assert ex.report.nonfinite_origin is not None  # the Inf is in the replayed call
    watch.close()


def test_calls_without_gradients_are_not_counted_nor_replayed(tmp_path):
    """An evaluation under no_grad and a teacher's targets after the training call: the step's
    one call with gradients is counted and is the one recorded."""

    def with_teacher(model, x1, x2):
        out = model(x1)
        with torch.no_grad():
            model(x2)  # a no-grad call after the training call: not the step's batch
        return (out**2).mean()

    def loop(model, x1, x2):
        with torch.inference_mode():
            model(x2)  # an evaluation between steps
        return with_teacher(model, x1, x2)

    watch = train(net(), tmp_path / "run", loop)
    record = nonfinite(watch).flight_record
    assert record.calls == 1 and not torch.isfinite(record.args[0]).all()
    _, texts = explored(nonfinite(watch))
    assert about_calls(texts) == []
    watch.close()


def test_a_checkpoint_recompute_is_no_call_of_its_own(tmp_path):
    def checkpointed(model, x1, x2):
        return (checkpoint(model, torch.cat([x1, x2]), use_reentrant=False) ** 2).mean()

    watch = train(net(), tmp_path / "run", checkpointed)
    assert nonfinite(watch).flight_record.calls == 1
    watch.close()


def test_accumulation_is_several_calls_too(tmp_path):
    """Two micro-batches per step: the replay is the last one's, and says so."""

    def micro(model, x1, x2):
        ((model(x1) ** 2).mean() / 2).backward()  # the Inf is in the first micro-batch
        return (model(x2) ** 2).mean() / 2

    watch = train(net(), tmp_path / "run", micro)
    _, texts = explored(nonfinite(watch))
    assert "called the model 2 times" in about_calls(texts)[0]
    watch.close()


def test_several_optimizers_add_the_calls_of_their_round(tmp_path):
    """The second optimizer's gradient comes from both calls of the round (no zero_grad
    between): its record counts them; the first's, made after one call, counts one."""
    model = net()
    opts = [torch.optim.SGD(model[i].parameters(), 0.01) for i in (0, 2)]
    watch = GradWatch(model, optimizer=opts, path=tmp_path / "run")
    for step in range(3):
        for o in opts:
            o.zero_grad()
        (model(torch.randn(4, 8)) ** 2).mean().backward()
        opts[0].step()
        x = torch.randn(4, 8)
        x[0, 0] = float("nan") if step == 1 else x[0, 0]
        model(x).sum().backward()
        opts[1].step()
    notes = watch._flights.notes["steps"]
    assert notes["1"]["kinds"] == ["nonfinite"] and notes["1"]["calls"] == 2
    assert watch._flights.get(1).calls == 2
    watch.close()


def test_a_closure_evaluated_again_is_no_call_of_the_next_step(tmp_path):
    """LBFGS evaluates its closure again after the step's reading: `Flights.step_done` at the
    step's end (the recorder's step post-hook) drops those calls."""
    model = net()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    for step in range(4):
        x = torch.randn(6, 8)
        x[0, 0] = float("nan") if step == 2 else x[0, 0]

        def closure(x: torch.Tensor = x) -> torch.Tensor:
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            return loss

        opt.step(closure)
    assert watch._flights.get(2).calls == 1
    watch.close()


def test_an_older_record_without_the_count_replays_as_before(tmp_path):
    watch = train(net(), tmp_path / "run", two_views)
    record = nonfinite(watch).flight_record
    watch.close()
    saved = {f: getattr(record, f) for f in record.__dataclass_fields__ if f != "calls"}
    torch.save(saved, tmp_path / "old.pt")
    old = FlightRecord.load(tmp_path / "old.pt")
    assert old.calls is None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ex = replay(old, net(), lambda out: (out**2).mean())
    assert about_calls([str(w.message) for w in seen]) == []
    assert about_calls(ex.report.findings) == []


@pytest.mark.parametrize("calls", [0, 3])
def test_the_words_for_no_call_and_many(calls):
    from gradviz_widgets.watch.anomalies import not_one_call

    said = not_one_call(7, calls)
    assert "step 7" in said and ("no call of the model" in said) == (calls == 0)
    assert len(not_one_call(7, calls, short=True)) < len(said)
