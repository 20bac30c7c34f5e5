"""GradWatch's arguments, checked at the door: each wrong one is a GradExplorerError naming it
and saying what to do, raised before the watch creates anything (no folder, thread or hook)."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from ..errors import GradExplorerError, user_stacklevel
from ..run.checks import check_loss_args, check_thresholds
from ..vocabulary import Thresholds
from .baselines import check_spikes
from .flight import check_budget


@dataclasses.dataclass(frozen=True)
class Checked:
    """The arguments as the watch uses them."""

    optimizers: tuple[torch.optim.Optimizer, ...]
    path: Path | None
    thresholds: Thresholds


def check_arguments(model: Any, optimizer: Any, path: Any, options: dict[str, Any]) -> Checked:
    """Every check, in the order of the signature; `options` are the keyword arguments."""
    if not isinstance(model, nn.Module):
        raise GradExplorerError(
            f"model must be a torch.nn.Module (the model you train), got {_what(model)}"
        )
    if isinstance(model, torch.jit.ScriptModule):
        raise GradExplorerError(
            f"model is a TorchScript module ({type(model).__name__}, from torch.jit.script or "
            "trace), whose forward takes no hooks. Watch the Python module it was made from, "
            "GradWatch(module, optimizer=opt): the scripted module trains the same parameter "
            "tensors, so every step is recorded (the flight recorder sees no forward call: "
            "an anomaly cannot be replayed in the explorer, which explores Python modules only)."
        )
    check_lazy(model)
    optimizers = check_optimizers(optimizer)
    check_scaler(options["scaler"], optimizers)
    folder = check_path(path)
    check_loss_args(options["loss_fn"], None)
    thresholds = check_thresholds(options["thresholds"])
    check_update_ratio(options["update_ratio"])
    check_flight_recorder(options["flight_recorder"])
    check_budget(options["flight_budget_mb"])
    for name in ("sync_check", "ranks"):
        if options[name] is not None and not isinstance(options[name], bool):
            raise GradExplorerError(
                f"{name} must be None, True or False, got {_what(options[name])}"
            )
    check_tensorboard(options["tensorboard"])
    check_spikes(options["spikes"])
    for name in ("flush_s", "rank_timeout_s"):
        check_seconds(name, options[name])
    start = options["start_step"]
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise GradExplorerError(f"start_step must be an int >= 0 (a step number), got {start!r}")
    return Checked(optimizers, folder, thresholds)


def check_lazy(model: nn.Module) -> None:
    """A lazy module not run yet (`nn.LazyLinear`) has parameters without a shape: refused,
    as the integrations document (their callbacks warn and train on). Lazy modules added
    later are watched once materialised (watch/params.py)."""
    lazy = [n for n, p in model.named_parameters() if is_lazy(p)]
    if lazy:
        shown = ", ".join(lazy[:4]) + (" ..." if len(lazy) > 4 else "")
        raise GradExplorerError(
            f"the model has {len(lazy)} uninitialised lazy parameter(s) ({shown}): run one "
            "forward pass first (model(batch), under torch.no_grad() if you like) so that "
            "they get their shapes, then create the GradWatch (and the optimizer)"
        )


def check_optimizers(optimizer: Any) -> tuple[torch.optim.Optimizer, ...]:
    """None, a torch optimizer or a list/tuple of them, as a tuple of torch optimizers.

    A wrapper that is an Optimizer and holds the real one in `.optimizer` (lightning's
    LightningOptimizer, accelerate's AcceleratedOptimizer) is replaced by that inner optimizer:
    its step() is the one that runs, and hooks registered on a wrapper may never fire. So is
    one holding it in `.base_optimizer` with the same param_groups (SAM, ASAM): its own step
    perturbs the weights, takes a second gradient and has the base optimizer apply that to
    the restored weights; the base optimizer's step is the update (and `first_step` /
    `second_step` loops call no wrapper step at all)."""
    if optimizer is None:
        return ()
    if _parameters(optimizer):
        raise GradExplorerError(
            f"optimizer must be a torch.optim.Optimizer, got parameters ({_what(optimizer)}): "
            "pass the optimizer built from them, e.g. "
            "optimizer=torch.optim.AdamW(model.parameters())"
        )
    if isinstance(optimizer, (list, tuple)):
        if not optimizer:
            raise GradExplorerError(
                "optimizer is an empty list: pass the optimizer (or optimizers) that train the "
                "model, or optimizer=None to record one step per backward"
            )
        out = tuple(_one_optimizer(o, f"optimizer[{i}]") for i, o in enumerate(optimizer))
        if len({id(o) for o in out}) < len(out):
            raise GradExplorerError("optimizer lists the same optimizer twice: pass it once")
        return out
    return (_one_optimizer(optimizer, "optimizer"),)


def wrapped_optimizer(opt: Any) -> torch.optim.Optimizer | None:
    """The optimizer `opt` wraps (`.optimizer`; `.base_optimizer` sharing its param_groups,
    as SAM's does), or None."""
    inner = getattr(opt, "optimizer", None)
    if isinstance(inner, torch.optim.Optimizer) and inner is not opt:
        return inner
    base = getattr(opt, "base_optimizer", None)
    if not isinstance(base, torch.optim.Optimizer) or base is opt:
        return None
    return base if getattr(opt, "param_groups", None) is base.param_groups else None


def _one_optimizer(value: Any, name: str) -> torch.optim.Optimizer:
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    if isinstance(value, (LRScheduler, ReduceLROnPlateau)):
        raise GradExplorerError(
            f"{name} is a learning-rate scheduler ({type(value).__name__}): pass the optimizer "
            f"it drives, {name}=scheduler.optimizer"
        )
    while isinstance(value, torch.optim.Optimizer):
        inner = wrapped_optimizer(value)
        if inner is None:
            return value
        value = inner  # a wrapper (LightningOptimizer, AcceleratedOptimizer, SAM): the real one
    if _parameters(value):
        raise GradExplorerError(
            f"{name} must be a torch.optim.Optimizer, got parameters ({_what(value)}): pass "
            f"the optimizer built from them, e.g. {name}=torch.optim.AdamW(model.parameters())"
        )
    hint = ""
    if isinstance(getattr(value, "optimizer", None), torch.optim.Optimizer):
        hint = f"; it holds one: {name}=<it>.optimizer"
    raise GradExplorerError(
        f"{name} must be a torch.optim.Optimizer (or a list of them, or None), got "
        f"{_what(value)}{hint}"
    )


def check_path(path: Any) -> Path | None:
    """None (a temporary folder) or a folder, existing or not; never a file."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise GradExplorerError(
            f"path must be a folder (str or pathlib.Path), e.g. path='runs/exp1', got {_what(path)}"
        )
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        hint = f" (to read that record: GradWatch.open({str(folder.parent)!r}))"
        raise GradExplorerError(
            f"path must be a folder, and {str(folder)!r} is a file: pass a folder for the runs, "
            f"e.g. path='runs/exp1'" + (hint if folder.name == "watch.sqlite" else "")
        )
    return folder


def check_update_ratio(value: Any) -> None:
    if isinstance(value, bool):
        return
    if not isinstance(value, numbers.Integral) or int(value) < 1:
        raise GradExplorerError(
            "update_ratio must be True (every step), False (never) or an int N >= 1 (the "
            f"steps divisible by N), got {_what(value)}"
        )


def check_flight_recorder(value: Any) -> None:
    if isinstance(value, bool):
        return
    ok = isinstance(value, numbers.Real) and math.isfinite(value) and float(value) > 0
    if not ok:
        raise GradExplorerError(
            "flight_recorder must be True (record the first NaN/Inf step), False (never) or a "
            f"positive finite gradient norm that also triggers it, got {_what(value)}"
        )


def check_tensorboard(value: Any) -> None:
    """False/None, True (`<run folder>/tb`), a folder, or a SummaryWriter-like object."""
    if value is None or value is False or hasattr(value, "add_scalar"):
        return
    if value is not True and not isinstance(value, (str, os.PathLike)):
        raise GradExplorerError(
            "tensorboard must be False, True (logs in the run's folder), a folder or a "
            f"SummaryWriter, got {_what(value)}"
        )
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as e:
        raise GradExplorerError(
            "tensorboard=... needs the tensorboard package (pip install tensorboard), or "
            "pass tensorboard=False"
        ) from e


def check_seconds(name: str, value: Any) -> None:
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if not ok or not math.isfinite(value) or float(value) <= 0:
        raise GradExplorerError(f"{name} must be a number of seconds > 0, got {_what(value)}")


def warn_idle_optimizers(
    watched: list[nn.Parameter], optimizers: tuple[torch.optim.Optimizer, ...]
) -> None:
    """One warning per optimizer that trains none of the watched parameters."""
    ids = {id(p) for p in watched}
    for i, opt in enumerate(optimizers):
        trained = {id(p) for g in opt.param_groups for p in g["params"]}
        if ids and not trained & ids:
            name = "optimizer" if len(optimizers) == 1 else f"optimizer[{i}]"
            warnings.warn(
                f"GradWatch: {name} ({type(opt).__name__}) trains none of the watched "
                "parameters (the model's parameters with requires_grad=True): was it built "
                "from another model, or a copy of this one?",
                stacklevel=user_stacklevel(),
            )


def check_scaler(scaler: Any, optimizers: tuple[torch.optim.Optimizer, ...]) -> None:
    """`scaler`: None or the torch.amp.GradScaler that drives the optimizers' steps."""
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise GradExplorerError(
            f"scaler must be a torch.amp.GradScaler (the one whose scaler.step(optimizer) "
            f"the loop calls), got {_what(scaler)}"
        )
    if scaler is not None and not optimizers:
        raise GradExplorerError("scaler= needs optimizer= too: pass the optimizer the scaler steps")


def _parameters(value: Any) -> bool:
    """Parameters where an optimizer belongs: a tensor, model.parameters(), a list of them."""
    if isinstance(value, (torch.Tensor, Iterator)):
        return True
    items = value if isinstance(value, (list, tuple)) else ()
    return any(isinstance(v, (torch.Tensor, dict)) for v in items)


def _what(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"
