"""Parameters that carry more than data: Python attributes (`p.scale_hint = 2.0`, transformers'
`_is_hf_initialized`) and Parameter subclasses with state or methods the forward reads.

A run's stand-in of such a parameter is an alias of the same class holding the same attributes
(the values themselves, not copies), so a forward that reads `self.weight.scale_hint` or calls
`self.weight.quantized()` runs as it would on the parameter. What cannot carry over is the
parameter's identity (`p is ...`, a dict or weak reference keyed by the parameter): a forward
relying on it fails, and the error says so (`stand_in_hint`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

#: torch's marker on a tensor subclass wrapped as a Parameter; a stand-in is no Parameter
_NOT_COPIED = frozenset({"_is_param"})


def dressed(p: torch.Tensor, alias: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """`alias` (a detached alias or copy of `p`'s data) as an object of `p`'s Parameter subclass
    with `p`'s Python attributes, and whether anything beyond the data was carried over."""
    cls = type(p)
    carried = False
    if cls is not nn.Parameter and issubclass(cls, nn.Parameter) and _plain(cls):
        alias = torch.Tensor._make_subclass(cls, alias, alias.requires_grad)
        carried = True
    # what the alias has already stays: a __torch_dispatch__ wrapper's detach() made its own
    # inner tensors, which must not be replaced by the parameter's
    own = vars(alias)
    extra = {k: v for k, v in vars(p).items() if k not in _NOT_COPIED and k not in own}
    if extra:
        own.update(extra)
        # private markers (transformers' `_is_hf_initialized`) are carried, not worth a mention
        carried = carried or any(not k.startswith("_") for k in extra)
    return alias, carried


def _plain(cls: type) -> bool:
    """A subclass made the way Parameter is (no __torch_dispatch__ wrapper of its own), so
    `Tensor._make_subclass` builds one around an alias, as `Parameter.__new__` does."""
    return getattr(cls, "__torch_dispatch__", None) is getattr(
        torch.Tensor, "__torch_dispatch__", None
    )


def stand_in_hint(names: Sequence[str], params: dict[str, torch.Tensor]) -> str:
    """A sentence for a forward that failed while parameters carried more than their data."""
    if not names:
        return ""
    what = ", ".join(f"{n} ({type(params[n]).__name__})" for n in names[:4])
    more = "…" if len(names) > 4 else ""
    return (
        f"\nParameters with Python attributes or of a Parameter subclass: {what}{more}. The run "
        "used stand-ins of the same class holding the same attributes; what cannot carry over "
        "is the parameter object itself. If forward relies on it (`p is ...`, a dict or weak "
        "reference keyed by the parameter, state kept outside its __dict__), explorer runs "
        "cannot work with it: keep that state on the module instead."
    )
