"""Every anomaly kind's first step keeps a flight record, and `anomaly.explore()` replays it.

Real training loops (SGD, real models); each replay must give the norms the watch recorded
for that step (the same batch, weights before the update, RNG states) and leave the model as
it was.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from model_state import assert_unchanged, model_state
from torch import nn
from torch.nn.utils import prune

from gradviz_widgets import GradExplorer
from gradviz_widgets.errors import GradExplorerError
from gradviz_widgets.examples import dead_branch_example, nan_mid_graph_net
from gradviz_widgets.vocabulary import Thresholds
from gradviz_widgets.watch import GradWatch

CE = nn.CrossEntropyLoss()


class Gated(nn.Module):
    """A branch `b` that some steps skip (keyword call): its parameters get no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 8)
        self.drop, self.head = nn.Dropout(0.3), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, skip: bool = False) -> torch.Tensor:
        h = torch.relu(self.a(x))
        return self.head(self.drop(h if skip else torch.relu(self.b(h))))


def dropout_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))


def train(model, path, steps=4, scale=lambda s: 1.0, call=None, bad=None, **options):
    """SGD steps on fixed random batches; returns the watch, each step's pre-update state and
    each step's target."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=path, **options)
    g = torch.Generator().manual_seed(1)
    states, targets = {}, {}
    for step in range(steps):
        x = torch.randn(6, model_inputs(model), generator=g)
        if step == bad:
            x[1] = 0.0  # nan_mid_graph_net: a NaN gradient in fc1.weight, finite loss
        y = torch.randint(0, 3, (6,), generator=g)
        opt.zero_grad()
        out = call(model, x, step) if call else model(x)
        (CE(out, y) * scale(step)).backward()
        states[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        targets[step] = y
        opt.step()
    return watch, states, targets


def model_inputs(model: nn.Module) -> int:
    return next(m for m in model.modules() if isinstance(m, nn.Linear)).in_features


def assert_replays(ex: GradExplorer, watch_or_run, step: int, state: dict) -> None:
    """The explorer's norms are the recorded norms of `step`; its model holds `state`."""
    assert isinstance(ex, GradExplorer)
    h = watch_or_run.history()
    rows = h[h.step == step].set_index("param")
    norms, status = ex.report.param_norms, ex.report.param_status
    assert set(rows.index) == set(norms)
    for name, row in rows.iterrows():
        got, recorded = norms[name], row.norm
        assert status[name] == row.status, name  # the same statuses, from the same thresholds
        if row.status == "none":
            assert got is None, name
            continue
        assert got is not None, name
        if not math.isfinite(recorded):
            assert not math.isfinite(got) and str(got) == str(recorded), (name, got, recorded)
        else:
            assert got == pytest.approx(recorded, rel=1e-6, abs=0.0), name
    twin = ex.model.state_dict()
    assert set(twin) == set(state)
    for k, v in state.items():  # bitwise, NaN weights (after a NaN step) included
        torch.testing.assert_close(twin[k], v, rtol=0, atol=0, equal_nan=True, msg=k)


def explore_all(watch, states, targets, loss=CE, model=None) -> dict[str, int]:
    """explore() on every listed anomaly replays its step exactly (a later anomaly of a kind
    already seen, on another parameter, has a record of its own). Returns kind -> first step."""
    first: dict[str, int] = {}
    for a in watch.anomalies:
        first.setdefault(a.kind, a.step)
        ex = a.explore(model, loss_fn=loss, target=targets[a.step])
        assert_replays(ex, watch, a.step, states[a.step])
        assert a.kind in a.flight_record.kinds
    return first


def test_first_anomaly_zero_explores(tmp_path):
    model, _, _ = dead_branch_example()
    watch, states, targets = train(model, tmp_path / "run")
    first = watch.anomalies[0]
    assert first.kind == "zero" and first.step == 0  # the README's watch.anomalies[0]
    before = model_state(model)
    ex = first.explore(loss_fn=CE, target=targets[0])
    assert_replays(ex, watch, 0, states[0])
    assert ex.report.param_status["gate.weight"] == "zero"
    assert_unchanged(model, before)
    explore_all(watch, states, targets)
    watch.close()


def test_exploding_with_dropout_replays_the_rng(tmp_path):
    th = Thresholds(vanishing=1e-12, exploding=0.3)
    watch, states, targets = train(dropout_mlp(), tmp_path / "run", thresholds=th)
    first = explore_all(watch, states, targets)
    assert "exploding" in first
    ex = watch.anomalies[0].explore(loss_fn=CE, target=targets[first["exploding"]])
    assert ex.thresholds == th  # the watch's thresholds: the same statuses
    watch.close()


def test_vanishing_later_step_has_its_own_record(tmp_path):
    watch, states, targets = train(
        dropout_mlp(), tmp_path / "run", steps=5, scale=lambda s: 1e-12 if s >= 2 else 1.0
    )
    first = explore_all(watch, states, targets, loss=lambda o, t: CE(o, t) * 1e-12)
    assert first["vanishing"] == 2
    assert not torch.equal(states[2]["0.weight"], states[0]["0.weight"])  # updated weights
    watch.close()


def test_none_from_a_skipped_branch_keyword_call(tmp_path):
    torch.manual_seed(0)
    model = Gated()
    watch, states, targets = train(
        model, tmp_path / "run", call=lambda m, x, s: m(x=x, skip=s == 2)
    )
    none = [a for a in watch.anomalies if a.kind == "none"]
    assert none[0].step == 2 and "b.weight" in none[0].params
    assert watch._flights[2].kwargs["skip"] is True
    ex = none[0].explore(loss_fn=CE, target=targets[2])
    assert_replays(ex, watch, 2, states[2])
    assert ex.report.param_norms["b.weight"] is None
    watch.close()


def test_nonfinite_and_other_kinds_of_one_run(tmp_path):
    torch.manual_seed(0)
    model = nan_mid_graph_net()
    th = Thresholds(vanishing=1e-12, exploding=0.5)
    watch, states, targets = train(model, tmp_path / "run", steps=5, bad=3, thresholds=th)
    first = explore_all(watch, states, targets)
    assert first["nonfinite"] == 3 and "exploding" in first
    ex = [a for a in watch.anomalies if a.kind == "nonfinite"][0].explore(
        loss_fn=CE, target=targets[3]
    )
    assert ex.report.nonfinite_origin is not None
    watch.close()


def test_explore_from_disk_with_a_fresh_model(tmp_path):
    model, _, _ = dead_branch_example()
    watch, states, targets = train(model, tmp_path / "run")
    watch.close()
    run = GradWatch.open(tmp_path / "run")
    fresh, _, _ = dead_branch_example()
    before = model_state(fresh)
    first = explore_all(run, states, targets, model=fresh)
    assert first["zero"] == 0
    assert_unchanged(fresh, before)
    assert sorted(p.name for p in watch.run_path.glob("flight-*.pt")) == ["flight-0.pt"]


def test_over_budget_is_skipped_with_a_warning_and_a_reason(tmp_path):
    model, _, _ = dead_branch_example()
    with pytest.warns(UserWarning, match="flight_budget_mb") as caught:
        watch, _, targets = train(model, tmp_path / "run", flight_budget_mb=0.0001)
    assert sum("flight_budget_mb" in str(w.message) for w in caught) == 1  # one skip, one warning
    with pytest.raises(GradExplorerError, match=r"flight_budget_mb=\d+\) keeps it"):
        watch.anomalies[0].explore(loss_fn=CE, target=targets[0])
    watch.close()
    with pytest.raises(GradExplorerError, match="flight_budget_mb"):
        GradWatch.open(tmp_path / "run").anomalies[0].explore(dead_branch_example()[0])
    with pytest.raises(GradExplorerError, match="flight_budget_mb"):
        GradWatch(model, flight_budget_mb=-1)


def test_budget_keeps_room_for_a_nan_record(tmp_path):
    torch.manual_seed(0)
    model = nan_mid_graph_net()
    size = sum(t.numel() * t.element_size() for t in model.state_dict().values()) + 6 * 8 * 4
    th = Thresholds(vanishing=1e-12, exploding=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch, states, targets = train(
            model, tmp_path / "run", bad=3, thresholds=th, flight_budget_mb=1.5 * size / 2**20
        )
    assert any("room for a NaN/Inf record" in str(w.message) for w in caught)
    assert list(watch._flights) == [3]
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"][0]
    assert_replays(nan.explore(loss_fn=CE, target=targets[3]), watch, 3, states[3])
    watch.close()


def weight_norm_legacy() -> nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return nn.Sequential(nn.utils.weight_norm(nn.Linear(4, 8)), nn.ReLU(), nn.Linear(8, 3))


def weight_norm_parametrized() -> nn.Module:
    torch.manual_seed(0)
    wn = nn.utils.parametrizations.weight_norm(nn.Linear(4, 8))
    return nn.Sequential(wn, nn.ReLU(), nn.Linear(8, 3))


def pruned() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    prune.l1_unstructured(model[0], "weight", amount=0.5)
    return model


@pytest.mark.parametrize("build", [pruned, weight_norm_legacy, weight_norm_parametrized])
def test_reparametrized_models_explore_exactly(tmp_path, build):
    model = build()
    th = Thresholds(vanishing=1e-12, exploding=1e-3)  # exploding from step 0
    watch, states, targets = train(model, tmp_path / "run", steps=2, thresholds=th)
    before = model_state(model)
    first = explore_all(watch, states, targets)
    assert first["exploding"] == 0
    assert_unchanged(model, before)
    watch.close()
    explore_all(GradWatch.open(tmp_path / "run"), states, targets, model=build())


def test_missing_records_say_why(tmp_path):
    model, x, y = dead_branch_example()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = CE(model(x), y)  # the forward ran before the watch existed
    with pytest.warns(UserWarning, match="no call of the model's forward"):
        watch = GradWatch(model, optimizer=opt, path=tmp_path / "late")
        opt.zero_grad()
        loss.backward()
        opt.step()
    with pytest.raises(GradExplorerError, match="the watch was created after it"):
        watch.anomalies[0].explore()
    watch.close()
    with pytest.raises(GradExplorerError, match="the watch was created after it"):
        GradWatch.open(tmp_path / "late").anomalies[0].explore(model)
    off, _, _ = train(dead_branch_example()[0], tmp_path / "off", flight_recorder=False)
    with pytest.raises(GradExplorerError, match="flight_recorder=False"):
        off.anomalies[0].explore()
    off.close()


class TwoBranches(nn.Module):
    """out = a(x) * s[0] + b(x) * s[1]: `s` picks which branch's gradients explode."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self.a(x) * s[0] + self.b(x) * s[1]


def test_a_later_anomaly_of_a_kind_already_seen_has_its_own_record(tmp_path):
    """`exploding` first in a.* at step 1, then in b.* at step 3: two anomalies of one kind,
    and explore() of each replays its own step (the README's promise for every anomaly)."""
    torch.manual_seed(0)
    model, x = TwoBranches(), torch.randn(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-9)
    scales = [(1.0, 1.0), (1e6, 1.0), (1.0, 1.0), (1.0, 1e6)]
    watch = GradWatch(model, optimizer=opt, path=tmp_path)
    states = []
    for s in scales:
        opt.zero_grad()
        model(x, torch.tensor(s)).sum().backward()
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        opt.step()
    found = [(a.step, a.kind, sorted(a.params)) for a in watch.anomalies]
    assert found == [
        (1, "exploding", ["a.bias", "a.weight"]),
        (3, "exploding", ["b.bias", "b.weight"]),
    ]
    for a in watch.anomalies:
        assert_replays(a.explore(), watch, a.step, states[a.step])
    watch.close()


class Partly(nn.Module):
    """An MLP and a layer its forward never calls (a "none" anomaly at step 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.unused = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def test_an_autocast_step_replays_under_its_autocast(tmp_path):
    """A bf16 autocast + GradScaler loop: explore() runs the step as it ran (the float32
    replay's norms are off by ~1 %, the first try-out's finding), from memory and from disk;
    a replay asked for in float32 (autocast=None) is one."""
    torch.manual_seed(0)
    model = Partly()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    watch = GradWatch(model, optimizer=opt, scaler=scaler, loss_fn=CE, path=tmp_path / "run")
    states, targets = [], []
    for _ in range(3):
        x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        targets.append(y)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = CE(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    first = watch.anomalies[0]
    assert first.step == 0 and first.kind == "none"
    ex = first.explore(target=targets[0])
    assert ex.autocast is torch.bfloat16
    assert_replays(ex, watch, 0, states[0])
    plain = first.explore(target=targets[0], autocast=None).report.param_norms["used.0.weight"]
    assert abs(plain / ex.report.param_norms["used.0.weight"] - 1) > 1e-3  # float32 differs
    watch.close()
    run = GradWatch.open(tmp_path / "run")
    again = run.anomalies[0].explore(model, loss_fn=CE, target=targets[0])
    assert_replays(again, run, 0, states[0])
