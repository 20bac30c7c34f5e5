"""Lesson: watching a DDP run's gradients on every rank.

Two CPU processes (gloo) train a two-headed model under DistributedDataParallel(
find_unused_parameters=True): rank 0's batches take `pos_head`, rank 1's take `neg_head`. Every
rank creates a GradWatch on the same folder and writes its own record,
`<folder>/<run id>/rank<r>/` (rank 0 picks the run id and shares it when the watch is created);
the watch sends one small all_reduce per step (on its writer thread) and records a
"rank_divergence" anomaly naming the heads and the ranks. Rank 0 then opens the whole run:
`GradWatch.open(folder).history()` (the folder's latest run) has a `rank` column, ranks side by
side.

Run it:      python -m gradviz_widgets.examples.ddp_watch          (starts 2 processes)
or:          torchrun --nproc_per_node=2 -m gradviz_widgets.examples.ddp_watch
Every process has a deadline: nothing here can hang for longer than `timeout` seconds.
"""

from __future__ import annotations

import datetime
import importlib
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from .ddp_unused import TwoHeads, batch, spawn_and_wait

STEPS = 4


def train_and_watch(folder: Path, steps: int = STEPS) -> str | None:
    """What every rank runs (the process group is up). Rank 0 returns the lesson's text."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradviz_widgets.watch import GradWatch

    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp = DDP(TwoHeads(), find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    watch = GradWatch(ddp, optimizer=opt, path=folder, loss_fn=nn.CrossEntropyLoss())
    x, y = batch(rank)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    watch.close()
    dist.barrier()  # every rank's record is complete
    if rank != 0:
        return None
    run = GradWatch.open(folder)
    h = run.history()
    wide = h[h.step == 0].pivot_table("norm", "param", "rank", observed=True)
    lines = [
        f"GradWatch.open({folder.name!r}): ranks {run.ranks}, {len(h)} rows "
        "(step, rank, param, ...)",
        "step 0, gradient norm per rank (DDP averaged them: equal on every rank):",
        *("   " + line for line in wide.to_string(float_format="{:.4g}".format).splitlines()),
        "anomalies:",
        *(f" - {a!r}: {a.detail}" if a.detail else f" - {a!r}" for a in run.anomalies),
    ]
    run.close()
    return "\n".join(lines)


def _worker(rank: int, world: int, folder: str, timeout: float) -> None:
    store = dist.FileStore(str(Path(folder) / "store"), world)
    dist.init_process_group(
        "gloo",
        store=store,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout),
    )
    try:
        text = train_and_watch(Path(folder) / "run")
    finally:
        dist.destroy_process_group()
    if text is not None:
        (Path(folder) / "lesson.txt").write_text(text, encoding="utf-8")


def run_ranks(world: int = 2, timeout: float = 120.0, start_method: str = "spawn") -> str:
    """Start `world` processes (torch.multiprocessing) and return rank 0's text."""
    worker = importlib.import_module(__spec__.name if __spec__ else __name__)._worker
    with tempfile.TemporaryDirectory() as folder:
        spawn_and_wait(worker, (world, folder, timeout), world, timeout, start_method)
        return (Path(folder) / "lesson.txt").read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    """Under torchrun (RANK set): this process is one rank; otherwise start 2 of them."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--start-method", choices=("spawn", "forkserver"), default="spawn")
    parser.add_argument("--folder", default=None, help="torchrun: where the ranks write")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        print(run_ranks(2, args.timeout, args.start_method), flush=True)
        return
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    folder = Path(args.folder or os.environ.get("GRADWATCH_DIR", "gradwatch-ddp"))
    try:
        text = train_and_watch(folder)
    finally:
        dist.destroy_process_group()
    if text is not None:
        print(text, flush=True)


if __name__ == "__main__":
    main()
