"""A `nonfinite` anomaly names the parameters that held NaN/Inf values before its step's update
(where the NaN/Inf gradients start), in the API, the SQLite record, the offline page and the
live view's hover text; finite steps pay nothing for it, and the training run (weights,
`.grad`, optimizer and scaler state, every RNG) is bitwise the same as without the watch."""

from __future__ import annotations

import json
import random
import sqlite3

import numpy as np
import torch
from torch import nn

from gradviz_widgets.examples import nan_mid_graph_net
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch import holders as holders_mod
from gradviz_widgets.watch.holders import UNCHECKED_ON_DEVICE, Held, HeldCheck
from gradviz_widgets.watch.page import page_data
from gradviz_widgets.watch.steps import StepRecord
from gradviz_widgets.watch.writer import SKIPPED_DETAIL, _nonfinite_said

CE = nn.CrossEntropyLoss()


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)
    )


def seed_all() -> None:
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)


def bits(t: torch.Tensor) -> tuple:
    """The exact bytes (NaN == NaN when their bits are equal)."""
    return (
        str(t.dtype),
        tuple(t.shape),
        t.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes(),
    )


def everything(model: nn.Module, *stateful: object) -> dict:
    """Weights, gradients, optimizer / scaler state and the RNG states, as exact bytes."""
    out: dict = {f"p:{n}": bits(p) for n, p in model.named_parameters()}
    out |= {f"g:{n}": None if p.grad is None else bits(p.grad) for n, p in model.named_parameters()}
    for k, obj in enumerate(stateful):
        out[f"state{k}"] = _plain(obj.state_dict())  # type: ignore[attr-defined]
    out["torch_rng"] = bits(torch.get_rng_state())
    out["numpy_rng"] = repr(np.random.get_state())
    out["random_rng"] = random.getstate()
    return out


def _plain(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return bits(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def adam_loop(
    model: nn.Sequential, opt: torch.optim.Optimizer, steps: int = 5, bad: int = 2
) -> None:
    """Adam on random batches (drawn from the global RNG, and dropout); at step `bad` one
    weight of layer 3 is set to Inf before the forward, so every gradient turns NaN."""
    for k in range(steps):
        x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
        if k == bad:
            with torch.no_grad():
                model[3].weight[0, 0] = float("inf")
        opt.zero_grad()
        CE(model(x), y).backward()
        opt.step()


def test_inf_weight_is_named_by_the_anomaly_everywhere_and_the_run_is_untouched(tmp_path):
    model, twin = mlp(), mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    twin_opt = torch.optim.Adam(twin.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    seed_all()
    adam_loop(model, opt)
    watched = everything(model, opt)
    seed_all()
    adam_loop(twin, twin_opt)
    assert watched == everything(twin, twin_opt)  # bitwise: weights, .grad, Adam state, RNGs

    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert [a.step for a in nan] == [2]
    assert nan[0].held == ["3.weight"]
    assert len(nan[0].params) == 6  # every gradient turned NaN; the weight is the clue
    said = "3.weight holds NaN/Inf (1 of 64 elements) before this step's update"
    assert said in nan[0].detail
    assert "NaN/Inf held in 3.weight" in repr(nan[0])
    # the live view: the anomaly's mark says it on hover
    heat, _ = watch.show().figures()
    hover = [n.get("hovertext", "") for n in heat["layout"]["annotations"]]
    assert any(said in h for h in hover)
    watch.close()

    # the SQLite record holds it, and a run read back from disk says the same
    db = sqlite3.connect(watch.rank_path / "watch.sqlite")
    rows = [
        json.loads(r[0])
        for r in db.execute("SELECT params FROM anomalies WHERE kind=?", ("nonfinite",))
    ]
    db.close()
    assert rows[0]["held"] == [["3.weight", 1, 64, None]]
    run = GradWatch.open(tmp_path / "run")
    back = [a for a in run.anomalies if a.kind == "nonfinite"][0]
    assert back.held == ["3.weight"] and said in back.detail
    data = page_data(run)  # the offline page's anomaly table
    assert any(row[1] == "nonfinite" and said in row[3] for row in data["anomalies"])
    run.close()


def test_a_weight_made_nan_by_an_earlier_update_is_named_with_that_step(tmp_path):
    """Step 3: an all-zero row makes only fc1.weight's gradient NaN (no weight holds NaN yet);
    Adam's update makes fc1.weight NaN; step 4: every gradient is NaN, and the anomaly of the
    parameters turning NaN there names fc1.weight, whose gradient was NaN first, at step 3."""
    torch.manual_seed(0)
    model = nan_mid_graph_net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    g = torch.Generator().manual_seed(1)
    for k in range(6):
        x = torch.randn(4, 8, generator=g)
        if k == 3:
            x[1] = 0.0
        opt.zero_grad()
        CE(model(x), torch.tensor([0, 1, 2, 0])).backward()
        opt.step()
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert [(a.step, a.params) for a in nan] == [
        (3, ["fc1.weight"]),
        (4, ["head.weight", "head.bias"]),
    ]
    assert nan[0].held == [] and "no parameter held NaN/Inf" in nan[0].detail
    assert nan[1].held == ["fc1.weight"]
    assert "fc1.weight holds NaN/Inf (128 of 128 elements" in nan[1].detail
    assert "its gradient was NaN/Inf first, at step 3" in nan[1].detail
    watch.close()


def amp_loop(model, opt, scaler, steps: int = 5, bad: int = 2) -> None:
    for k in range(steps):
        x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
        if k == bad:
            with torch.no_grad():
                model[3].weight[1, 2] = float("inf")
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = CE(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def test_grad_scaler_skipped_step_names_the_inf_weight_and_leaves_the_run_alone(tmp_path):
    model, twin = mlp(), mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    twin_opt = torch.optim.Adam(twin.parameters(), lr=1e-2)
    scaler, twin_scaler = torch.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
    watch = GradWatch(model, optimizer=opt, scaler=scaler, path=tmp_path / "run")
    seed_all()
    amp_loop(model, opt, scaler)
    watched = everything(model, opt, scaler)
    seed_all()
    amp_loop(twin, twin_opt, twin_scaler)
    assert watched == everything(twin, twin_opt, twin_scaler)
    h = watch.history()
    assert h[h.step >= 2].skipped.all() and not h[h.step < 2].skipped.any()
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert [a.step for a in nan] == [2] and nan[0].held == ["3.weight"]
    assert SKIPPED_DETAIL in nan[0].detail
    assert "3.weight holds NaN/Inf (1 of 64 elements)" in nan[0].detail
    watch.close()


def test_finite_steps_count_nothing_and_a_broken_run_counts_once(tmp_path, monkeypatch):
    calls: list[int] = []
    real = holders_mod.nonfinite_counts

    def counting(params):  # type: ignore[no-untyped-def]
        calls.append(len(params))
        return real(params)

    monkeypatch.setattr(holders_mod, "nonfinite_counts", counting)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seed_all()
    adam_loop(model, opt, steps=2, bad=99)  # finite steps: no count, no detail
    assert calls == []
    adam_loop(model, opt, steps=4, bad=0)  # every later step is NaN (Adam spread it)
    assert calls == [6]  # once: the step where gradients first turned NaN
    assert len(watch.history()) == 6 * 6
    watch.close()


def test_two_optimizers_name_the_holder_once(tmp_path):
    model = mlp()
    opt_a = torch.optim.Adam(model[0].parameters(), lr=1e-2)
    opt_b = torch.optim.SGD([*model[3].parameters(), *model[5].parameters()], lr=1e-2)
    watch = GradWatch(model, optimizer=[opt_a, opt_b], path=tmp_path / "run")
    seed_all()
    for k in range(3):
        x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
        if k == 1:
            with torch.no_grad():
                model[0].bias[3] = float("nan")
        opt_a.zero_grad(), opt_b.zero_grad()
        CE(model(x), y).backward()
        opt_a.step(), opt_b.step()
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert nan[0].step == 1 and nan[0].held == ["0.bias"]
    assert "0.bias holds NaN/Inf (1 of 8 elements)" in nan[0].detail
    watch.close()


def test_statistics_left_on_a_device_are_not_read_and_the_anomaly_says_so():
    check = HeldCheck()
    assert check.check(0, None, [0], [torch.ones(2)], ["w"]) is UNCHECKED_ON_DEVICE
    finite = np.array([[1.0, 1.0, 2.0]])
    assert check.check(0, finite, [0], [torch.ones(2)], ["w"]) is None
    rec = StepRecord(5, 0.0, np.array([0]), values=np.full((1, 5), np.nan))
    rec.held = UNCHECKED_ON_DEVICE
    row = _nonfinite_said([(5, "nonfinite", ["w"])], [rec])[0]
    assert "was not checked" in row[2]["detail"] and "held" not in row[2]
    rec.held = Held((("w", 2, 2, None),))
    row = _nonfinite_said([(5, "nonfinite", ["w"])], [rec])[0]
    assert row[2]["held"] == [["w", 2, 2, None]]


def test_flight_recorder_does_not_read_device_statistics_without_sync_check(tmp_path):
    """A tensor on the meta device stands for an accelerator's: reading it would fail."""
    model = mlp()
    watch = GradWatch(model, optimizer=torch.optim.SGD(model.parameters(), 0.1), path=tmp_path)
    flights = watch._recorder.flights
    assert flights is not None
    flights.sync_check = False
    assert flights.host_stats(torch.empty(3, 3, device="meta")) is None
    watch.close()


def test_a_skipped_step_without_holders_says_no_weight_held_nan():
    """The GradScaler's own overflow (no weight holding NaN/Inf) says so after the skip
    sentence: the anomaly never leaves the holders unsaid (a stranger's CPU bf16 loop)."""
    rec = StepRecord(7, 0.0, np.array([0]), values=np.full((1, 5), np.nan))
    rec.info, rec.held = (True, 65536.0, False), Held()
    detail = _nonfinite_said([(7, "nonfinite", ["w"])], [rec])[0][2]["detail"]
    assert detail.startswith(SKIPPED_DETAIL) and "no parameter held NaN/Inf" in detail


def _written_after_backward(
    tmp_path, steps: int, at: int, where: tuple, clip: bool = False
) -> GradWatch:
    """A watched mlp trained with SGD; at step `at`, between backward and step, an Inf is
    written into layer `where[0]`'s `where[1]` gradient at index `where[2]`."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seed_all()
    for k in range(steps):
        x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
        opt.zero_grad()
        CE(model(x), y).backward()
        if k == at:
            layer, name, index = where
            getattr(model[layer], name).grad[index] = float("inf")
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return watch


def test_nan_made_between_backward_and_step_is_recorded_at_its_step(tmp_path):
    """An Inf written into a gradient after backward, which clip_grad_norm_ turns into NaN and
    the optimizer applies: that step records the NaN the update applied (it had kept its
    backward's finite numbers, and only the next step's anomaly told of it), and its anomaly
    says the NaN was made between backward and step."""
    watch = _written_after_backward(tmp_path, 4, 1, (0, "bias", 0), clip=True)
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert nan[0].step == 1 and nan[0].params == ["0.bias"]  # 0 x Inf; the others: x 0
    assert nan[0].detail == holders_mod.MADE_DETAIL
    steps = watch.history()
    at = steps[steps.step == 1].set_index("param")
    assert at.status["0.bias"] == "nonfinite" and (at.norm.drop("0.bias") == 0).all()
    assert not at.clipped.any()
    watch.close()


def test_a_nan_made_by_averaging_over_no_tokens_is_recorded_at_its_step(tmp_path):
    """Averaging by token count by hand (`p.grad /= n`), with a batch of padding only (n = 0):
    the update applies 0/0 = NaN. That step reads NaN/Inf, not the backward's exact zeros (it
    read `zero`, clipped, and the NaN anomaly came a step late, blaming the weights); after an
    earlier in-place change a NaN written into .grad is no clipping either."""
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seed_all()
    for k in range(4):
        x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
        mask = torch.zeros(6) if k == 3 else torch.ones(6)
        opt.zero_grad()
        (nn.functional.cross_entropy(model(x), y, reduction="none") * mask).sum().backward()
        for p in model.parameters():
            p.grad /= mask.sum()
        opt.step()
    steps = watch.history()
    assert (steps[steps.step == 3].status == "nonfinite").all()
    assert (steps[steps.step < 3].status == "healthy").all()
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert [a.step for a in nan] == [3] and nan[0].detail == holders_mod.MADE_DETAIL
    assert not [a for a in watch.anomalies if a.kind == "zero"]
    watch.close()


def test_the_first_change_to_grad_being_a_nan_says_it_may_come_from_that_change(tmp_path):
    """The run's first in-place change to .grad after step 0 writes an Inf (the backward's
    numbers were not read then): the anomaly said the NaN/Inf arose in the forward or backward;
    it now says the gradients were changed in place and the NaN/Inf may come from that."""
    watch = _written_after_backward(tmp_path, 5, 3, (0, "weight", (0, 0)))
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert nan[0].step == 3 and nan[0].params == ["0.weight"]
    assert nan[0].detail == holders_mod.CHANGED_DETAIL
    watch.close()
