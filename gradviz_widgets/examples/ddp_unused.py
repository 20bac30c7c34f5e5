"""Lesson: why does DDP say my parameters were unused?

Two CPU processes (gloo) train a model whose forward takes one of two heads depending on the
data: rank 0's batch takes `pos_head`, rank 1's takes `neg_head`. Part 1 trains it under
DistributedDataParallel(find_unused_parameters=False) and shows the error DDP raises (each
rank's message lists its own parameter indices, not why, nor which ranks did use them). Part 2 runs GradExplorer on each rank's
`ddp.module` (no collective) and `gather_ranks` (one all_gather): it names the parameters, the
ranks, and the reason.

Run it:  python -m gradviz_widgets.examples.ddp_unused
Every process has a deadline: nothing here can hang for longer than `timeout` seconds.
"""

from __future__ import annotations

import datetime
import importlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

WORLD = 2


class TwoHeads(nn.Module):
    """A shared stem and a data-dependent choice of head (the sign of the batch's sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.pos_head = nn.Linear(8, 3)
        self.neg_head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        return self.pos_head(h) if x.sum() > 0 else self.neg_head(h)


def batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank 0 gets a batch with a positive sum, rank 1 a negative one."""
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(6, 4, generator=g) + 0.1
    return (x if rank == 0 else -x), torch.randint(0, 3, (6,), generator=g)


def _process_group(folder: Path, name: str, rank: int, world: int) -> None:
    import torch.distributed as dist

    store = dist.FileStore(str(folder / name), world)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=20)
    )


def _train(ddp: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 3) -> list[str]:
    """Plain training steps; what happened at each (the error ends the loop)."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    seen = []
    for step in range(steps):
        try:
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x), y).backward()
            stem = dict(ddp.named_parameters())["module.stem.weight"].grad
            norm = float(stem.norm()) if stem is not None else float("nan")
            # averaged over the ranks when DDP synchronised them, so equal on every rank
            seen.append(f"step {step}: ok (stem.weight.grad norm {norm:.4f})")
            opt.step()
        except RuntimeError as e:
            text = str(e)
            which = [line.strip() for line in text.splitlines() if "did not receive grad" in line]
            seen.append(
                f"step {step}: RuntimeError: {text.split('. ')[0]}. (...) " + " ".join(which)
            )
            break
    return seen


def _worker(rank: int, world: int, folder: str) -> None:
    """One rank: part 1 (DDP raises), part 2 (the explorer explains); writes rank{r}.json."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradviz_widgets import GradExplorer
    from gradviz_widgets.distributed import gather_ranks, unwrap

    torch.set_num_threads(1)
    folder_ = Path(folder)
    x, y = batch(rank)
    _process_group(folder_, "store1", rank, world)
    torch.manual_seed(0)
    ddp = DDP(TwoHeads(), find_unused_parameters=False)
    training = _train(ddp, x, y)
    dist.destroy_process_group()  # a fresh group: a failed DDP iteration can leave work pending
    _process_group(folder_, "store2", rank, world)
    try:
        inner, kind = unwrap(ddp)
        report = GradExplorer(inner, x, loss_fn=nn.CrossEntropyLoss(), target=y).run()
        ranks = gather_ranks(report, ddp=ddp)
    finally:
        dist.destroy_process_group()
    result = {
        "training": training,
        "wrapper": kind,
        "findings": list(ranks.findings),
        "table": {str(r): {n: list(p) for n, p in t.items()} for r, t in ranks.table.items()},
    }
    (folder_ / f"rank{rank}.json").write_text(json.dumps(result))


def run_ranks(
    world: int = WORLD, timeout: float = 120.0, start_method: str = "spawn"
) -> list[dict[str, Any]]:
    """Start `world` processes (torch.multiprocessing) and return each rank's result; every
    process is killed if they are not all done within `timeout` seconds. "forkserver" imports
    torch once for all ranks (spawn imports it in each: seconds per rank on a busy machine)."""
    import torch.multiprocessing as mp

    if start_method == "forkserver":
        mp.set_forkserver_preload(
            [
                "torch",
                "torch._dynamo",
                "torch.nn.parallel",
                "gradviz_widgets.distributed.ddp",
                __spec__.name,
            ]
        )
    worker = importlib.import_module(__spec__.name if __spec__ else __name__)._worker
    with tempfile.TemporaryDirectory() as folder:
        spawn_and_wait(worker, (world, folder), world, timeout, start_method)
        return [json.loads((Path(folder) / f"rank{r}.json").read_text()) for r in range(world)]


def spawn_and_wait(worker: Any, args: tuple, world: int, timeout: float, start_method: str) -> None:
    """Run `worker(rank, *args)` in `world` processes; kill them all if they are not done
    within `timeout` seconds (TimeoutError)."""
    import torch.multiprocessing as mp

    ctx = mp.start_processes(worker, args=args, nprocs=world, join=False, start_method=start_method)
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ranks still running after {timeout:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(10)
        if start_method == "forkserver":  # the server would outlive us for a while
            _stop_forkserver()


def _stop_forkserver() -> None:
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def lesson(results: list[dict[str, Any]]) -> str:
    """The text the example prints."""
    lines = [
        "1. DistributedDataParallel(find_unused_parameters=False), rank 0's batch sums "
        "positive, rank 1's negative:"
    ]
    for r, res in enumerate(results):
        lines += [f"   rank {r}, {s}" for s in res["training"]]
    lines += [
        "   (when DDP synchronises, stem.weight.grad is the same on every rank: a step that "
        "'worked' with different norms was never averaged; each rank's message gives its "
        "own parameter indices, not why, nor which ranks did use them)",
        "",
        f"2. GradExplorer on each rank's model ({results[0]['wrapper']} unwrapped to "
        "ddp.module, no collective) + gather_ranks (one all_gather):",
    ]
    table = results[0]["table"]
    ranks = sorted(table, key=int)
    names = list(table[ranks[0]])
    width = max(len(n) for n in names) + 2
    lines.append("   " + "parameter".ljust(width) + "".join(f"rank {r}".ljust(24) for r in ranks))
    for n in names:
        cells = [_cell(table[r][n]) for r in ranks]
        lines.append("   " + n.ljust(width) + "".join(c.ljust(24) for c in cells))
    lines += ["", "findings:", *(f" - {f}" for f in results[0]["findings"])]
    return "\n".join(lines)


def _cell(entry: list) -> str:
    status, reason, norm = entry
    if status == "none":
        return f"none ({reason})"
    return f"{status} {norm:.3g}"


def main(argv: list[str] | None = None) -> None:
    """`--timeout SECONDS`, `--start-method spawn|forkserver`."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--start-method", choices=("spawn", "forkserver"), default="spawn")
    args = parser.parse_args(argv)
    print(lesson(run_ranks(WORLD, args.timeout, args.start_method)), flush=True)


if __name__ == "__main__":
    main()
