"""Starting real gloo process groups for the distributed tests (one process per rank).

`launch(module, scenario, world, tmp_path)` forks `world` processes from a forkserver that
imported torch once; each meets the others through a FileStore in tmp_path, runs
`module.SCENARIOS[scenario](rank, world, folder)` and writes its dict to `rank{r}.json`. Every
rank has a deadline: a hang fails the test and every rank is killed. `Counter` counts calls of
the torch.distributed collectives (the module attributes, patched in place).
"""

from __future__ import annotations

import datetime
import importlib
import json
import multiprocessing as mp
import time
from collections.abc import Iterator
from multiprocessing import forkserver
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

DEADLINE_S = 120
#: imported once in the forkserver (DDP's constructor alone imports torch._dynamo: seconds)
PRELOAD = [
    "torch",
    "torch._dynamo",
    "torch.distributed.fsdp",
    "torch.distributed.device_mesh",
    "torch.nn.parallel",
    "gradviz_widgets",
    "gradviz_widgets.distributed.fsdp",
    "gradviz_widgets.watch",
]


def launch(module: str, scenario: str, world: int, tmp_path: Path) -> list[dict]:
    """Run `scenario` of test module `module` on `world` ranks; every rank's result dict."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD, __name__, module])
    procs = [
        ctx.Process(target=_main, args=(module, scenario, r, world, tmp_path), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + DEADLINE_S
    try:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        assert not hung, (
            f"{scenario} world {world}: ranks {hung} still running after {DEADLINE_S} s"
        )
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
    codes = [p.exitcode for p in procs]
    assert codes == [0] * world, f"exit codes {codes}; see the captured stderr"
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


def _main(module: str, scenario: str, rank: int, world: int, folder: Path) -> None:
    started = time.monotonic()
    torch.set_num_threads(1)
    store = dist.FileStore(str(folder / "store"), world)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    try:
        result = importlib.import_module(module).SCENARIOS[scenario](rank, world, folder)
    finally:
        dist.destroy_process_group()
    result["seconds"] = time.monotonic() - started
    (folder / f"rank{rank}.json").write_text(json.dumps(result))


class Counter:
    """Counts calls of torch.distributed collectives (module attributes patched in place)."""

    NAMES = (
        "all_gather",
        "all_gather_object",
        "all_gather_into_tensor",
        "all_reduce",
        "broadcast",
        "reduce_scatter_tensor",
        "barrier",
    )

    def __enter__(self) -> dict[str, int]:
        self.calls: dict[str, int] = {}
        self.saved = {n: getattr(dist, n) for n in self.NAMES}
        for name, fn in self.saved.items():

            def counted(*a, _n=name, _f=fn, **k):  # noqa: ANN002, ANN003, ANN202
                self.calls[_n] = self.calls.get(_n, 0) + 1
                return _f(*a, **k)

            setattr(dist, name, counted)
        return self.calls

    def __exit__(self, *exc: object) -> None:
        for name, fn in self.saved.items():
            setattr(dist, name, fn)


def stop_forkserver() -> Iterator[None]:
    """For a module-scoped autouse fixture: the forkserver (nothing else of ours) outlives a
    launch; stop it after the module."""
    yield
    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def test_counter_counts_and_restores() -> None:
    original = dist.all_reduce
    with Counter() as calls, pytest.raises((RuntimeError, ValueError)):
        dist.all_reduce(torch.zeros(1))  # no process group here: it raises, still counted
    assert calls == {"all_reduce": 1} and dist.all_reduce is original
