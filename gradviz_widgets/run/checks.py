"""Checks at the door: models the explorer cannot run as they are, and arguments of the wrong kind.

Every failure is a GradExplorerError that names the argument (or the kind of model) and says
what to do instead; nothing here changes the model.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from ..errors import GradExplorerError
from ..vocabulary import Thresholds
from .model_state import ModelIndex

_SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
_SHARDED = ("FSDPModule", "FullyShardedDataParallel")  # FSDP2 (fully_shard), FSDP1
_SHARDED_SET = frozenset(_SHARDED)
_WRAPPERS = ("DistributedDataParallel", "DataParallel")


def unwrap_compiled(model: nn.Module) -> tuple[nn.Module, str | None]:
    """The module a run calls, and a note for the findings. A `torch.compile`d model is run
    through its original module (`compiled._orig_mod`), a DistributedDataParallel or
    DataParallel one through `.module` (no collective, no replica); the wrapper is not called.
    Names, module paths and graph ids are the wrapped module's (`fc.weight`, not
    `_orig_mod.fc.weight` or `module.fc.weight`): the wrapper is see-through."""
    notes = []
    while True:
        inner = getattr(model, "_orig_mod", None)
        kind = next((c.__name__ for c in type(model).__mro__ if c.__name__ in _WRAPPERS), None)
        if isinstance(inner, nn.Module) and type(model).__module__.startswith("torch._dynamo"):
            notes.append(
                "torch.compile'd model: explored its original module "
                "(compiled._orig_mod) run eagerly, names without the '_orig_mod.' prefix; "
                "the compiled code was not used"
            )
            model = inner
        elif kind and isinstance(getattr(model, "module", None), nn.Module):
            notes.append(
                f"{kind}: explored its module ({kind.lower()}.module) on this process "
                "alone (names without the 'module.' prefix); the gradients are this "
                "rank's local ones, before any averaging across ranks"
            )
            model = model.module  # type: ignore[assignment]  # checked: an nn.Module
        else:
            return model, "; ".join(notes) or None


def check_model(model: nn.Module, index: ModelIndex | None = None) -> None:
    """Refuse models whose gradients a run cannot measure: sharded (FSDP / DTensor), meta,
    uninitialised lazy, or holding compiled submodules. `index`: the model's, when the run has
    walked its module tree already (a 1,000-module model is checked on every click)."""
    if not isinstance(model, nn.Module):
        raise GradExplorerError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    index = index or ModelIndex.of(model)
    for path, module in index.modules:
        where = f"module {path!r}" if path else "the model"
        kind = type(module).__name__
        if _kinds(type(module)) & _SHARDED_SET:
            raise GradExplorerError(
                f"{where} is sharded with FSDP ({kind}): each rank holds only a shard of each "
                "parameter, so per-parameter gradient norms cannot be measured here. Explore an "
                "unsharded copy on one process: build the same model without fully_shard / FSDP "
                "and load the full state dict (e.g. torch.distributed.checkpoint's "
                "get_model_state_dict(..., options=StateDictOptions(full_state_dict=True))). "
                "For the norms of the averaged gradients on every rank, call "
                "gradviz_widgets.distributed.fsdp.fsdp_param_stats(fsdp_gradients(model, x, "
                "loss_fn=...)) on every rank (see docs/distributed.md)."
            )
        if isinstance(module, torch.jit.ScriptModule):
            raise GradExplorerError(
                f"{where} is a TorchScript module ({kind}, from torch.jit.script or "
                "torch.jit.trace): its forward runs in the TorchScript interpreter, where a run "
                "can neither tell which module made each op nor put its stand-ins in place. "
                "Explore the Python module it was made from (the model before torch.jit.script "
                "/ trace): it computes the same gradients."
            )
        if (
            path
            and type(module).__module__.startswith("torch._dynamo")
            and isinstance(getattr(module, "_orig_mod", None), nn.Module)
        ):
            raise GradExplorerError(
                f"{where} is torch.compile'd; explorer runs need eager modules. Explore a model "
                f"whose {path!r} is the original module ({path}._orig_mod), or compile the "
                "whole model instead (the explorer then runs compiled._orig_mod)."
            )
        if isinstance(module, LazyModuleMixin) and module.has_uninitialized_params():  # type: ignore[misc]
            raise GradExplorerError(
                f"{where} ({kind}) has uninitialised lazy parameters. Call the model once on a "
                "sample batch (model(x)) so lazy modules create their parameters, then explore "
                "it; the explorer does not do that itself because it would change the model."
            )
    for name, t in [*index.params, *index.named_buffers()]:
        if _is_dtensor(t):
            raise GradExplorerError(
                f"parameter or buffer {name!r} is a DTensor (tensor parallel / FSDP2 sharding): "
                "per-parameter gradient norms would cover only this rank's shard. Explore an "
                "unsharded copy of the model on one process."
            )
        if t.is_meta:
            raise GradExplorerError(
                f"{name!r} is on the meta device (it has a shape but no data), so no gradient "
                "can be computed. Materialise the model first: model.to_empty(device='cpu') "
                "and load or initialise its weights."
            )


def _is_dtensor(t: torch.Tensor) -> bool:
    return "DTensor" in _kinds(type(t))


_KINDS: dict[type, frozenset[str]] = {}


def _kinds(cls: type) -> frozenset[str]:
    """The class names in `cls`'s MRO (once per class: a 1,000-module model is checked per run)."""
    kinds = _KINDS.get(cls)
    if kinds is None:
        kinds = _KINDS[cls] = frozenset(c.__name__ for c in cls.__mro__)
    return kinds


#: what `autocast=` takes: the dtypes torch.autocast lowers to on the CPU and on CUDA
AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


def check_autocast(dtype: Any) -> torch.dtype | None:
    """`autocast=`: None (the forward as called) or the dtype of a torch.autocast around it.

    Example:
        >>> check_autocast(torch.bfloat16), check_autocast(None)
        (torch.bfloat16, None)
    """
    if dtype is None or (isinstance(dtype, torch.dtype) and dtype in AUTOCAST_DTYPES):
        return dtype
    raise GradExplorerError(
        f"autocast must be None, torch.bfloat16 or torch.float16 (the dtype of a torch.autocast "
        f"around the forward and the loss), got {dtype!r}"
    )


def check_seed(seed: Any) -> int | None:
    """`seed` as an int torch.manual_seed accepts, or None (no re-seeding)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise GradExplorerError(
            f"seed must be an int (or None to leave the RNG unseeded), got "
            f"{type(seed).__name__} {seed!r}"
        )
    value = operator.index(seed)
    if not _SEED_RANGE[0] <= value <= _SEED_RANGE[1]:
        raise GradExplorerError(
            f"seed must fit in 64 bits ({_SEED_RANGE[0]} .. {_SEED_RANGE[1]}), got {value}"
        )
    return value


def check_thresholds(thresholds: Any) -> Thresholds:
    """`thresholds` as a Thresholds (None gives the defaults)."""
    if thresholds is None:
        return Thresholds()
    if not isinstance(thresholds, Thresholds):
        raise GradExplorerError(
            f"thresholds must be a gradviz_widgets.Thresholds, e.g. "
            f"Thresholds(vanishing=1e-6, exploding=1e3), got {type(thresholds).__name__} "
            f"{thresholds!r}"
        )
    for field in ("vanishing", "exploding"):
        value = getattr(thresholds, field)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
            raise GradExplorerError(
                f"thresholds.{field} must be a number, got {type(value).__name__} {value!r}"
            )
    return thresholds


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise GradExplorerError(
            f"{name} must be True or False, got {type(value).__name__} {value!r}"
        )
    return value


def check_loss_args(loss_fn: Any, target: Any) -> None:
    if isinstance(loss_fn, type) and issubclass(loss_fn, nn.Module):
        raise GradExplorerError(
            f"loss_fn is the class {loss_fn.__name__}, not a loss: pass an instance, "
            f"loss_fn={loss_fn.__name__}() (with its arguments, e.g. reduction='mean')"
        )
    if loss_fn is not None and not callable(loss_fn):
        raise GradExplorerError(
            f"loss_fn must be callable (e.g. nn.CrossEntropyLoss()), got {type(loss_fn).__name__}"
        )
    if target is not None and loss_fn is None:
        raise GradExplorerError(
            "target= was given without loss_fn=: the default loss (the sum of the outputs) "
            "ignores the target. Pass loss_fn=..., e.g. loss_fn=nn.CrossEntropyLoss(), or drop "
            "target."
        )
