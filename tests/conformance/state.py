"""A full snapshot of everything a run could disturb, and a diff that lists what changed.

Extends tests/model_state.py: parameter classes, NaN-safe bitwise values (dense, sparse and
complex), plain tensor attributes (legacy weight_norm / spectral_norm keep `weight` there),
every hook dict, global module hooks, torch / numpy / python RNG states, generators owned by the
model (torch, numpy, Python), Python attributes of parameters and torch.nn.utils.parametrize's
cache.
"""

from __future__ import annotations

import random

import numpy as np
import torch
import torch.nn.utils.parametrize as parametrize
from model_state import HOOK_DICTS  # tests/model_state.py: the one list of hook dicts
from torch import nn
from torch.nn.modules import module as module_mod
from torch.nn.parameter import is_lazy

GLOBAL_HOOKS = tuple(
    sorted(
        k for k, v in vars(module_mod).items() if k.startswith("_global_") and isinstance(v, dict)
    )
)


def bits(t: torch.Tensor | None):
    """A bitwise, NaN-safe fingerprint of a tensor's value (None stays None)."""
    if t is None:
        return None
    if is_lazy(t):
        return ("uninitialised", type(t).__name__)
    t = t.detach()
    if t.is_sparse:
        t = t.coalesce()
        return ("sparse", tuple(t.shape), bits(t.indices()), bits(t.values()))
    if t.device.type == "meta":
        return ("meta", tuple(t.shape), t.dtype)
    flat = t.cpu().contiguous().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    raw = flat.view(torch.uint8) if flat.numel() and flat.element_size() else flat
    return (tuple(t.shape), t.dtype, str(t.stride()), bytes(raw.numpy().tobytes()))


def _tensor_attrs(m: nn.Module) -> dict:
    """Plain tensor attributes: object, value, version and (for leaves) `.grad`."""
    return {
        k: (v, bits(v), getattr(v, "_version", None), bits(v.grad) if v.is_leaf else None)
        for k, v in vars(m).items()
        if isinstance(v, torch.Tensor)
    }


_PLAIN = (int, float, bool, str, type(None))


def _plain_attrs(m: nn.Module) -> dict:
    """Python scalars a forward may write (self.calls += 1); compared by repr (NaN-safe)."""
    return {k: repr(v) for k, v in vars(m).items() if isinstance(v, _PLAIN)}


def _attrs_of(p: torch.Tensor) -> tuple:
    """A parameter's Python attributes (`p.scale_hint`, a subclass's state): plain values by
    repr, tensors bitwise, anything else by identity."""
    return tuple(
        sorted(
            (
                k,
                repr(v)
                if isinstance(v, _PLAIN)
                else bits(v)
                if isinstance(v, torch.Tensor)
                else id(v),
            )
            for k, v in vars(p).items()
        )
    )


def _global_flags() -> tuple:
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch.is_autocast_enabled("cpu"),
        torch.are_deterministic_algorithms_enabled(),
    )


def _generator_state(g) -> object:
    """The state of a generator a module owns (torch, numpy new and legacy, Python), or None."""
    if isinstance(g, torch.Generator):
        return bits(g.get_state())
    if isinstance(g, np.random.Generator):
        return repr(g.bit_generator.state)
    if isinstance(g, np.random.RandomState):
        return repr(g.get_state())
    if isinstance(g, random.Random):
        return g.getstate()
    return None


def _generators(model: nn.Module) -> dict:
    return {
        f"{n}.{k}": (g, state)
        for n, m in model.named_modules()
        for k, g in vars(m).items()
        if (state := _generator_state(g)) is not None
    }


def snapshot(model: nn.Module) -> dict:
    """Everything about `model` (and the process state around it) that a run could disturb."""
    params = model.named_parameters(remove_duplicate=False)
    modules = list(model.named_modules(remove_duplicate=False))
    return {
        "params": {
            n: (p, type(p), bits(p), p._version, p.requires_grad, p.device, p.dtype, _attrs_of(p))
            for n, p in params
        },
        "grads": {n: (p.grad, bits(p.grad)) for n, p in model.named_parameters()},
        "buffers": {
            n: (b, bits(b), b._version, b.device, b.dtype)
            for n, b in model.named_buffers(remove_duplicate=False)
        },
        "training": {n: m.training for n, m in modules},
        "modules": {n: (m, type(m)) for n, m in modules},
        "hooks": {n: {d: dict(getattr(m, d, {})) for d in HOOK_DICTS} for n, m in modules},
        "global_hooks": {d: dict(getattr(module_mod, d)) for d in GLOBAL_HOOKS},
        "attrs": {n: sorted(vars(m)) for n, m in modules},
        "tensor_attrs": {n: _tensor_attrs(m) for n, m in modules},
        "plain_attrs": {n: _plain_attrs(m) for n, m in modules},
        "global_flags": _global_flags(),
        "generators": _generators(model),
        "torch_rng": bits(torch.get_rng_state()),
        "numpy_rng": repr(np.random.get_state()),
        "python_rng": random.getstate(),
        "parametrize_cache": (
            {k: (v, bits(v)) for k, v in parametrize._cache.items()},
            parametrize._cache_enabled,
        ),
        "state_keys": list(model.state_dict()),
    }


FIELDS = {
    "parameter": ("class", "value", "_version", "requires_grad", "device", "dtype", "attributes"),
    "buffer": ("value", "_version", "device", "dtype"),
}


def _same_identity_and_value(a: dict, b: dict, what: str, problems: list) -> None:
    if list(a) != list(b):
        problems.append(f"{what}: names {sorted(set(a) ^ set(b))} appeared/disappeared")
    names = FIELDS.get(what, ("value", "version"))
    for name in a.keys() & b.keys():
        old, new = a[name], b[name]
        if old[0] is not new[0]:
            problems.append(f"{what} {name}: object replaced")
        changed = [
            names[i] if i < len(names) else str(i)
            for i, (x, y) in enumerate(zip(old[1:], new[1:]))
            if x != y
        ]
        if changed:
            problems.append(f"{what} {name}: {', '.join(changed)} changed")


def diff(before: dict, after: dict) -> list[str]:
    """What changed between two snapshots, one sentence per difference ([] = bitwise the same)."""
    problems: list[str] = []
    _same_identity_and_value(before["params"], after["params"], "parameter", problems)
    _same_identity_and_value(before["grads"], after["grads"], ".grad of", problems)
    _same_identity_and_value(before["buffers"], after["buffers"], "buffer", problems)
    _same_identity_and_value(before["modules"], after["modules"], "module", problems)
    _same_identity_and_value(before["generators"], after["generators"], "generator", problems)
    for n in before["tensor_attrs"]:
        _same_identity_and_value(
            before["tensor_attrs"][n],
            after["tensor_attrs"].get(n, {}),
            f"tensor attribute of {n!r}:",
            problems,
        )
    for key in (
        "training",
        "hooks",
        "global_hooks",
        "attrs",
        "plain_attrs",
        "global_flags",
        "state_keys",
    ):
        if before[key] != after[key]:
            changed = (
                {
                    k: (before[key][k], after[key].get(k))
                    for k in before[key]
                    if before[key][k] != after[key].get(k)
                }
                if isinstance(before[key], dict)
                else (before[key], after[key])
            )
            problems.append(f"{key} changed (before, after): {str(changed)[:300]}")
    for key in ("torch_rng", "numpy_rng", "python_rng"):
        if before[key] != after[key]:
            problems.append(f"{key} state changed")
    cache_b, cache_a = before["parametrize_cache"], after["parametrize_cache"]
    if (
        cache_b[1] != cache_a[1]
        or list(cache_b[0]) != list(cache_a[0])
        or any(cache_b[0][k][0] is not cache_a[0][k][0] for k in cache_b[0])
    ):
        problems.append(
            f"parametrize cache changed: {len(cache_b[0])} -> {len(cache_a[0])} "
            f"entries, enabled {cache_b[1]} -> {cache_a[1]}"
        )
    return problems


def optimizer_problems(opt: torch.optim.Optimizer, model: nn.Module) -> list[str]:
    """An optimizer made before the run must still hold exactly the model's parameters."""
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    have = {id(p) for p in model.parameters()}
    return (
        []
        if held == have
        else [f"optimizer holds {len(held - have)} foreign parameters, misses {len(have - held)}"]
    )
