"""GradWatch benchmarks: training-step overhead and the on-disk store at scale.

    python -m benchmarks.watch_bench                  # CPU, writes docs/watch_benchmarks.md
    python -m benchmarks.watch_bench --device cuda --out /tmp/cuda.md
    python -m benchmarks.watch_bench --skip-store     # overhead only

Overhead: one model, one optimizer, three variants interleaved in rounds so that load drift on a
shared machine hits all of them alike: "off" (the watch's hooks registered but disabled: a few
Python calls), "watch" (everything, update ratios at every step) and "no ratio" (update_ratio
off). The default, update ratios every 10th step, costs "no ratio" plus a tenth of the difference.
Each number is the median over rounds of the mean step time of a block of steps; on CUDA the
block is synchronised before and after, never inside. The CPU columns are thread CPU times
(`time.thread_time`, and the writer thread's clock): the training thread's CPU inside the
watch's optimizer hooks (timed by hooks registered before and after them) and the writer's CPU,
per step, against the training thread's CPU per step without the watch. On a shared, noisy
machine they resolve a few percent where wall-time ratios cannot.

Store: 1,000 parameters x 100,000 steps of synthetic numbers (log-normal random walks, float32
mantissas as noisy as real ones) written through the store in 50-step chunks, then the file size,
the time to open the run and the time to read one parameter back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks.watch_live import KernelComm, follow, load, open_view

ROOT = Path(__file__).resolve().parent.parent


def _models(device: str, quick: bool, only: str = "") -> list[tuple[str, nn.Module, tuple, int]]:
    from gradviz_widgets.examples import dead_branch_example, gpt2_like, resnet50

    torch.manual_seed(0)
    out = []
    net, x, y = dead_branch_example()
    out.append(("tiny seed net (dead branch, 8 tensors)", net, (x, y, "ce"), 200))
    side, batch = (64, 2) if quick else ((224, 32) if device == "cuda" else (160, 4))
    out.append(
        (
            f"ResNet-50 (25.6M params, batch {batch}x3x{side}x{side})",
            resnet50(10),
            (torch.randn(batch, 3, side, side), torch.randint(0, 10, (batch,)), "ce"),
            2,
        )
    )
    seq, gb = (128, 1) if quick else ((1024, 8) if device == "cuda" else (256, 1))
    gpt = gpt2_like(n_layer=12, d_model=768, n_head=12, vocab=50257, seq=seq)
    ids = torch.randint(0, 50257, (gb, seq))
    out.append((f"GPT-2 small shape (124M params, batch {gb}x{seq})", gpt, (ids, ids, "lm"), 2))
    keys = [k.strip().lower() for k in only.split(",") if k.strip()]
    return [m for m in out if not keys or any(k in m[0].lower() for k in keys)]


def _step_fn(model: nn.Module, opt: torch.optim.Optimizer, data: tuple, device: str):
    x, y, kind = data
    x, y = x.to(device), y.to(device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        if kind == "lm":
            loss = nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())
        else:
            loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()

    return step


def _block(step, n: int, device: str, cpu: list[float] | None = None) -> float:
    """Mean wall time of `n` steps; appends the training thread's CPU time per step to `cpu`."""
    if device == "cuda":
        torch.cuda.synchronize()
    t, c = time.perf_counter(), time.thread_time()
    for _ in range(n):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    if cpu is not None:
        cpu.append((time.thread_time() - c) / n)
    return (time.perf_counter() - t) / n


def _writer_cpu(watch) -> float:
    """CPU seconds the watch's writer thread has used so far."""
    return time.clock_gettime(time.pthread_getcpuclockid(watch._writer.ident))


class _HookTimer:
    """Optimizer hooks around the watch's own: registered before it (`outer`) and after it."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.opt, self.total, self.steps, self._t = opt, 0.0, 0, 0.0
        opt.register_step_pre_hook(lambda *a: self._start())
        opt.register_step_post_hook(lambda *a: self._start())

    def _start(self) -> None:
        self._t = time.thread_time()

    def inner(self) -> None:
        self.opt.register_step_pre_hook(lambda *a: self._stop())
        self.opt.register_step_post_hook(lambda *a: self._stop(step=True))

    def _stop(self, step: bool = False) -> None:
        self.total += time.thread_time() - self._t
        self.steps += step

    def take(self) -> float:
        out = self.total / max(self.steps, 1)
        self.total, self.steps = 0.0, 0
        return out


def overhead(device: str, quick: bool, rounds: int, models: str = "") -> list[dict]:
    from gradviz_widgets.watch import GradWatch

    rows = []
    for name, model, data, n in _models(device, quick, models):
        model.to(device)
        opt = (
            torch.optim.Adam(model.parameters(), lr=1e-4)
            if "tiny" not in name
            else torch.optim.SGD(model.parameters(), lr=0.01)
        )
        step = _step_fn(model, opt, data, device)
        n = n * (10 if device == "cuda" else 1) if "tiny" not in name else n
        timer = _HookTimer(opt)
        watch = GradWatch(model, optimizer=opt, path=tempfile.mkdtemp(prefix="watchbench-"))
        timer.inner()
        rec = watch._recorder
        view = open_view(watch)
        # (recording, update ratios, every Nth step, live view open); "view": the defaults
        # (update ratios every 10th step) with watch.show() following the run
        variants = {
            "off": (False, False, 1, False),
            "watch": (True, True, 1, False),
            "no ratio": (True, False, 1, False),
            "view": (True, True, 10, True),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        inside: dict[str, list[float]] = {k: [] for k in variants}
        cpu: dict[str, list[float]] = {k: [] for k in variants}
        writer: dict[str, list[float]] = {k: [] for k in variants}
        loads = [load()]
        for on, ratio, every, shown in variants.values():  # warm every path once
            rec.enabled, rec.update_ratio, rec.ratio_every = on, ratio, every
            follow(watch, view, shown)
            _block(step, 1, device)
        sent0 = (KernelComm.messages, KernelComm.bytes, view.updates)
        for _ in range(rounds):
            for k, (on, ratio, every, shown) in variants.items():
                rec.enabled, rec.update_ratio, rec.ratio_every = on, ratio, every
                follow(watch, view, shown)
                timer.take()
                w0 = _writer_cpu(watch)
                times[k].append(_block(step, n, device, cpu[k]))
                watch._writer.sync()
                writer[k].append((_writer_cpu(watch) - w0) / n)
                inside[k].append(timer.take())
            loads.append(load())
        follow(watch, view, False)
        view_s = sum(times["view"]) * n  # wall seconds with the view open
        sent = (
            KernelComm.messages - sent0[0],
            KernelComm.bytes - sent0[1],
            view.updates - sent0[2],
        )
        rec.enabled = True
        steps = watch.steps
        watch.close()
        off = statistics.median(times["off"])
        off_cpu = statistics.median(cpu["off"])
        rows.append(
            {
                "model": name,
                "off_ms": off * 1e3,
                "watch": statistics.median(times["watch"]) / off,
                "no_ratio": statistics.median(times["no ratio"]) / off,
                "steps": steps,
                "in_watch": statistics.median(inside["watch"]) / off_cpu,
                "in_no_ratio": statistics.median(inside["no ratio"]) / off_cpu,
                "writer": statistics.median(writer["watch"]) / off_cpu,
                "off_cpu_ms": off_cpu * 1e3,
                "view": statistics.median(times["view"]) / off,
                "view_cpu": statistics.median(cpu["view"]) / off_cpu,
                "view_writer": statistics.median(writer["view"]) / off_cpu,
                "view_redraws_per_s": sent[2] / max(view_s, 1e-9),
                "view_kb_per_s": sent[1] / 1e3 / max(view_s, 1e-9),
                "load": (min(loads), max(loads)),
            }
        )
        print(rows[-1], flush=True)
        del model, opt, step
    return rows


def store_scale(n_params: int = 1000, n_steps: int = 100_000, chunk: int = 50) -> dict:
    from gradviz_widgets.watch import GradWatch
    from gradviz_widgets.watch.store import Chunk, ParamInfo, SQLiteStore

    folder = Path(tempfile.mkdtemp(prefix="watchstore-"))
    store = SQLiteStore(folder)
    store.add_params(
        [
            ParamInfo(
                i,
                f"layer{i // 2}.{'weight' if i % 2 == 0 else 'bias'}",
                f"layer{i // 2}",
                (256, 256),
                65536,
                0,
            )
            for i in range(n_params)
        ]
    )
    rng = np.random.default_rng(0)
    level = rng.normal(-2, 1, n_params)
    t0 = time.perf_counter()
    for start in range(0, n_steps, chunk):
        walk = level + np.cumsum(rng.normal(0, 0.05, (chunk, n_params)), axis=0)
        level = walk[-1]
        norm = np.exp(walk)
        store.write(
            Chunk(
                np.arange(start, start + chunk),
                time.time() + np.arange(chunk) * 0.01,
                norm,
                norm * rng.uniform(0.01, 0.1, (chunk, n_params)),
                np.zeros((chunk, n_params)),
                np.full((chunk, n_params), 3, np.uint8),
                np.exp(walk - 6 + rng.normal(0, 0.3, (chunk, n_params))),
            ),
            [],
        )
    write_s = time.perf_counter() - t0
    store.close()
    size = sum(p.stat().st_size for p in folder.iterdir())
    t0 = time.perf_counter()
    run = GradWatch.open(folder)
    _ = run.params, run.anomalies
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    one = run.history(params=["layer7.weight"])
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    run.overview()
    overview_s = time.perf_counter() - t0
    assert len(one) == n_steps
    result = {
        "bytes": size,
        "per_value": size / (n_params * n_steps),
        "write_s": write_s,
        "open_s": open_s,
        "read_one_s": read_s,
        "overview_s": overview_s,
    }
    print(result, flush=True)
    return result


def report(device: str, rows: list[dict], store: dict | None) -> str:
    lines = [
        "# GradWatch benchmarks",
        "",
        f"Generated by `python -m benchmarks.watch_bench` on {device} "
        f"(torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
        + (f", {torch.cuda.get_device_name()}" if device == "cuda" else "")
        + ").",
        "",
        _load_note(rows),
        "",
        "## Training-step overhead (Adam; tiny net: SGD)",
        "",
        "| model | step without watch | update_ratio=True (every step) | update_ratio=False "
        "| CPU in the watch's hooks (full / no ratio) | writer thread CPU |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['off_ms']:.2f} ms | {r['watch']:.3f}x | "
            f"{r['no_ratio']:.3f}x | +{100 * r['in_watch']:.1f}% / "
            f"+{100 * r['in_no_ratio']:.1f}% | +{100 * r['writer']:.1f}% |"
        )
    lines += [
        "",
        "CPU columns: the training thread's CPU time inside the watch's optimizer hooks, "
        "and the writer thread's CPU time, per step, as a fraction of the training thread's "
        "CPU time for a step without the watch (`time.thread_time`: waiting for a core does "
        "not count, so they hold on a busy machine where the wall-time ratios do not).",
    ]
    lines += [
        "",
        "## With the live view open (`watch.show()`, default `update_ratio=10`)",
        "",
        "| model | step, view open (wall) | training thread CPU | writer thread CPU "
        "(statistics + view) | redraws per s | sent per s | load (1 min) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["load"]
        lines.append(
            f"| {r['model']} | {r['view']:.3f}x | {r['view_cpu']:.3f}x | "
            f"+{100 * r['view_writer']:.1f}% | {r['view_redraws_per_s']:.1f} | "
            f"{r['view_kb_per_s']:.1f} KB | {lo:.1f}-{hi:.1f} |"
        )
    lines += [
        "",
        "Ratios against the step with the watch's hooks disabled, interleaved in the same "
        "rounds as the table above. The view's messages go through a comm that serialises them "
        "with a jupyter_client Session, as a kernel does (benchmarks/watch_live.py); no browser. "
        "A ratio below 1.000x is not a speed-up: the view's cost is then smaller than the "
        "block-to-block noise of the step itself (a few percent on this machine, more for the "
        "larger models whose steps share the cores with the writer thread), so read it as "
        '"no measurable cost", not as a gain.',
    ]
    if store:
        lines += [
            "",
            "## Store: 1,000 parameters x 100,000 steps (synthetic)",
            "",
            f"- size on disk: {store['bytes'] / 1e9:.2f} GB "
            f"({store['per_value']:.1f} bytes per (step, parameter))",
            f"- write (encode + SQLite, 50-step chunks): {store['write_s']:.1f} s",
            f"- `GradWatch.open(path)` + params + anomalies: {store['open_s']:.3f} s",
            f"- `history(params=[one])` (decodes every chunk): {store['read_one_s']:.1f} s",
            f"- overview for the heat map (every chunk): {store['overview_s']:.1f} s",
        ]
    return "\n".join(lines) + "\n"


def _load_note(rows: list[dict]) -> str:
    """What the machine was doing: wall-time ratios mean little when it was oversubscribed."""
    cores = os.cpu_count() or 1
    loads = [x for r in rows for x in r.get("load", ())]
    if not loads:
        return f"Machine: {cores} CPU cores."
    lo, hi = min(loads), max(loads)
    text = f"Machine: {cores} CPU cores, 1-minute load average {lo:.1f}-{hi:.1f} during the run."
    if hi > cores:
        text += (
            " **Oversubscribed**: a step waited for a core for part of its wall time, so "
            "wall-time ratios (and ratios below 1x) are noise of a few tens of percent; the "
            "thread-CPU columns (`time.thread_time`, which does not count waiting) are the "
            "numbers to read."
        )
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="small inputs (smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-store", action="store_true")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--models", default="", help="comma-separated: tiny,resnet,gpt-2")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "watch_benchmarks.md")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = overhead(args.device, args.quick, args.rounds, args.models)
    store = None if args.skip_store else store_scale()
    from .watch_spikes_cost import section

    text = report(args.device, rows, store) + section()
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
