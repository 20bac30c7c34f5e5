"""What a run reads of the model and its input, cheaply, to tell whether the newest run is stale:
the user trained, froze, replaced or switched a module's mode since (in code, between cells)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves


def model_fingerprint(model: nn.Module | None, sample: Any = None) -> tuple:
    """Each parameter's identity, in-place version and `requires_grad`, each buffer's identity
    and version, each module's identity and plain settings (train/eval mode, Dropout's `p`),
    and the identity and version of each tensor of `sample`: equal as long as nothing a run
    reads changed (an optimizer step, a `requires_grad_(False)`, a layer replaced,
    `model.eval()`, `dropout.p = 0`, a batch or target changed in place). A change through
    `.data` bumps no version and is not seen.

    Example:
        >>> net = nn.Linear(2, 2)
        >>> before = model_fingerprint(net)
        >>> _ = net.weight.requires_grad_(False)
        >>> before == model_fingerprint(net), model_fingerprint(net) == model_fingerprint(net)
        (False, True)
    """
    if model is None:
        return ()
    seen: list[tuple] = []
    for m in model.modules():  # one walk (parameters() and buffers() walk it again each)
        seen.append((id(m), *[v for v in m.__dict__.values() if v.__class__ in _PLAIN]))
        seen += [
            (id(p), _version(p), p.requires_grad) for p in m._parameters.values() if p is not None
        ]
        seen += [(id(b), _version(b)) for b in m._buffers.values() if b is not None]
    inputs = [(id(t), _version(t)) for t in tree_leaves(sample) if isinstance(t, torch.Tensor)]
    return tuple(seen), tuple(inputs)


#: a module's settings a forward reads (`training`, Dropout's `p`, `eps`, `in_features`)
_PLAIN = frozenset((bool, int, float, str, type(None)))


def _version(t: torch.Tensor) -> int:
    """The tensor's in-place version (-1 for an inference tensor, which has none)."""
    try:
        return t._version
    except RuntimeError:
        return -1
