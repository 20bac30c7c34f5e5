"""The state a run swaps out of the model and puts back by identity.

A run replaces every parameter with a detached alias (a copy on another device) and every buffer
with a copy, in the `_parameters` / `_buffers` dict of *each module object* that holds it, so a
module reachable under two names (`self.features = self.backbone`) or a tied weight gets the same
stand-in everywhere. On exit each dict entry gets back exactly the object it held before: the
restore never depends on the order of names (`_reparametrize_module(tie_weights=True)` restores
a module held under two names in the wrong order and leaves stand-ins behind).

Besides parameters and buffers a forward can leave traces in:
- plain tensor attributes (legacy `weight_norm` / `spectral_norm` recompute `module.weight` in a
  forward pre-hook; models that cache an activation on `self`) and Python scalars (a forward's
  `self.calls += 1`): put back, new ones removed;
- `torch.Generator` objects kept as module attributes (a model's own dropout generator): their
  state is saved and set back, so runs neither advance nor depend on the user's stream;
- `torch.nn.utils.parametrize.cached()`: its cache is emptied for the run (a cached weight made
  from the real parameters would hide them from the run) and restored afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize


@dataclasses.dataclass
class StandIns:
    """Stand-ins of one run: `params` by canonical name (as `named_parameters()` names them),
    `real` maps id(real Parameter) -> (canonical name, the Parameter), `buffers` maps
    id(real buffer) -> its copy."""

    params: dict[str, torch.Tensor]
    real: dict[int, tuple[str, torch.Tensor]]
    buffers: dict[int, torch.Tensor]
    #: parameters the forward wrote into in place through their alias (set when the run ends)
    written: list[str] = dataclasses.field(default_factory=list)

    @property
    def real_params(self) -> dict[str, torch.Tensor]:
        """canonical name -> the model's own Parameter."""
        return {name: p for name, p in self.real.values()}


def make_stand_ins(
    model: nn.Module, device: torch.device, copied: frozenset[str] = frozenset()
) -> StandIns:
    """Leaf aliases of the parameters (copies when on another device, and for the names in
    `copied`: parameters the forward writes into in place), copies of the buffers."""
    params: dict[str, torch.Tensor] = {}
    real: dict[int, tuple[str, torch.Tensor]] = {}
    # modules that write into their weight during forward get a copy, not an alias
    renormed = {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.max_norm is not None
    }
    for name, p in model.named_parameters():
        alias = (
            p.detach()
            if p.device == device and id(p) not in renormed and name not in copied
            else p.detach().to(device, copy=True)
        )
        params[name] = alias.requires_grad_(p.requires_grad)
        real[id(p)] = (name, p)
    buffers = {id(b): b.detach().to(device, copy=True) for b in model.buffers()}
    return StandIns(params, real, buffers)


def aliased_storages(stand_ins: StandIns) -> dict[int, str]:
    """storage pointer -> parameter name, for stand-ins that share the real parameter's memory."""
    out = {}
    for name, p in stand_ins.real.values():
        stand_in = stand_ins.params[name]
        try:
            ptr = stand_in.untyped_storage().data_ptr()
            if ptr and ptr == p.untyped_storage().data_ptr():
                out[ptr] = name
        except (RuntimeError, NotImplementedError):  # sparse or meta: nothing to guard
            continue
    return out


def canonical_names(model: nn.Module) -> dict[str, str]:
    """Every name a parameter is reachable under -> the name `named_parameters()` reports."""
    first: dict[int, str] = {}
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out[name] = first.setdefault(id(p), name)
    return out


#: attribute values put back after a run (and removed when the run added them): tensors, and
#: Python scalars a forward may update (`self.calls += 1`)
_RESTORED = (torch.Tensor, int, float, bool, str, type(None))


@dataclasses.dataclass
class _Saved:
    slots: list[tuple[dict, str, Any]]  # (module dict, key, object it held)
    attrs: list[tuple[nn.Module, dict[str, Any]]]  # plain tensor and scalar attributes
    generators: list[tuple[torch.Generator, torch.Tensor]]
    cache: dict


@contextlib.contextmanager
def swapped(model: nn.Module, stand_ins: StandIns) -> Iterator[None]:
    """Stand-ins in every module that holds a parameter or buffer, until exit; then every entry
    gets its own object back (and plain tensor attributes, generator states, the parametrize
    cache are as before)."""
    saved = _save(model)
    versions = {key: p._version for key, (_, p) in stand_ins.real.items()}
    try:
        for d, key, original in saved.slots:
            d[key] = (
                stand_ins.params[stand_ins.real[id(original)][0]]
                if id(original) in stand_ins.real
                else stand_ins.buffers[id(original)]
            )
        parametrize._cache.clear()
        yield
    finally:
        _restore(saved)
        stand_ins.written = [
            name for key, (name, p) in stand_ins.real.items() if p._version != versions[key]
        ]


def _save(model: nn.Module) -> _Saved:
    slots: list[tuple[dict, str, Any]] = []
    attrs = []
    generators = []
    for module in model.modules():  # each module object once, whatever its names
        for d in (module._parameters, module._buffers):
            slots += [(d, k, v) for k, v in d.items() if v is not None]
        attrs.append((module, {k: v for k, v in vars(module).items() if isinstance(v, _RESTORED)}))
        generators += [
            (g, g.get_state()) for g in vars(module).values() if isinstance(g, torch.Generator)
        ]
    return _Saved(slots, attrs, generators, dict(parametrize._cache))


def _restore(saved: _Saved) -> None:
    for d, key, original in saved.slots:
        d[key] = original
    for module, values in saved.attrs:
        state = vars(module)
        for k in [k for k, v in state.items() if isinstance(v, _RESTORED) and k not in values]:
            del state[k]  # left on the module by the run (a tensor made from stand-ins)
        state.update(values)
    for g, g_state in saved.generators:
        g.set_state(g_state)
    parametrize._cache.clear()
    parametrize._cache.update(saved.cache)


@contextlib.contextmanager
def forked_rng(device: torch.device, seed: int | None) -> Iterator[None]:
    """The global RNG (CPU and the run's CUDA device) forked, and seeded when `seed` is given."""
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        if seed is not None:
            torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused for the run (deep graphs allocate many small Python
    objects and it kept walking them: 15-35 % of a 1,000-layer run); its state is put back."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
