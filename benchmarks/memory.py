"""Child process for the peak-memory columns: one mode, fresh interpreter.

    python -m benchmarks.memory --size full --device cpu --mode run --models resnet50

Prints one JSON line per model. On CPU the measure is the resident set: the model is built and
the mode runs once (warm-up: lazy initialisation, allocator caches), `.grad` is cleared, then the
kernel's RSS high-water mark (VmHWM) is reset and the mode runs once more; `peak_mib` is that
run's high-water mark and `base_mib` the RSS just before it (interpreter, torch, model, input).
The parent starts this process with MALLOC_MMAP_THRESHOLD_=131072 (glibc): every tensor of
128 KiB or more is then its own mmap and goes back to the OS when freed, so the RSS follows the
live tensors instead of what malloc kept from the warm-up (with glibc's default, sliding threshold,
memory freed after the warm-up stays resident and the second run's peak says little).
On CUDA it is torch.cuda.max_memory_allocated over the same second run (base: memory_allocated).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys

import torch

from benchmarks.common import MODES, build, clear_grads, mode_step, reset_peak_rss, rss_kib


def measure(name: str, size: str, device: str, mode: str) -> dict:
    model, x, _ = build(name, size, device)
    step, ex = mode_step(mode, model, x, device)
    step()
    clear_grads(model)
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        peak = torch.cuda.max_memory_allocated()
        what = "torch.cuda.max_memory_allocated"
    else:
        if not reset_peak_rss():
            raise RuntimeError("cannot reset the RSS high-water mark (/proc/self/clear_refs)")
        base = rss_kib()["VmRSS"] * 1024
        step()
        peak = rss_kib()["VmHWM"] * 1024
        what = "process RSS high-water mark (VmHWM)"
    out = {
        "model": name,
        "mode": mode,
        "base_mib": base / 2**20,
        "peak_mib": peak / 2**20,
        "delta_mib": (peak - base) / 2**20,
        "measure": what,
    }
    if ex is not None:
        out["host_syncs"] = ex.report.host_syncs
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", default="full", choices=("full", "tiny"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mode", required=True, choices=MODES)
    ap.add_argument("--models", required=True, help="comma-separated zoo names")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in args.models.split(","):
        try:
            row = measure(name, args.size, args.device, args.mode)
        except Exception as e:  # reported in the table, the other models still run
            row = {"model": name, "mode": args.mode, "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(row), flush=True)
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
