"""GradWatch's wrong arguments are refused at the door, naming the argument, with nothing left
behind (no thread, hook or folder); optimizer wrappers are unwrapped (issue 18 item 5)."""

from __future__ import annotations

import math
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorerError
from gradviz_widgets.watch import GradWatch


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def step(model: nn.Module, opt: Any) -> None:
    opt.zero_grad()
    model(torch.randn(5, 3)).sum().backward()
    opt.step()


def _scheduler(opt: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.StepLR(opt, step_size=1)


BAD: list[tuple[str, Any, str]] = [
    ("model", "net", "model must be a torch.nn.Module"),
    (
        "optimizer",
        lambda m, o: list(m.parameters()),
        "optimizer must be a torch.optim.Optimizer, got parameters",
    ),
    (
        "optimizer",
        lambda m, o: m.parameters(),
        "optimizer must be a torch.optim.Optimizer, got parameters",
    ),
    ("optimizer", lambda m, o: [{"params": m.parameters()}], "got parameters"),
    (
        "optimizer",
        lambda m, o: _scheduler(o),
        "pass the optimizer it drives, optimizer=scheduler.optimizer",
    ),
    (
        "optimizer",
        lambda m, o: torch.optim.lr_scheduler.ReduceLROnPlateau(o),
        "scheduler.optimizer",
    ),
    ("optimizer", "adam", "optimizer must be a torch.optim.Optimizer .or a list of them"),
    ("optimizer", lambda m, o: [o, "adam"], r"optimizer\[1\] must be a torch.optim.Optimizer"),
    ("optimizer", lambda m, o: [o, o], "the same optimizer twice"),
    ("optimizer", [], "optimizer is an empty list"),
    ("flight_recorder", "yes", "flight_recorder must be True"),
    ("flight_recorder", 0, "flight_recorder must be True"),
    ("flight_recorder", -1.0, "flight_recorder must be True"),
    ("flight_recorder", math.nan, "flight_recorder must be True"),
    ("flight_recorder", math.inf, "flight_recorder must be True"),
    ("thresholds", 1e-3, "thresholds must be a gradviz_widgets.Thresholds"),
    ("update_ratio", 0, "update_ratio must be True"),
    ("update_ratio", 2.5, "update_ratio must be True"),
    ("update_ratio", "10", "update_ratio must be True"),
    ("flush_s", 0, "flush_s must be a number of seconds > 0"),
    ("flush_s", "0.5", "flush_s must be a number of seconds > 0"),
    ("flush_s", math.nan, "flush_s must be a number of seconds > 0"),
    ("flush_s", True, "flush_s must be a number of seconds > 0"),
    ("rank_timeout_s", -1, "rank_timeout_s must be a number of seconds > 0"),
    ("tensorboard", 3, "tensorboard must be False, True"),
    ("loss_fn", "mse", "loss_fn must be callable"),
    ("sync_check", "yes", "sync_check must be None, True or False"),
    ("ranks", "off", "ranks must be None, True or False"),
    ("path", 123, "path must be a folder"),
    ("path", "FILE", "path must be a folder, and .* is a file"),
]


@pytest.mark.parametrize(
    ("name", "value", "message"), BAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD)]
)
def test_wrong_arguments_are_refused_and_leave_nothing(
    name: str, value: Any, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where path=None would make its folder
    (tmp_path / "a-file").write_text("not a folder")
    value = value(model, opt) if callable(value) else value
    value = str(tmp_path / "a-file") if value == "FILE" else value
    kwargs: dict[str, Any] = {
        "model": model,
        "optimizer": opt,
        "path": tmp_path / "new",
        name: value,
    }
    threads = set(threading.enumerate())
    with pytest.raises(GradExplorerError, match=message):
        GradWatch(**kwargs)
    assert set(threading.enumerate()) == threads, "no writer thread left"
    assert not model._forward_pre_hooks and not opt._optimizer_step_pre_hooks
    assert not opt._optimizer_step_post_hooks
    assert all(p._post_accumulate_grad_hooks is None for p in model.parameters())
    assert not (tmp_path / "new").exists() and not list(temp.iterdir()), "no folder created"


def test_a_watch_sqlite_file_as_path_says_how_to_open_it(tmp_path: Path) -> None:
    model = mlp()
    watch = GradWatch(model, path=tmp_path / "exp1")
    watch.close()
    file = watch.rank_path / "watch.sqlite"
    with pytest.raises(GradExplorerError, match=r"is a file.*GradWatch.open\("):
        GradWatch(model, path=file)


def test_good_values_are_taken(tmp_path: Path) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, kwargs in enumerate(
        (
            {"flight_recorder": 5.0, "update_ratio": True, "flush_s": 0.05},
            {"flight_recorder": False, "update_ratio": 3, "rank_timeout_s": 1},
            {"optimizer": (opt,), "update_ratio": False, "tensorboard": None},
        )
    ):
        with GradWatch(model, **{"optimizer": opt, "path": tmp_path / str(i), **kwargs}) as watch:
            step(model, opt)
            assert watch.steps == 1


def test_lightning_optimizer_is_unwrapped() -> None:
    from lightning.pytorch.core.optimizer import LightningOptimizer

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapped = LightningOptimizer(opt)
    assert isinstance(wrapped, torch.optim.Optimizer) and wrapped.optimizer is opt
    watch = GradWatch(model, optimizer=wrapped)
    assert watch._recorder.optimizer is opt and len(opt._optimizer_step_pre_hooks) == 1
    for _ in range(2):
        step(model, opt)  # what lightning's strategy runs: the inner optimizer's step
    assert watch.steps == 2 and len(watch.history()) == 2 * 4
    watch.close()
    assert not opt._optimizer_step_pre_hooks


def test_accelerate_optimizer_is_unwrapped() -> None:
    """Hooks cannot even be registered on an AcceleratedOptimizer (it has no hook dicts)."""
    from accelerate import Accelerator

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapped = Accelerator(cpu=True).prepare(opt)
    assert type(wrapped).__name__ == "AcceleratedOptimizer" and wrapped.optimizer is opt
    with pytest.raises(AttributeError):
        wrapped.register_step_pre_hook(lambda *a: None)  # why the watch unwraps it
    watch = GradWatch(model, optimizer=wrapped)
    for _ in range(3):
        step(model, wrapped)
    assert watch.steps == 3 and watch._recorder.optimizer is opt
    watch.close()
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks


def test_two_optimizers_are_taken_and_both_recorded() -> None:
    """GAN style: two optimizers on one model; one round of both is one step, no warning."""
    model = nn.ModuleDict({"g": nn.Linear(3, 3), "d": nn.Linear(3, 1)})
    opt_g = torch.optim.Adam(model["g"].parameters())
    opt_d = torch.optim.SGD(model["d"].parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch = GradWatch(model, optimizer=[opt_g, opt_d])
    x = torch.randn(4, 3)
    for opt in (opt_g, opt_d):
        opt.zero_grad()
        model["d"](model["g"](x)).sum().backward()
        opt.step()
    assert watch.steps == 1 and watch._writer.store.meta["optimizer"] == "Adam, SGD"
    h = watch.history()
    assert sorted(h.param) == ["d.bias", "d.weight", "g.bias", "g.weight"]
    assert set(h.step) == {0} and h.norm.notna().all()
    watch.close()


def test_an_optimizer_of_another_model_is_named(tmp_path: Path) -> None:
    model, other = mlp(), mlp()
    opt = torch.optim.SGD(other.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch = GradWatch(model, optimizer=opt, path=tmp_path)
    texts = [str(w.message) for w in caught]
    assert texts == [
        "GradWatch: optimizer (SGD) trains none of the watched parameters (the model's "
        "parameters with requires_grad=True): was it built from another model, or a copy "
        "of this one?"
    ]
    assert caught[0].filename == __file__  # points at the user's line
    watch.close()


def test_a_torchscript_model_is_refused_and_its_python_module_watched(tmp_path: Path) -> None:
    """A scripted model takes no forward hooks (GradWatch raised torch's RuntimeError from
    attach): a GradExplorerError says to watch the Python module, which records every step."""
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    scripted = torch.jit.script(model)
    opt = torch.optim.SGD(scripted.parameters(), lr=0.1)
    with pytest.raises(GradExplorerError, match="TorchScript.*GradWatch\\(module"):
        GradWatch(scripted, optimizer=opt, path=tmp_path / "a")
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "b", flight_recorder=False)
    for _ in range(3):
        opt.zero_grad()
        scripted(torch.randn(4, 6)).sum().backward()
        opt.step()
    h = watch.history()
    assert watch.steps == 3 and h.norm.notna().all() and len(h) == 12
    watch.close()
