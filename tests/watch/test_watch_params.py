"""GradWatch follows every parameter of the model by name for the whole run: frozen ones every
step (None, reason "frozen", no anomaly), and parameters unfrozen, replaced, added or removed
mid-run from the step they change, on real training loops with real optimizers."""

from __future__ import annotations

import copy
import math
import sqlite3
import time
import warnings
from collections.abc import Callable

import pytest
import torch
from model_state import model_state
from torch import nn
from torch.nn.modules import module as module_mod

from gradviz_widgets.vocabulary import STYLES
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.events import Event
from gradviz_widgets.watch.figures import heatmap_figure
from gradviz_widgets.watch.params import ParamSet

CE = nn.CrossEntropyLoss()


class Block(nn.Module):
    """A ResNet basic block (two 3x3 convolutions, batch norm, identity shortcut)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class Net(nn.Module):
    """Stem, two stages, pooled linear head; `spare` is trainable and never used."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.stage1 = nn.Sequential(Block(8), Block(8))
        self.stage2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), Block(16))
        self.head = nn.Linear(16, 5)
        self.spare = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stage2(self.stage1(torch.relu(self.stem(x))))
        return self.head(y.mean(dim=(2, 3)))


def net(frozen: tuple[str, ...] = ("stem", "stage1")) -> Net:
    torch.manual_seed(0)
    model = Net()
    for name in frozen:
        getattr(model, name).requires_grad_(False)
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)


def names_of(module: nn.Module, prefix: str) -> set[str]:
    return {f"{prefix}.{n}" for n, _ in module.named_parameters()}


def hand(model: nn.Module) -> dict[str, float | None]:
    """What a user's loop reads: the float64 norm of each p.grad (None without one)."""
    return {
        n: None if p.grad is None else p.grad.detach().double().norm().item()
        for n, p in model.named_parameters()
    }


Change = Callable[[nn.Module, torch.optim.Optimizer | None], None]


def train(model, opt, steps: int, changes: dict[int, Change] | None = None) -> list[dict]:
    """`steps` steps (an optimizer step each, or one backward each without one); `changes[k]`
    runs before step k. Returns hand(model) of every step."""
    x, y = batch()
    seen = []
    for k in range(steps):
        if changes and k in changes:
            changes[k](model, opt)
        (opt or model).zero_grad()
        CE(model(x), y).backward()
        seen.append(hand(model))
        if opt is not None:
            opt.step()
    return seen


def check_rows(h, seen: list[dict], frozen_at: Callable[[int, str], bool] = lambda k, n: False):
    for k, expected in enumerate(seen):
        rows = h[h.step == k].set_index("param")
        for name, norm in expected.items():
            r = rows.loc[name]
            if norm is None:
                assert r.status == "none" and math.isnan(r.norm), (k, name)
                assert r.reason == ("frozen" if frozen_at(k, name) else "no gradient"), (k, name)
            else:
                assert r.norm == pytest.approx(norm, rel=1e-6, abs=0), (k, name)
                assert r.reason == "", (k, name)


def change_warnings(caught) -> list[str]:
    """The parameter-change warnings, each of which names the user's line (the training loop
    here), not a line of the package."""
    hits = [w for w in caught if "watch.events lists every change" in str(w.message)]
    assert all(w.filename == __file__ for w in hits), [w.filename for w in hits]
    return [str(w.message) for w in hits]


def test_frozen_stage_is_recorded_every_step_as_frozen(tmp_path):
    model = net()
    frozen = names_of(model.stem, "stem") | names_of(model.stage1, "stage1")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # frozen ones included
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seen = train(model, opt, 4)
    h = watch.history()
    assert len(h) == 4 * len(dict(model.named_parameters()))
    frame = h[h.param.isin(frozen)]
    assert len(frame) == 4 * len(frozen) and set(frame.status) == {"none"}
    assert set(frame.reason) == {"frozen"}
    check_rows(h, seen, lambda k, n: n in frozen)
    spare = h[h.param.str.startswith("spare")]
    assert set(spare.reason) == {"no gradient"}  # trainable, no gradient: an anomaly
    nones = [a for a in watch.anomalies if a.kind == "none"]
    assert [a.params for a in nones] == [["spare.weight", "spare.bias"]]
    assert watch.events == [Event(0, n, "frozen") for n in h.param.cat.categories if n in frozen]
    # the live heat map has the frozen rows, drawn as None
    fig = heatmap_figure(watch.overview(), watch._writer.params, watch.thresholds)
    none_trace = next(t for t in fig["data"] if t["name"] == STYLES["none"].label)
    rows = dict(zip(none_trace["y"], none_trace["z"].tolist()))
    assert frozen <= set(rows) and all(rows[n] == [1.0] * 4 for n in frozen)
    watch.close()


@pytest.mark.parametrize("add_group", [False, True])
def test_unfreeze_at_step_3(tmp_path, add_group):
    model = net(frozen=("stage1",))
    stage1 = names_of(model.stage1, "stage1")
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable if add_group else model.parameters(), lr=1e-2)

    def unfreeze(m, o):
        m.stage1.requires_grad_(True)
        if add_group:
            o.add_param_group({"params": list(m.stage1.parameters())})

    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    before = model.stage1[0].conv1.weight.detach().clone()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = train(model, opt, 6, {3: unfreeze})
    assert len(change_warnings(caught)) == 1 and "unfrozen at step 3" in change_warnings(caught)[0]
    assert "recorded again from now on" in change_warnings(caught)[0]
    assert not torch.equal(before, model.stage1[0].conv1.weight)  # it trained from step 3
    h = watch.history()
    check_rows(h, seen, lambda k, n: n in stage1 and k < 3)
    rows = h[h.param.isin(stage1)]
    assert rows[rows.step >= 3].norm.notna().all() and rows[rows.step < 3].norm.isna().all()
    assert rows[rows.step >= 3].update_ratio.gt(0).all()
    events = [e for e in watch.events if e.param in stage1]
    assert sorted(events) == sorted(
        [Event(0, n, "frozen") for n in stage1] + [Event(3, n, "unfrozen") for n in stage1]
    )
    assert not any(set(a.params) & stage1 for a in watch.anomalies if a.kind == "none")
    watch.close()


def test_unfrozen_without_add_param_group_is_said_to_train_no_more(tmp_path):
    """The optimizer built from the trainable parameters, stage1 unfrozen at step 3 without
    `add_param_group`: stage1 gets gradients the optimizer never applies (update ratio 0, the
    only trace of it before, a stranger's try-out); the watch says so, once, at step 3, naming
    the user's line. With every parameter in the optimizer, nothing is said."""
    for add_group in (False, True):
        model = net(frozen=("stage1",))
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)

        def unfreeze(m, o, add=add_group):
            m.stage1.requires_grad_(True)
            if add:
                o.add_param_group({"params": list(m.stage1.parameters())})

        watch = GradWatch(model, optimizer=opt, path=tmp_path / f"run{add_group}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train(model, opt, 5, {3: unfreeze})
        lost = [w for w in caught if "no watched optimizer holds them" in str(w.message)]
        if add_group:
            assert lost == []
        else:
            assert len(lost) == 1 and "at step 3" in str(lost[0].message)
            assert "stage1." in str(lost[0].message) and lost[0].filename == __file__
        watch.close()


def test_head_replaced_by_a_new_linear_reads_the_new_tensor(tmp_path):
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    heads = {}

    def replace(m, o):
        m.head = heads["new"] = nn.Linear(16, 5)
        o.add_param_group({"params": list(m.head.parameters())})

    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    old = model.head
    ratios = {}
    x, y = batch()
    seen = []
    for k in range(5):
        if k == 2:
            replace(model, opt)
        opt.zero_grad()
        CE(model(x), y).backward()
        seen.append(hand(model))
        w0 = model.head.weight.detach().double().clone()
        opt.step()
        ratios[k] = ((model.head.weight.double() - w0).norm() / w0.norm()).item()
    h = watch.history()
    assert h.param.nunique() == len(dict(model.named_parameters()))  # the same rows, no new ones
    check_rows(h, seen, lambda k, n: n.startswith(("stem", "stage1")))
    head = h[h.param == "head.weight"].set_index("step")
    for k in range(5):
        assert head.loc[k].update_ratio == pytest.approx(ratios[k], rel=1e-5), k
    assert old.weight.grad is None and heads["new"].weight.grad is not None
    assert [e for e in watch.events if e.kind != "frozen"] == [
        Event(2, "head.weight", "replaced"),
        Event(2, "head.bias", "replaced"),
    ]
    watch.close()


def test_load_state_dict_assign_replaces_every_parameter(tmp_path):
    model = net(frozen=())
    other = Net()  # different weights
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def load(m, o):
        m.load_state_dict(copy.deepcopy(other.state_dict()), assign=True)
        o.param_groups[0]["params"] = list(m.parameters())

    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    first = dict(model.named_parameters())
    with pytest.warns(UserWarning, match=r"\d+ parameter\(s\) were replaced at step 2"):
        seen = train(model, opt, 4, {2: load})
    assert all(p is not first[n] for n, p in model.named_parameters())
    check_rows(watch.history(), seen)
    assert {e.param for e in watch.events} == set(first)
    assert {(e.step, e.kind) for e in watch.events} == {(2, "replaced")}
    watch.close()


def test_parameters_written_into_module_dicts_are_caught(tmp_path):
    # torch's own `_apply` under overwrite_module_params_on_conversion writes new Parameters
    # straight into `_parameters` (no registration hook fires, the lengths stay): the old
    # tensors stop getting gradients, and that is when the watch looks again
    model = net(frozen=())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def convert(m, o):
        torch.__future__.set_overwrite_module_params_on_conversion(True)
        try:
            m.double()
        finally:
            torch.__future__.set_overwrite_module_params_on_conversion(False)
        m.float()  # _apply again, the default way: same objects
        o.param_groups[0]["params"] = list(m.parameters())

    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    first = dict(model.named_parameters())
    with pytest.warns(UserWarning, match="were replaced at step 2"):
        seen = train(model, opt, 4, {2: convert})
    assert all(p is not first[n] for n, p in model.named_parameters())
    check_rows(watch.history(), seen)
    assert not [a for a in watch.anomalies if a.kind == "none" and "head.weight" in a.params]
    assert {(e.step, e.kind) for e in watch.events} == {(2, "replaced")}
    watch.close()


def test_parameters_added_and_removed_mid_run(tmp_path):
    model = net(frozen=())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def add(m, o):
        m.head.register_parameter("scale", nn.Parameter(torch.full((5,), 2.0)))
        m.head.forward = lambda t: (
            nn.functional.linear(t, m.head.weight, m.head.bias) * m.head.scale
        )
        o.add_param_group({"params": [m.head.scale]})

    def remove(m, o):
        del m.spare

    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seen = train(model, opt, 6, {2: add, 4: remove})
    h = watch.history()
    scale = h[h.param == "head.scale"]
    assert scale.step.tolist() == [2, 3, 4, 5]  # no rows before it appeared
    assert scale.norm.tolist() == pytest.approx([s["head.scale"] for s in seen[2:]], rel=1e-6)
    spare = h[h.param == "spare.weight"]
    assert spare.reason.tolist() == ["no gradient"] * 4 + ["removed"] * 2
    nones = [a for a in watch.anomalies if a.kind == "none"]
    assert [(a.step, a.params) for a in nones] == [(0, ["spare.weight", "spare.bias"])]
    assert watch.events == [
        Event(2, "head.scale", "added"),
        Event(4, "spare.weight", "removed"),
        Event(4, "spare.bias", "removed"),
    ]
    watch.close()


def test_without_optimizer_changes_are_followed_and_hooked(tmp_path):
    # only the head trains: when it is replaced, no hooked parameter is left to announce the
    # backward; the forward pre-hook hooks the new head before its backward
    model = net(frozen=("stem", "stage1", "stage2"))
    before_hooks = model_state(model)["hooks"]
    watch = GradWatch(model, path=tmp_path / "run")
    heads = []

    def replace(m, o):
        old = m.head
        m.head = nn.Linear(16, 5)
        heads.append(old)

    def unfreeze(m, o):
        m.stage2.requires_grad_(True)

    seen = train(model, None, 5, {2: replace, 3: unfreeze})
    h = watch.history()
    assert h.step.nunique() == 5
    stage2 = names_of(model.stage2, "stage2")
    frozen_at = lambda k, n: n.startswith(("stem", "stage1")) or (n in stage2 and k < 3)  # noqa: E731
    check_rows(h, seen, frozen_at)
    kinds = sorted({(e.step, e.kind) for e in watch.events})
    assert kinds == [(0, "frozen"), (2, "replaced"), (3, "unfrozen")]
    watch.close()
    assert model_state(model)["hooks"] == before_hooks
    every = [*model.parameters(), *heads[0].parameters()]
    assert all(p._post_accumulate_grad_hooks is None for p in every)


def test_a_run_opened_from_disk_shows_events_and_reasons(tmp_path):
    model = net(frozen=("stage1",))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    with pytest.warns(UserWarning, match="unfrozen at step 2"):
        train(model, opt, 4, {2: lambda m, o: m.stage1.requires_grad_(True)})
    live, events = watch.history(), watch.events
    watch.close()
    run = GradWatch.open(tmp_path / "run")
    assert run.events == events and any(e.kind == "unfrozen" for e in events)
    assert run.history().reason.tolist() == live.reason.tolist()
    assert "frozen" in set(live.reason)
    # a record written before the events table existed still opens (no events, no frozen rows)
    db_file = watch.rank_path / "watch.sqlite"
    assert db_file.exists()
    with sqlite3.connect(db_file) as db:
        db.execute("DROP TABLE events")
    db.close()
    old = GradWatch.open(tmp_path / "run")
    assert old.events == []
    assert set(old.history().reason) <= {"", "no gradient"}


def test_close_restores_hook_dicts_after_changes(tmp_path):
    model = net(frozen=("stage1",))

    def users_hook(p: torch.Tensor) -> None:
        pass

    mine = model.stage2[0].weight.register_post_accumulate_grad_hook(users_hook)
    before = model_state(model)
    global_before = dict(module_mod._global_parameter_registration_hooks)
    own_dicts = {n: p._post_accumulate_grad_hooks for n, p in model.named_parameters()}
    watch = GradWatch(model, path=tmp_path / "run")
    kept = model.head
    changes = {
        1: lambda m, o: m.stage1.requires_grad_(True),
        2: lambda m, o: setattr(m, "head", nn.Linear(16, 5)),
        3: lambda m, o: setattr(m, "head", kept),  # the first head back
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train(model, None, 4, changes)
        model.stage1.requires_grad_(False)
    model.zero_grad()
    watch.close()
    assert dict(module_mod._global_parameter_registration_hooks) == global_before
    assert {n: p._post_accumulate_grad_hooks for n, p in model.named_parameters()} == own_dicts
    assert list(model.stage2[0].weight._post_accumulate_grad_hooks.values()) == [users_hook]
    after = model_state(model)
    assert after["hooks"] == before["hooks"] and after["global_hooks"] == before["global_hooks"]
    assert after["attrs"] == before["attrs"]
    mine.remove()


def _scripted(model: Net, opt: torch.optim.Optimizer) -> dict[int, Change]:
    def replace(m, o):
        torch.manual_seed(7)
        m.head = nn.Linear(16, 5)
        o.add_param_group({"params": list(m.head.parameters())})

    def unfreeze(m, o):
        m.stage1.requires_grad_(True)

    def add(m, o):
        m.stage2[0].register_parameter("gain", nn.Parameter(torch.ones(1)))
        o.add_param_group({"params": [m.stage2[0].gain]})

    return {1: unfreeze, 2: replace, 3: add, 4: lambda m, o: m.stem.requires_grad_(True)}


def test_training_is_bitwise_that_of_an_unwatched_twin(tmp_path):
    runs = []
    for watched in (False, True):
        model = net()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        watch = GradWatch(model, optimizer=opt, path=tmp_path / "run") if watched else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train(model, opt, 6, _scripted(model, opt))
        runs.append((model, opt))
        if watch is not None:
            assert {e.kind for e in watch.events} == {"frozen", "unfrozen", "replaced", "added"}
            watch.close()
    (a, oa), (b, ob) = runs
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in b.named_parameters()]
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q) and p.requires_grad == q.requires_grad, n
    for (n, s), t in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(s, t), n
    sa, sb = oa.state_dict(), ob.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for k, st in sa["state"].items():
        for key, v in st.items():
            assert torch.equal(v, sb["state"][k][key]), (k, key)


def _best(*fns: Callable[[], object]) -> list[float]:
    """The best thread time of 100 calls of each, measured in turns (the same load for all)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(15):
        for fn, out in zip(fns, times):
            t0 = time.thread_time()
            for _ in range(100):
                fn()
            out.append(time.thread_time() - t0)
    return [min(t) / 100 for t in times]


@pytest.mark.parametrize("frozen", [0, 900])
def test_the_per_step_check_is_cheaper_than_the_loops_it_replaced(frozen):
    # 1,000 parameters. All trainable: gradients() (the gradients plus the change check) costs
    # less than the two passes over .grad the recorder made before (no check at all). 900
    # frozen (a fine-tune): it reads their flags every step, still far from walking the model.
    model = nn.Sequential(
        *[nn.Sequential(*[nn.Linear(4, 4) for _ in range(10)]) for _ in range(50)]
    )
    params = list(model.parameters())
    for p in params[:frozen]:
        p.requires_grad_(False)
    for p in params[frozen:]:
        p.grad = torch.zeros_like(p)
    watched = ParamSet(model, None)
    assert len(watched.take()[0]) == 1000
    ids, grads = watched.gradients(0)
    assert len(watched.params) == 1000 and ids == list(range(frozen, 1000))

    def before() -> None:
        ids = [i for i, p in enumerate(params) if p.grad is not None]
        [g for g in (params[i].grad for i in ids) if g is not None]
        sum(map(len, watched._dicts))

    if frozen:
        new, walk = _best(lambda: watched.gradients(0), lambda: dict(model.named_parameters()))
        assert new < walk / 2, (new, walk)
    else:  # measured ~0.6x; the margin is for a loaded machine
        new, old = _best(lambda: watched.gradients(0), before)
        assert new < 1.2 * old, (new, old)
    assert watched.take() == ([], [])  # nothing changed: no event, no rescan
    watched.detach()


def test_the_live_view_draws_lines_of_parameters_that_have_norms(tmp_path):
    # the frozen stage is None every step (ranked above healthy in a bucket): its rows stay in
    # the heat map, but the default lines are of parameters with something to draw
    from gradviz_widgets.watch.figures import default_selection

    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    train(model, opt, 3)
    watch.history()
    picked = default_selection(watch.overview(), watch._writer.params)
    assert len(picked) == 4 and not [n for n in picked if n.startswith(("stem", "stage1"))]
    watch.close()


def test_a_frozen_stage_keeps_no_none_flight_record(tmp_path):
    # the flight recorder keeps the first step of each anomaly kind: frozen rows are not one
    model = net()
    del model.spare  # every trainable parameter gets a gradient
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    train(model, opt, 3)
    assert not [a for a in watch.anomalies if a.kind == "none"]
    assert "none" not in (watch._flights.notes or {}).get("kinds", {})
    assert len(watch._flights) == 0
    watch.close()
