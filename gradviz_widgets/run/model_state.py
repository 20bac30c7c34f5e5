"""The state a run swaps out of the model and puts back by identity.

A run replaces every parameter with a detached alias (a copy on another device) and every buffer
with a copy, in the `_parameters` / `_buffers` dict of *each module object* that holds it, so a
module reachable under two names (`self.features = self.backbone`) or a tied weight gets the same
stand-in everywhere. On exit each dict entry gets back exactly the object it held before: the
restore never depends on the order of names (`_reparametrize_module(tie_weights=True)` restores
a module held under two names in the wrong order and leaves stand-ins behind).

Besides parameters and buffers a forward can leave traces in:
- plain tensor attributes (legacy `weight_norm` / `spectral_norm` recompute `module.weight` in a
  forward pre-hook; models that cache an activation on `self`), Python and numpy scalars (a
  forward's `self.calls += 1`) and numpy arrays: put back, arrays in place (a forward's
  `self.hist += 1`); attributes the run added to a module, of any type, are removed and those
  it deleted put back;
- generators the model owns (a model's own dropout `torch.Generator`, a numpy `Generator` /
  `RandomState`, a `random.Random`; run/rng.py), as module attributes or inside their lists,
  dicts and helper objects: their state is saved and set back, so runs neither advance nor
  depend on the user's stream;
- `torch.nn.utils.parametrize.cached()`: its cache is emptied for the run (a cached weight made
  from the real parameters would hide them from the run) and restored afterwards.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from .attr_views import CONTAINERS, RunViews, viewed
from .param_attrs import dressed
from .rng import OwnedGenerators


@dataclasses.dataclass(frozen=True, eq=False)
class ModelIndex:
    """The module tree walked once per run: what torch's `named_modules()` /
    `named_parameters()` / `buffers()` give, for every stage of the run to share (each walk
    is O(modules) Python; a run used to make ~10 of them).

    `all_modules` and `all_params` list every name (`remove_duplicate=False`); `modules` and
    `params` each object once under its first name, as torch's defaults do (the first
    occurrences of a walk with duplicates are the walk without them).

    Example:
        >>> shared = nn.Linear(2, 2)
        >>> index = ModelIndex.of(nn.Sequential(shared, shared))
        >>> [p for p, _ in index.all_modules], [p for p, _ in index.modules]
        (['', '0', '1'], ['', '0'])
        >>> index.canonical["1.weight"]
        '0.weight'
    """

    all_modules: tuple[tuple[str, nn.Module], ...]
    all_params: tuple[tuple[str, torch.Tensor], ...]

    @classmethod
    def of(cls, model: nn.Module) -> ModelIndex:
        named = tuple(model.named_modules(remove_duplicate=False))
        return cls(named, tuple(model.named_parameters(remove_duplicate=False)))

    @functools.cached_property
    def modules(self) -> tuple[tuple[str, nn.Module], ...]:
        return _first_of_each(self.all_modules)

    @functools.cached_property
    def params(self) -> tuple[tuple[str, torch.Tensor], ...]:
        return _first_of_each(self.all_params)

    @functools.cached_property
    def canonical(self) -> dict[str, str]:
        """Every name a parameter is reachable under -> the name `named_parameters()` reports."""
        first: dict[int, str] = {}
        return {name: first.setdefault(id(p), name) for name, p in self.all_params}

    def named_buffers(self) -> list[tuple[str, torch.Tensor]]:
        """`model.named_buffers()`: each buffer object once, under its first name."""
        named = (
            (f"{path}.{k}" if path else k, b)
            for path, m in self.modules
            for k, b in m._buffers.items()
            if b is not None
        )
        return list(_first_of_each(tuple(named)))

    def buffers(self) -> list[torch.Tensor]:
        """`model.buffers()`: each buffer object once."""
        return [b for _, b in self.named_buffers()]


def _first_of_each(named: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    seen: set[int] = set()
    return tuple(
        (name, x)
        for name, x in named
        if id(x) not in seen and not seen.add(id(x))  # type: ignore[func-returns-value]
    )


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
    #: parameters whose stand-in carries their class and Python attributes (run/param_attrs.py)
    dressed: list[str] = dataclasses.field(default_factory=list)
    #: weights of `nn.Embedding(max_norm=...)` / EmbeddingBag, which renormalise the rows they
    #: look up in place during forward: their stand-in is a copy
    renormed: list[str] = dataclasses.field(default_factory=list)
    #: parameters (and submodules holding some) the forward registered on the model (a lazy
    #: init on the first call); they, and buffers it registered, are removed again when the
    #: run ends (set when the run ends)
    registered: list[str] = dataclasses.field(default_factory=list)

    @property
    def real_params(self) -> dict[str, torch.Tensor]:
        """canonical name -> the model's own Parameter."""
        return {name: p for name, p in self.real.values()}


def make_stand_ins(
    model: nn.Module,
    device: torch.device,
    copied: frozenset[str] = frozenset(),
    index: ModelIndex | None = None,
) -> StandIns:
    """Leaf aliases of the parameters (copies when on another device, and for the names in
    `copied`: parameters the forward writes into in place), copies of the buffers."""
    index = index or ModelIndex.of(model)
    params: dict[str, torch.Tensor] = {}
    real: dict[int, tuple[str, torch.Tensor]] = {}
    dressed_names = []
    # modules that write into their weight during forward get a copy, not an alias
    renormed = {
        id(m.weight)
        for _, m in index.modules
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.max_norm is not None
    }
    for name, p in index.params:
        alias = (
            p.detach()
            if p.device == device and id(p) not in renormed and name not in copied
            else p.detach().to(device, copy=True)
        )
        alias.requires_grad_(p.requires_grad)
        _carry_tensor_hooks(p, alias)
        if type(p) is not nn.Parameter or vars(p):  # more than data: class, attributes
            alias, carried = dressed(p, alias)
            if carried:
                dressed_names.append(name)
        params[name] = alias
        real[id(p)] = (name, p)
    buffers = {id(b): b.detach().to(device, copy=True) for b in index.buffers()}
    kept = [name for name, p in index.params if id(p) in renormed]
    return StandIns(params, real, buffers, dressed=dressed_names, renormed=kept)


def _carry_tensor_hooks(p: torch.Tensor, alias: torch.Tensor) -> None:
    """The parameter's own tensor hooks (`p.register_hook(clip)`) on its stand-in, in their
    order: `.backward()` applies them before a gradient reaches `.grad`, so the run's numbers
    must too. Post-accumulate hooks are not carried: they act on `.grad` (an optimizer stepped
    in backward), which a run never writes."""
    hooks = p._backward_hooks
    if hooks and alias.requires_grad:
        for hook in list(hooks.values()):
            alias.register_hook(hook)


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
    return ModelIndex.of(model).canonical


#: attribute values put back by identity after a run: tensors, numpy arrays (their contents too:
#: `_Saved.arrays`), and Python and numpy scalars a forward may update (`self.calls += 1`)
_RESTORED = (torch.Tensor, np.ndarray, np.generic, int, float, bool, str, type(None))


#: the usual types of module attributes, none of them a generator (a check against the
#: generator types runs Python per value: ~20 per module) ...
_NOT_GENERATORS = frozenset({dict, collections.OrderedDict, bool, int, float, str, type(None), set})
#: ... of which these are put back and these never are: decided by type, without `isinstance`
_PLAIN_RESTORED = frozenset({bool, int, float, str, type(None)})
_NOT_RESTORED = _NOT_GENERATORS - _PLAIN_RESTORED


@dataclasses.dataclass
class _Saved:
    slots: list[tuple[dict, str, Any]]  # (module dict, key, object it held)
    #: (module, its plain tensor, array and scalar attributes, its whole `__dict__` as it was)
    attrs: list[tuple[nn.Module, dict[str, Any], dict[str, Any]]]
    generators: OwnedGenerators
    #: id(numpy array attribute) -> (the array, a copy of its contents)
    arrays: dict[int, tuple[np.ndarray, np.ndarray]]
    cache: dict
    #: (module dict, key, object) of attributes the run sees a copy of (run/attr_views.py)
    viewed: list[tuple[dict, str, Any]]
    #: (module path, `_parameters` / `_buffers` / `_modules`, the keys it held)
    keys: list[tuple[str, dict, frozenset[str]]]


@contextlib.contextmanager
def swapped(
    model: nn.Module, stand_ins: StandIns, index: ModelIndex | None = None
) -> Iterator[None]:
    """Stand-ins in every module that holds a parameter or buffer, until exit; then every entry
    gets its own object back (and plain attributes, generator states, the parametrize cache are
    as before)."""
    saved = _save(index or ModelIndex.of(model))
    versions = {key: p._version for key, (_, p) in stand_ins.real.items()}
    # id(real tensor) -> its stand-in (a parameter's before a buffer's)
    by_id = dict(stand_ins.buffers)
    by_id.update((key, stand_ins.params[name]) for key, (name, _) in stand_ins.real.items())
    ids = {key: id(stand_ins.params[name]) for key, (name, _) in stand_ins.real.items()}
    try:
        for d, key, original in saved.slots:
            d[key] = by_id[id(original)]
        views = RunViews(dict(by_id), ids)
        for state, key, original in saved.viewed:
            state[key] = views.of(original)
        parametrize._cache.clear()
        yield
    finally:
        stand_ins.registered = _restore(saved)
        stand_ins.written = [
            name for key, (name, p) in stand_ins.real.items() if p._version != versions[key]
        ]


def _save(index: ModelIndex) -> _Saved:
    slots: list[tuple[dict, str, Any]] = []
    attrs = []
    generators = OwnedGenerators()
    arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    seen: list[tuple[dict, str, Any]] = []
    keys: list[tuple[str, dict, frozenset[str]]] = []
    for path, module in index.modules:  # each module object once, whatever its names
        for d in (module._parameters, module._buffers):
            slots += [(d, k, v) for k, v in d.items() if v is not None]
        keys += [(path, d, frozenset(d)) for d in _registries(module)]
        state = vars(module)
        attrs.append((module, _attributes(state, generators, seen, arrays), dict(state)))
    return _Saved(slots, attrs, generators, arrays, dict(parametrize._cache), seen, keys)


def _registries(module: nn.Module) -> tuple[dict, dict, dict]:
    return module._parameters, module._buffers, module._modules


def _attributes(
    state: dict[str, Any],
    generators: OwnedGenerators,
    copied: list[tuple[dict, str, Any]],
    arrays: dict[int, tuple[np.ndarray, np.ndarray]],
) -> dict[str, Any]:
    """The attributes of one module put back after the run (`_RESTORED`); the generators in the
    others are searched for (`generators`), the attributes the run sees a copy of appended to
    `copied` (run/attr_views.py) and numpy arrays with a copy of their contents put in `arrays`.
    One pass, mostly by type."""
    kept = {}
    for k, value in state.items():
        kind = type(value)
        if kind in _PLAIN_RESTORED:
            kept[k] = value
        elif kind in CONTAINERS:
            if viewed(k, value):
                copied.append((state, k, value))
                generators.search(value)
        elif kind not in _NOT_RESTORED:
            if not isinstance(value, _RESTORED):
                generators.search(value)
                continue
            kept[k] = value
            if isinstance(value, torch.Tensor):
                if viewed(k, value):
                    copied.append((state, k, value))
            elif isinstance(value, np.ndarray) and id(value) not in arrays:
                arrays[id(value)] = (value, np.array(value, copy=True))
    return kept


def _restore(saved: _Saved) -> list[str]:
    """Everything put back; the names of parameters, buffers and submodules the run registered
    (now removed)."""
    for d, key, original in saved.slots:
        d[key] = original
    for state, key, original in saved.viewed:
        state[key] = original
    for module, values, before in saved.attrs:
        state = vars(module)
        if state.keys() != before.keys():
            for k in state.keys() - before.keys():
                del state[k]  # left on the module by the run (a tensor made from stand-ins)
            state.update((k, before[k]) for k in before.keys() - state.keys())
        state.update(values)
    for array, contents in saved.arrays.values():
        _put_back_array(array, contents)
    saved.generators.put_back()
    parametrize._cache.clear()
    parametrize._cache.update(saved.cache)
    return _unregister(saved.keys)


def _put_back_array(array: np.ndarray, contents: np.ndarray) -> None:
    """`array`'s contents set back in place, written only where a bit changed (an array shared
    with other threads, or read-only, is left alone otherwise)."""
    if array.shape != contents.shape or array.dtype != contents.dtype:
        return  # resized in place: nothing to copy into
    if array.tobytes() != contents.tobytes():  # object arrays: compares the references
        np.copyto(array, contents)


def _unregister(keys: list[tuple[str, dict, frozenset[str]]]) -> list[str]:
    """Entries the run added to a module's registries, removed; the qualified names of those
    that hold parameters (a report lacks them; a buffer or cache a forward makes for itself,
    a rotary table, is no parameter and not worth a finding on every run)."""
    added = []
    for path, d, held in keys:
        for k in [k for k in d if k not in held]:
            if _holds_parameters(d.pop(k)):
                added.append(f"{path}.{k}" if path else k)
    return added


def _holds_parameters(value: Any) -> bool:
    """A parameter, or a module holding one."""
    if isinstance(value, nn.Parameter):
        return True
    return isinstance(value, nn.Module) and next(value.parameters(), None) is not None


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
