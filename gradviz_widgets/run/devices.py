"""Which devices a run can use, and turning a user's device string into a checked torch.device."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import GradExplorerError


def available_devices() -> list[str]:
    """Devices usable here, CPU first.

    Example:
        >>> available_devices()[0]
        'cpu'
    """
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a model with neither)."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def resolve_device(requested: str | torch.device | None, model: nn.Module) -> torch.device:
    """Check `requested` against what exists; None means where the model already is.

    Example:
        >>> resolve_device("cpu", nn.Linear(2, 2))
        device(type='cpu')
    """
    if requested is None:
        return model_device(model)
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError) as e:
        raise GradExplorerError(
            f"device {requested!r} is not a device name; use one of {available_devices()}"
        ) from e
    avail = available_devices()
    if device.type == "cuda":
        index = device.index if device.index is not None else 0
        ok = torch.cuda.is_available() and index < torch.cuda.device_count()
        device = torch.device("cuda", index) if ok else device
    elif device.type == "mps":
        ok = "mps" in avail
    else:
        ok = device.type == "cpu"
    if not ok:
        raise GradExplorerError(
            f"device {str(requested)!r} is not available on this machine; available: "
            f"{', '.join(avail)}. Pass device=None to run where the model is."
        )
    return device
