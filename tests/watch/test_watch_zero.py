"""ZeroRedundancyOptimizer steps its own local optimizer (over this rank's shard) inside its
step(): an outside tester's DDP run warned on every rank that an unwatched Adam stepped the
watched parameters and that its steps were NOT recorded, and advised watching that inner
optimizer, while every step was recorded right."""

from __future__ import annotations

import os
import tempfile
import warnings

import pytest
import torch
from torch import nn

from gradviz_widgets import GradWatch


def test_zero_redundancy_optimizer_is_one_watched_optimizer() -> None:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    if dist.is_initialized():
        pytest.skip("a process group is already running")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(
            "gloo", store=dist.FileStore(os.path.join(tmp, "store"), 1), rank=0, world_size=1
        )
        try:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 2))
            opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=0.01)
            truth = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                watch = GradWatch(model, optimizer=opt)
                for _ in range(3):
                    opt.zero_grad()
                    model(torch.randn(3, 5)).pow(2).mean().backward()
                    truth.append(
                        {n: p.grad.double().norm().item() for n, p in model.named_parameters()}
                    )
                    opt.step()
                watch.close()
        finally:
            dist.destroy_process_group()
    assert not [w for w in caught if "does not watch" in str(w.message)]
    history = watch.history()
    assert sorted(history.step.unique()) == [0, 1, 2]
    for step, norms in enumerate(truth):
        got = history[history.step == step].set_index("param").norm
        for name, value in norms.items():
            assert got[name] == pytest.approx(value, rel=1e-6)
