"""Outside tests of what GradWatch captures: copies of a watched model (EMA, SWA, torch.save),
steps without a backward, gradients assigned by hand, optimizers stepping at different rates
(WGAN's critic), lazy modules, and a construction that fails half way."""

from __future__ import annotations

import copy
import functools
import io
import sqlite3
import subprocess
import sys
import threading
import warnings

import pytest
import torch
from torch import nn

from gradviz_widgets.errors import GradExplorerError
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.model_hooks import ModelHook, inert
from gradviz_widgets.watch.recorder import Recorder


def small() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def rows_of(watch: GradWatch, param: str):
    return watch.history().query("param == @param").set_index("step")


def model_hooks(model: nn.Module, kind: type = ModelHook) -> list:
    return [
        h
        for m in model.modules()
        for d in (m._forward_pre_hooks, m._forward_hooks)
        for h in d.values()
        if isinstance(h, kind)
    ]


def inert_hooks(model: nn.Module) -> list:
    """The copies of our hooks: the standard library's `inert()` (model_hooks.py)."""
    return [h for h in model_hooks(model, functools.partial) if h.func == inert().func]


@pytest.mark.parametrize("with_opt", [True, False])
def test_copies_of_a_watched_model_are_not_watched(tmp_path, with_opt):
    m = small()
    opt = torch.optim.SGD(m.parameters(), 0.1)
    watch = GradWatch(m, optimizer=opt if with_opt else None, path=tmp_path, spikes=False)
    opt.zero_grad()
    m(torch.randn(3, 4)).sum().backward()
    opt.step()
    twin = copy.deepcopy(m)
    swa = torch.optim.swa_utils.AveragedModel(m)
    buffer = io.BytesIO()
    torch.save(m, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for other in (twin, swa.module, loaded):
        assert not model_hooks(other) and inert_hooks(other)
    assert all(h.fn is not None for h in model_hooks(m))  # the original is still watched
    twin_opt = torch.optim.SGD(twin.parameters(), 0.1)
    for other, o in ((twin, twin_opt), (loaded, None)):
        other(torch.randn(3, 4)).sum().backward()  # nothing reaches the watch
        if o is not None:
            o.step()
    assert watch.steps == 1
    opt.zero_grad()
    m(torch.randn(3, 4)).sum().backward()
    opt.step()
    swa.update_parameters(m)
    assert watch.steps == 2 and sorted(watch.history().step.unique()) == [0, 1]
    watch.close()


CHECKPOINT_ELSEWHERE = """
import sys, torch
sys.modules["gradviz_widgets"] = None  # a machine without the package
model = torch.load(sys.argv[1], weights_only=False)
out = model(torch.ones(1, 4))
print(tuple(out.shape), sorted({type(h).__module__ for m in model.modules()
      for d in (m._forward_pre_hooks, m._forward_hooks) for h in d.values()}))
"""


def test_a_checkpoint_saved_mid_run_loads_without_the_package(tmp_path):
    """`torch.save(model)` while watched pickled a copy of our hook class: loading it where
    gradviz_widgets is not installed failed ("No module named 'gradviz_widgets'")."""
    m = small()
    opt = torch.optim.SGD(m.parameters(), 0.1)
    watch = GradWatch(m, optimizer=opt, path=tmp_path / "run", spikes=False)
    m(torch.randn(3, 4)).sum().backward()
    opt.step()
    torch.save(m, tmp_path / "model.pt")
    watch.close()
    done = subprocess.run(
        [sys.executable, "-c", CHECKPOINT_ELSEWHERE, str(tmp_path / "model.pt")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "2)", "['functools']"]


def stepping_loop(clip: bool, bad: tuple[int, ...], steps: int = 6):
    """zero_grad(set_to_none=False) and a NaN guard that skips backward but still steps."""
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    return m, opt, [torch.randn(8, 4) for _ in range(steps)], bad, clip


def run_stepping(watch_path, clip: bool, bad: tuple[int, ...]):
    m, opt, xs, bad, clip = stepping_loop(clip, bad)
    watch = GradWatch(m, optimizer=opt, path=watch_path, spikes=False)
    applied, pre = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "changed in place" warning for a skipped backward
        for k, x in enumerate(xs):
            opt.zero_grad(set_to_none=False)
            loss = m(x).pow(2).mean() * (float("nan") if k in bad else 1.0)
            if torch.isfinite(loss):
                loss.backward()
                pre.append(m.weight.grad.double().norm().item())
                if clip:
                    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.3)
            else:
                pre.append(None)
            applied.append(m.weight.grad.double().norm().item())
            opt.step()
    return watch, applied, pre


def test_a_step_without_backward_records_the_zero_gradient_it_applies(tmp_path):
    watch, applied, _ = run_stepping(tmp_path, clip=False, bad=(1, 4))
    r = rows_of(watch, "weight")
    for k, norm in enumerate(applied):
        assert r.norm[k] == pytest.approx(norm, rel=1e-6, abs=0), k
    assert r.status[1] == "zero" and r.status[4] == "zero"
    assert not r.clipped.any()
    zero = [a for a in watch.anomalies if a.kind == "zero" and "weight" in a.params]
    assert [a.step for a in zero] == [1]
    watch.close()


def test_clipped_loop_with_a_skipped_backward_is_not_read_from_the_last_backward(tmp_path):
    watch, applied, pre = run_stepping(tmp_path, clip=True, bad=(2,))
    r = rows_of(watch, "weight")
    for k in range(len(applied)):
        if pre[k] is None:  # no backward: what the optimizer applies (zeros), not clipped
            assert r.norm[k] == 0.0 and r.status[k] == "zero" and str(r.clipped[k]) == "False"
        else:  # the pre-clip norm, flagged
            assert r.norm[k] == pytest.approx(pre[k], rel=1e-6) and str(r.clipped[k]) == "True"
    watch.close()


def test_gradients_assigned_by_hand_are_read_at_the_step(tmp_path):
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), 0.1)
    watch = GradWatch(m, optimizer=opt, path=tmp_path, spikes=False)
    applied = []
    for k in range(5):
        opt.zero_grad()
        loss = m(torch.randn(5, 4)).pow(2).mean()
        if k % 2 == 0:
            loss.backward()
            if k == 4:  # one gradient replaced by a new tensor after backward
                m.weight.grad = m.weight.grad * 3.0
        else:  # PCGrad style: torch.autograd.grad, assigned
            for p, g in zip(m.parameters(), torch.autograd.grad(loss, list(m.parameters()))):
                p.grad = 0.5 * g
        applied.append({n: p.grad.double().norm().item() for n, p in m.named_parameters()})
        opt.step()
    h = watch.history()
    for k, expected in enumerate(applied):
        for name, norm in expected.items():
            row = h[(h.step == k) & (h.param == name)].iloc[0]
            assert row.norm == pytest.approx(norm, rel=1e-6), (k, name)
            assert str(row.clipped) == "False", (k, name)
    watch.close()


class Wgan(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.G = nn.Linear(4, 6)
        self.D = nn.Linear(6, 1)


def wgan(tmp_path, generator_steps: int, critic: int = 5):
    m = Wgan()
    og = torch.optim.Adam(m.G.parameters(), 1e-3)
    od = torch.optim.Adam(m.D.parameters(), 1e-3)
    watch = GradWatch(m, optimizer=[og, od], path=tmp_path, spikes=False, flight_recorder=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(generator_steps):
            for _ in range(critic):
                od.zero_grad()
                fake = m.G(torch.randn(8, 4)).detach()
                (m.D(fake).mean() - m.D(torch.randn(8, 6)).mean()).backward()
                od.step()
            og.zero_grad()
            (-m.D(m.G(torch.randn(8, 4))).mean()).backward()
            og.step()
        watch.close()
    said = [str(w.message) for w in caught if "different rates" in str(w.message)]
    return watch, said


@pytest.mark.parametrize("generator_steps", [20, 4])  # past the buffer's 64 steps, and within
def test_critic_steps_at_another_rate_never_write_a_step_twice(tmp_path, generator_steps):
    watch, said = wgan(tmp_path, generator_steps)
    h = watch.history()
    assert not h.duplicated(["step", "param"]).any()
    assert sorted(h.step.unique()) == list(range(generator_steps))  # complete rounds only
    assert (h.status != "none").all() and (h.reason == "").all()
    assert not [a for a in watch.anomalies if a.kind == "none"]
    assert len(said) == 2 and "different iterations" in said[0] and "NOT recorded" in said[1]
    note = GradWatch.open(tmp_path).meta["rounds"]
    lost = 5 * generator_steps - generator_steps
    assert (
        f"{lost} step(s) not recorded (steps {generator_steps}-{5 * generator_steps - 1})" in note
    )
    db = sqlite3.connect(watch.rank_path / "watch.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key = 'rounds'").fetchone() == (note,)
    db.close()


def test_a_discriminator_stepping_every_other_iteration_is_said_while_training(tmp_path):
    """A GAN whose discriminator steps on every 2nd iteration: its k-th step is paired with
    the generator's k-th, an iteration apart. Said when the generator is two steps ahead
    (before the watch closes), and in the run's meta."""
    m = Wgan()
    og = torch.optim.Adam(m.G.parameters(), 1e-3)
    od = torch.optim.Adam(m.D.parameters(), 1e-3)
    watch = GradWatch(m, optimizer=[og, od], path=tmp_path, spikes=False, flight_recorder=False)
    at = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for it in range(6):
            if it % 2 == 0:
                od.zero_grad()
                m.D(m.G(torch.randn(8, 4)).detach()).mean().backward()
                od.step()
            og.zero_grad()
            (-m.D(m.G(torch.randn(8, 4))).mean()).backward()
            og.step()
            at.append(sum("different iterations" in str(w.message) for w in caught))
        watch.close()
    assert at == [0, 0, 0, 1, 1, 1]  # at the generator's 4th step, the discriminator's 2nd done
    assert "different iterations" in GradWatch.open(tmp_path).meta["rounds"]


def test_lockstep_optimizers_write_no_note(tmp_path):
    watch, said = wgan(tmp_path, 6, critic=1)
    h = watch.history()
    assert sorted(h.step.unique()) == list(range(6)) and not said
    assert "rounds" not in GradWatch.open(tmp_path).meta


def test_an_uninitialised_lazy_module_is_refused_and_nothing_is_made(tmp_path):
    m = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD(m.parameters(), 0.1)
    before = {t for t in threading.enumerate() if "GradWatch" in t.name}
    with pytest.raises(GradExplorerError, match="run one forward pass first"):
        GradWatch(m, optimizer=opt, path=tmp_path / "runs")
    assert not (tmp_path / "runs").exists() and not model_hooks(m)
    assert {t for t in threading.enumerate() if "GradWatch" in t.name} == before
    assert not opt._optimizer_step_pre_hooks
    m(torch.randn(2, 5))  # run once: then it is watched
    with GradWatch(m, optimizer=opt, path=tmp_path / "runs") as watch:
        opt.zero_grad()
        m(torch.randn(2, 5)).sum().backward()
        opt.step()
    assert len(watch.history()) == 4


class Grows(nn.Module):
    """A lazy head added mid-run (no forward has run it yet when it is registered)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(5, 4)
        self.head: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        return h if self.head is None else self.head(h)


def test_a_lazy_module_added_mid_run_is_watched_once_materialised(tmp_path):
    m = Grows()
    watch = GradWatch(m, path=tmp_path, spikes=False)  # one step per backward
    seen = []
    for k in range(4):
        if k == 2:
            m.head = nn.LazyLinear(1)
        m.zero_grad()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            m(torch.randn(2, 5)).sum().backward()
        seen.append({n: p.grad.double().norm().item() for n, p in m.named_parameters()})
    h = watch.history()
    for k, expected in enumerate(seen):
        for name, norm in expected.items():
            row = h[(h.step == k) & (h.param == name)].iloc[0]
            assert row.norm == pytest.approx(norm, rel=1e-6), (k, name)
    assert set(h[h.step < 2].param) == {"body.weight", "body.bias"}
    assert [(e.step, e.param, e.kind) for e in watch.events] == [
        (2, "head.weight", "added"),
        (2, "head.bias", "added"),
    ]
    watch.close()
    shapes = {p.name: p.shape for p in GradWatch.open(tmp_path).params}
    assert shapes["head.weight"] == (1, 4) and shapes["head.bias"] == (1,)


def test_a_construction_that_fails_leaves_nothing_behind(tmp_path, monkeypatch):
    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(Recorder, "attach", broken)
    m = small()
    before = {t for t in threading.enumerate() if "GradWatch" in t.name}
    with pytest.raises(RuntimeError, match="boom"):
        GradWatch(m, optimizer=torch.optim.SGD(m.parameters(), 0.1), path=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
    assert {t for t in threading.enumerate() if "GradWatch" in t.name} == before
    assert not model_hooks(m)


def test_lightnings_toggle_optimizer_recipe_is_no_freezing(tmp_path):
    """Lightning's GAN recipe freezes the other model while each optimizer steps
    (`toggle_optimizer`): each step noted frozen / unfrozen events for every parameter and
    warned twice that rows "read none (frozen)", which none did. A parameter's flags count at
    its own optimizer's step."""
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6))
    D = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    model = nn.ModuleDict({"G": G, "D": D})
    og, od = torch.optim.Adam(G.parameters(), 1e-2), torch.optim.Adam(D.parameters(), 1e-2)
    watch = GradWatch(model, optimizer=[og, od], path=tmp_path, flight_recorder=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6):
            x, z = torch.randn(8, 6), torch.randn(8, 4)
            G.requires_grad_(False)  # toggle_optimizer(od)
            ((D(x) - 1).pow(2).mean() + D(G(z)).pow(2).mean()).backward()
            od.step()
            od.zero_grad()
            G.requires_grad_(True)  # toggle_optimizer(og)
            D.requires_grad_(False)
            (D(G(z)) - 1).pow(2).mean().backward()
            og.step()
            og.zero_grad()
            D.requires_grad_(True)  # untoggle
        h = watch.history()
    assert not [w for w in caught if "frozen" in str(w.message)]
    assert watch.events == [] and (h.status == "healthy").all() and h.step.nunique() == 6
    watch.close()
