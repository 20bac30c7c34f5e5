"""What a step is, loop by loop: closures (LBFGS), GradScaler (AMP on the CPU), gradient
clipping, two optimizers, accumulation, sparse gradients. Every loop trains bitwise as its
unwatched twin, and every row equals a float64 hand reading of the gradient of that step."""

from __future__ import annotations

import contextlib
import copy
import math
import sqlite3
import warnings
from collections import OrderedDict

import pytest
import torch
from small_models import CE, data, mlp
from torch import nn

from gradviz_widgets.errors import GradExplorerError
from gradviz_widgets.vocabulary import Thresholds
from gradviz_widgets.watch import GradWatch


def hand(model: nn.Module, scale: float = 1.0) -> dict[str, tuple | None]:
    """norm, max |g| of each gradient in float64 (divided by the loss scale)."""
    out: dict[str, tuple | None] = {}
    for n, p in model.named_parameters():
        if p.grad is None:
            out[n] = None
            continue
        g = (p.grad.to_dense() if p.grad.is_sparse else p.grad).detach().double() / scale
        out[n] = (g.norm().item(), g.abs().max().item(), (g == 0).double().mean().item())
    return out


def check(h, step: int, expected: dict, names=None, rel: float = 1e-6) -> None:
    rows = h[h.step == step].set_index("param")
    assert rows.index.is_unique, f"step {step} has duplicate rows"
    for name in names or expected:
        want, r = expected[name], rows.loc[name]
        if want is None:
            assert r.status == "none", (step, name)
            continue
        assert r.norm == pytest.approx(want[0], rel=rel, abs=0, nan_ok=True), (step, name)
        assert r.max_abs == pytest.approx(want[1], rel=rel, abs=0, nan_ok=True), (step, name)
        assert r.zero_fraction == pytest.approx(want[2], abs=2e-5, nan_ok=True), (step, name)


def same_weights(a: nn.Module, b: nn.Module) -> None:
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), f"{n} trained differently under the watch"


def regression():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(16, 3)
    return model, x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3


@pytest.mark.parametrize("kind", ["lbfgs", "sgd"])
def test_closure_steps_record_the_first_closure_gradient(tmp_path, kind):
    model, x, y = regression()
    twin = copy.deepcopy(model)

    def make(m):
        if kind == "lbfgs":
            return torch.optim.LBFGS(m.parameters(), lr=0.5, max_iter=4)
        return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

    opt, twin_opt = make(model), make(twin)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    firsts = []
    for m, o, seen in ((model, opt, firsts), (twin, twin_opt, [])):
        for _ in range(4):
            calls: list = []

            def closure(m=m, o=o, calls=calls):
                o.zero_grad()
                loss = nn.functional.mse_loss(m(x), y)
                loss.backward()
                calls.append(hand(m))
                return loss

            o.step(closure)
            seen.append(calls[0])
            assert kind == "sgd" or len(calls) > 1  # LBFGS evaluated several times
    h = watch.history()
    assert sorted(h.step.unique()) == [0, 1, 2, 3]
    assert (h.status != "none").all()  # step 0 is the initial gradient, not a false None
    for k, expected in enumerate(firsts):
        check(h, k, expected)
    assert h.update_ratio.notna().all()
    same_weights(model, twin)
    watch.close()


def test_lbfgs_step_zero_equals_a_float64_reference(tmp_path):
    model, x, y = regression()
    ref = copy.deepcopy(model).double()
    nn.functional.mse_loss(ref(x.double()), y.double()).backward()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    with pytest.warns(UserWarning, match="evaluated its closure more than once at step 0") as said:
        opt.step(closure)
        opt.step(closure)  # said once per watch
    assert sum("closure more than once" in str(w.message) for w in said) == 1
    rows = watch.history().query("step == 0").set_index("param")
    for n, p in ref.named_parameters():
        assert rows.loc[n].norm == pytest.approx(p.grad.norm().item(), rel=1e-5), n
    watch.close()


def amp_loop(model, opt, scaler, x, y, steps, bad=(), clip=None, record=None):
    """AMP on the CPU (bfloat16 autocast); an Inf loss at the steps in `bad`."""
    for k in range(steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = CE(model(x), y)
        if k in bad:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        if record is not None:
            record.append((hand(model, scaler.get_scale()), scaler.get_scale()))
        if clip is not None:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(opt)
        scaler.update()


@pytest.mark.parametrize("clip", [None, 0.05])
def test_grad_scaler_skipped_steps_are_recorded_unscaled(tmp_path, clip):
    model, (x, y) = mlp(), data()
    twin = copy.deepcopy(model)
    opt, twin_opt = (
        torch.optim.Adam(model.parameters(), 1e-2),
        torch.optim.Adam(twin.parameters(), 1e-2),
    )
    scaler, twin_scaler = torch.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
    watch = GradWatch(model, optimizer=opt, scaler=scaler, path=tmp_path / "run")
    seen: list = []
    amp_loop(model, opt, scaler, x, y, 6, bad=(3,), clip=clip, record=seen)
    amp_loop(twin, twin_opt, twin_scaler, x, y, 6, bad=(3,), clip=clip)
    same_weights(model, twin)
    h = watch.history()
    assert sorted(h.step.unique()) == list(range(6))
    for k, (expected, scale) in enumerate(seen):
        check(h, k, expected)
        rows = h[h.step == k]
        assert (rows.scale == scale).all() and (rows.skipped == (k == 3)).all(), k
        assert (rows.clipped == (clip is not None and k != 3)).all(), k
    assert (h[h.step == 3].status == "nonfinite").all()
    assert seen[4][1] == seen[3][1] / 2  # the scaler backed off after the skipped step
    nonfinite = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert [a.step for a in nonfinite] == [3]
    assert "GradScaler skipped this step" in nonfinite[0].detail  # not a broken model
    assert sorted(nonfinite[0].params) == sorted(n for n, _ in model.named_parameters())
    watch.close()
    assert "update" not in vars(scaler)  # the wrapper is gone
    run = GradWatch.open(tmp_path / "run")
    assert run.history().skipped.tolist() == h.skipped.tolist()
    assert [a.detail for a in run.anomalies if a.kind == "nonfinite"] == [nonfinite[0].detail]
    run.close()


def test_scaler_in_use_without_scaler_argument_warns_once(tmp_path):
    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    scaler = torch.amp.GradScaler("cpu")
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seen: list = []
    with pytest.warns(UserWarning, match="scaler=scaler") as caught:
        amp_loop(model, opt, scaler, x, y, 3, record=seen)
    assert sum("scaler=scaler" in str(w.message) for w in caught) == 1
    # it names the loop's line (scaler.step), not a frame of the package or of torch
    assert [w.filename for w in caught if "scaler=scaler" in str(w.message)] == [__file__]
    h = watch.history()
    for k, (expected, scale) in enumerate(seen):
        check(h, k, expected)  # unscaled all the same
        assert (h[h.step == k].scale == scale).all(), k  # the calling scaler's, every step
    watch.close()


def test_clipping_keeps_the_pre_clip_norm_and_flags_exploding(tmp_path):
    model, (x, y) = mlp(), data()
    twin = copy.deepcopy(model)
    opt, twin_opt = (
        torch.optim.SGD(model.parameters(), 0.1),
        torch.optim.SGD(twin.parameters(), 0.1),
    )
    watch = GradWatch(
        model, optimizer=opt, path=tmp_path / "run", thresholds=Thresholds(exploding=0.05)
    )
    seen = []
    for m, o, out in ((model, opt, seen), (twin, twin_opt, [])):
        for _ in range(4):
            o.zero_grad()
            CE(m(x), y).backward()
            out.append(hand(m))
            total = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm=0.01)
            assert total > 0.05
            o.step()
    same_weights(model, twin)
    h = watch.history()
    for k, expected in enumerate(seen):
        check(h, k, expected)
    assert h.clipped.all()
    big = [n for n, v in seen[0].items() if v[0] > 0.05]
    exploding = [a for a in watch.anomalies if a.kind == "exploding"]
    assert exploding and exploding[0].step == 0 and sorted(exploding[0].params) == sorted(big)
    watch.close()


def test_clip_that_does_not_clip_is_not_flagged(tmp_path):
    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    for _ in range(3):
        opt.zero_grad()
        CE(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e6)  # in place, x1.0
        opt.step()
    h = watch.history()
    assert not h.clipped.any() and h.step.nunique() == 3
    watch.close()


class Gan(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.g = nn.Sequential(OrderedDict(fc=nn.Linear(2, 4), out=nn.Linear(4, 3)))
        self.d = nn.Sequential(OrderedDict(fc=nn.Linear(3, 4), out=nn.Linear(4, 1)))


def gan_loop(model, opt_g, opt_d, steps, seen=None):
    gen = torch.Generator().manual_seed(3)
    bce = nn.BCEWithLogitsLoss()
    for _ in range(steps):
        z, real = torch.randn(8, 2, generator=gen), torch.randn(8, 3, generator=gen)
        opt_d.zero_grad()
        fake = model.g(z)
        d_loss = bce(model.d(real), torch.ones(8, 1)) + bce(
            model.d(fake.detach()), torch.zeros(8, 1)
        )
        d_loss.backward()
        d_seen = {n: v for n, v in hand(model).items() if n.startswith("d.")}
        opt_d.step()
        opt_g.zero_grad()
        bce(model.d(fake), torch.ones(8, 1)).backward()  # also fills d's grads: not d's step
        g_seen = {n: v for n, v in hand(model).items() if n.startswith("g.")}
        opt_g.step()
        if seen is not None:
            seen.append({**d_seen, **g_seen})


def test_two_optimizers_one_row_per_parameter_and_round(tmp_path):
    model, twin = Gan(), Gan()
    opts = [torch.optim.Adam(m.g.parameters(), 1e-2) for m in (model, twin)]
    opts_d = [torch.optim.SGD(m.d.parameters(), 0.1) for m in (model, twin)]
    watch = GradWatch(
        model, optimizer=[opts[0], opts_d[0]], path=tmp_path / "run", update_ratio=True
    )
    seen: list = []
    with warnings.catch_warnings():  # D steps first: G's gradients are not D's `none`
        warnings.simplefilter("error")
        gan_loop(model, opts[0], opts_d[0], 5, seen)
    gan_loop(twin, opts[1], opts_d[1], 5)
    same_weights(model, twin)
    assert "none" not in watch._flights.notes["kinds"] and watch.anomalies == []
    h = watch.history()
    assert sorted(h.step.unique()) == list(range(5)) and len(h) == 5 * 8
    for k, expected in enumerate(seen):
        check(h, k, expected)
    assert h.update_ratio.notna().all() and watch.steps == 5
    watch.close()


def test_accumulation_records_the_accumulated_gradient(tmp_path):
    model, (x, y) = mlp(), data(16)
    twin = copy.deepcopy(model)
    opt, twin_opt = (
        torch.optim.SGD(model.parameters(), 0.2),
        torch.optim.SGD(twin.parameters(), 0.2),
    )
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seen = []
    for m, o, out in ((model, opt, seen), (twin, twin_opt, [])):
        for _ in range(3):
            o.zero_grad()
            for part in range(4):
                (CE(m(x[part::4]), y[part::4]) / 4).backward()
            out.append(hand(m))
            o.step()
    same_weights(model, twin)
    h = watch.history()
    assert h.step.nunique() == 3 and len(h) == 3 * 6
    for k, expected in enumerate(seen):
        check(h, k, expected)
    watch.close()


@pytest.mark.parametrize("kind", ["sparse_adam", "sgd"])
def test_sparse_gradients_every_step_exact(tmp_path, kind):
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Embedding(50, 4, sparse=True), nn.Flatten(), nn.Linear(12, 2))

    model, twin = make(), make()

    def opt_of(m):
        if kind == "sgd":
            return [torch.optim.SGD(m.parameters(), 0.1)]
        return [
            torch.optim.SparseAdam(m[0].parameters(), 0.1),
            torch.optim.Adam(m[2].parameters(), 0.1),
        ]

    opts, twin_opts = opt_of(model), opt_of(twin)
    watch = GradWatch(model, optimizer=opts, path=tmp_path / "run", update_ratio=True)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 50, (5, 3), generator=gen) for _ in range(4)]
    seen = []
    for m, os_, out in ((model, opts, seen), (twin, twin_opts, [])):
        for ids in batches:
            for o in os_:
                o.zero_grad()
            ids = torch.cat([ids, ids[:1]])  # a repeated row: duplicate sparse indices
            m(ids).square().mean().backward()
            out.append(hand(m))
            for o in os_:
                o.step()
    same_weights(model, twin)
    h = watch.history()
    assert h.step.nunique() == 4
    for k, expected in enumerate(seen):
        check(h, k, expected)  # exact, stored as float32
    watch.close()


def test_argument_checks(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with pytest.raises(GradExplorerError, match="GradScaler"):
        GradWatch(model, optimizer=opt, scaler=object(), path=tmp_path / "a")
    with pytest.raises(GradExplorerError, match="optimizer="):
        GradWatch(model, scaler=torch.amp.GradScaler("cpu"), path=tmp_path / "b")
    with pytest.raises(GradExplorerError, match="Optimizer"):
        GradWatch(model, optimizer=[opt, "sgd"], path=tmp_path / "c")


def test_a_record_without_the_steps_table_still_opens(tmp_path):
    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with GradWatch(model, optimizer=opt, path=tmp_path / "run") as watch:
        for _ in range(2):
            opt.zero_grad()
            CE(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            opt.step()
    db = sqlite3.connect(watch.run_path / "watch.sqlite")
    db.execute("DROP TABLE steps")
    db.commit()
    db.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = GradWatch.open(tmp_path / "run").history()
    assert len(h) == 12 and not h.clipped.any() and not h.skipped.any()
    assert all(math.isnan(s) for s in h.scale)


def test_clipping_that_starts_later_says_so_once(tmp_path):
    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seen = []
    with pytest.warns(UserWarning, match="changed in place") as caught:
        for k in range(5):
            opt.zero_grad()
            CE(model(x), y).backward()
            seen.append(hand(model))
            if k >= 2:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            opt.step()
    assert sum("changed in place" in str(w.message) for w in caught) == 1
    h = watch.history()
    flags = h.groupby("step").clipped.first()
    assert flags.isna().tolist() == [False, False, True, False, False]
    assert flags.fillna(False).tolist() == [False, False, False, True, True]
    for k in (0, 1, 3, 4):
        check(h, k, seen[k])  # step 2 holds what the optimizer applied (clipped)
    watch.close()


@pytest.mark.parametrize("given", [True, False])
def test_fused_optimizer_under_a_scaler_reads_unscaled(tmp_path, given):
    # a fused Adam gets the scaled gradient and the Inf flag from scaler.step
    model, (x, y) = mlp(), data()
    twin = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), 1e-2, fused=True)
    twin_opt = torch.optim.Adam(twin.parameters(), 1e-2, fused=True)
    scaler, twin_scaler = torch.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
    watch = GradWatch(model, optimizer=opt, scaler=scaler if given else None, path=tmp_path / "run")
    seen: list = []
    warns = contextlib.nullcontext() if given else pytest.warns(UserWarning, match="scaler=scaler")
    with warns:  # without scaler=, the scaler calling the fused step is found all the same
        amp_loop(model, opt, scaler, x, y, 5, bad=(2,), record=seen)
    amp_loop(twin, twin_opt, twin_scaler, x, y, 5, bad=(2,))
    same_weights(model, twin)
    h = watch.history()
    assert sorted(h.step.unique()) == list(range(5))
    for k, (expected, _) in enumerate(seen):
        check(h, k, expected)
    assert (h.skipped == (h.step == 2)).all()
    assert (h[h.step == 2].status == "nonfinite").all()
    watch.close()


@pytest.mark.parametrize("clip", [None, 0.05])
def test_fused_optimizer_under_an_unnamed_scaler_records_its_scale(tmp_path, clip):
    """scaler.step calls a fused Adam's step itself (no `_maybe_opt_step`): the watch, not given
    `scaler=`, still finds that GradScaler, records its scale at every step and warns once."""
    model, (x, y) = mlp(), data()
    twin = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), 1e-2, fused=True)
    twin_opt = torch.optim.Adam(twin.parameters(), 1e-2, fused=True)
    scaler, twin_scaler = (torch.amp.GradScaler("cpu", 2.0**8, growth_interval=2) for _ in "ab")
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seen: list = []
    with pytest.warns(UserWarning, match="scaler=scaler") as caught:
        amp_loop(model, opt, scaler, x, y, 6, bad=(3,), clip=clip, record=seen)
    assert sum("scaler=scaler" in str(w.message) for w in caught) == 1
    amp_loop(twin, twin_opt, twin_scaler, x, y, 6, bad=(3,), clip=clip)
    same_weights(model, twin)
    scales = [scale for _, scale in seen]
    assert scales == [256.0, 256.0, 512.0, 512.0, 256.0, 256.0]  # grew, backed off at the Inf
    h = watch.history()
    assert h.groupby("step").scale.agg(["min", "max"]).values.T.tolist() == [scales, scales]
    assert (h.skipped == (h.step == 3)).all()
    assert (h[h.step == 3].status == "nonfinite").all()
    for k, (expected, _) in enumerate(seen):
        if k != 3:
            check(h, k, expected)  # unscaled: float64 .grad / the step's scale
            assert (h[h.step == k].clipped == (clip is not None)).all(), k
    watch.close()


def test_a_replaced_head_with_kept_gradients_is_not_read_as_clipped(tmp_path):
    """zero_grad(set_to_none=False) keeps the old head's zeroed .grad; replacing the head between
    steps must not look like gradients changed in place (no clipping warning, clipped False)."""
    model, (x, _) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(4):
            if step == 2:
                model.fc3 = nn.Linear(model.fc3.in_features, 3)
                opt.add_param_group({"params": model.fc3.parameters()})
            opt.zero_grad(set_to_none=False)
            model(x).pow(2).sum().backward()
            expected = hand(model)
            opt.step()
            check(watch.history(), step, expected) if step == 3 else None
    assert not [w for w in caught if "changed in place" in str(w.message)]
    h = watch.history()
    assert not h.clipped.isna().any() and not h.clipped.any()
    watch.close()


def test_close_ends_the_tensorboard_writer_it_made(tmp_path):
    pytest.importorskip("tensorboard")
    import threading

    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    before = set(threading.enumerate())
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", tensorboard=True)
    for _ in range(2):
        opt.zero_grad()
        CE(model(x), y).backward()
        opt.step()
    watch.close()
    left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == [], left
