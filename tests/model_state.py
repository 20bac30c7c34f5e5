"""Helpers for the model-unchanged checks: a snapshot of all the state a run could disturb."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as module_mod

#: every hook dict of a module (the one list the model-state checks share)
HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)
GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
    "_global_module_registration_hooks",
    "_global_parameter_registration_hooks",
    "_global_buffer_registration_hooks",
)


def model_state(model: nn.Module) -> dict:
    """Everything about the model a run could disturb, with tensors cloned and identities kept."""
    return {
        "params": {
            n: (p, p.detach().clone(), p._version, p.requires_grad, p.device, p.dtype)
            for n, p in model.named_parameters(remove_duplicate=False)
        },
        "grads": {
            n: (p.grad, None if p.grad is None else p.grad.clone())
            for n, p in model.named_parameters()
        },
        "buffers": {
            n: (b, b.clone(), b._version, b.device, b.dtype) for n, b in model.named_buffers()
        },
        "training": {n: m.training for n, m in model.named_modules()},
        "hooks": {
            n: {d: dict(getattr(m, d)) for d in HOOK_DICTS} for n, m in model.named_modules()
        },
        "global_hooks": {d: dict(getattr(module_mod, d)) for d in GLOBAL_HOOKS},
        "attrs": {n: sorted(vars(m)) for n, m in model.named_modules()},
        "state_keys": list(model.state_dict()),
    }


def assert_unchanged(model: nn.Module, before: dict) -> None:
    after = model_state(model)
    assert list(after["params"]) == list(before["params"])
    for name, (p, value, version, rg, device, dtype) in before["params"].items():
        q = after["params"][name][0]
        assert q is p, f"{name} was replaced"
        assert torch.equal(q.detach(), value), f"{name} changed value"
        assert q._version == version, f"{name} was written in place"
        assert (q.requires_grad, q.device, q.dtype) == (rg, device, dtype), name
    for name, (grad, value) in before["grads"].items():
        now = after["grads"][name][0]
        if grad is None:
            assert now is None, f"{name}.grad appeared"
        else:
            assert now is grad, f"{name}.grad object replaced"
            assert torch.equal(now, value), f"{name}.grad changed"
    assert list(after["buffers"]) == list(before["buffers"])
    for name, (b, value, version, device, dtype) in before["buffers"].items():
        c = after["buffers"][name][0]
        assert c is b and torch.equal(c, value), f"buffer {name} changed"
        assert c._version == version and (c.device, c.dtype) == (device, dtype), name
    assert after["training"] == before["training"]
    assert after["hooks"] == before["hooks"]
    assert after["global_hooks"] == before["global_hooks"]
    assert after["attrs"] == before["attrs"]
    assert after["state_keys"] == before["state_keys"]
