"""Where the time of `ex.run()` goes, per model and stage (docs/benchmarks.md, "Where the time goes").

    python -m benchmarks.stages                   # every model, 5 interleaved repeats
    python -m benchmarks.stages --models chain1000,seed --repeats 3 --out-dir out/stages

Per model, in one process and in alternation (the order rotates every repeat): a bare forward
+ `loss.backward()` (forward and backward timed apart), `ex.run()` with the stage clock on
(gradviz_widgets.run.timing.stage_times), the same with `track_flow=False`, and `ex.run()` with
a backward hook on every module. The table derives each cost from medians of the same process:
attribution = run's forward - bare forward; flow = run's backward - the flow-free run's
backward (+ registering the flow hooks); autograd.grad = the flow-free backward - bare backward.
The result goes into `benchmarks.json` under "stages" and benchmarks.md is re-rendered.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/stages.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common import ROOT  # noqa: E402
from benchmarks.util import log, median  # noqa: E402

Loss = Callable[[Any], torch.Tensor] | None
Built = tuple[nn.Module, Any, Loss, str]
MODES = ("bare", "run", "view", "noflow", "hooks", "resident")
#: issue 21: ex.run() / bare (wall) per model, and hooks on every module / bare
RUN_TARGETS = {
    "seed": 2.0,
    "cnn12": 1.10,
    "resnet50": 1.10,
    "gpt2_hf": 1.15,
    "bert_hf": 1.15,
    "chain1000": 3.0,
}
HOOK_TARGETS = {"resnet50": 1.5, "gpt2_hf": 1.5}


def _seed() -> Built:
    from gradviz_widgets.examples import dead_branch_example

    net, x, _ = dead_branch_example()
    return net, x, None, "the seed network (examples.dead_branch_example, 8 tensors)"


def _cnn(blocks: int = 12, width: int = 32) -> Built:
    layers: list[nn.Module] = []
    for i in range(blocks):
        layers += [nn.Conv2d(3 if i == 0 else width, width, 3, padding=1), nn.BatchNorm2d(width)]
        layers.append(nn.ReLU())
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))
    return (
        net,
        torch.randn(8, 3, 32, 32),
        None,
        f"{blocks} x (Conv 3x3 {width} + BN + ReLU), 8x3x32x32",
    )


def _resnet50() -> Built:
    from gradviz_widgets.examples import resnet50

    net = resnet50(num_classes=1000)
    return net, torch.randn(8, 3, 224, 224), None, "ResNet-50 (built in code), batch 8 x 224²"


def _logits(out: Any) -> torch.Tensor:
    return out.logits.sum()


def _hidden(out: Any) -> torch.Tensor:
    return out.last_hidden_state.sum()


def _gpt2() -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=6, n_embd=384, n_head=6, use_cache=False)
    net = GPT2LMHeadModel(cfg).eval()  # dropout off: the same work in every mode
    x = torch.randint(0, cfg.vocab_size, (2, 128))
    return net, x, _logits, "transformers GPT2LMHeadModel (6 layers x 384), 2 x 128 tokens"


def _bert() -> Built:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        num_hidden_layers=6, hidden_size=384, num_attention_heads=6, intermediate_size=1536
    )
    net = BertModel(cfg, add_pooling_layer=False).eval()
    x = torch.randint(0, cfg.vocab_size, (2, 128))
    return net, x, _hidden, "transformers BertModel (6 layers x 384), 2 x 128 tokens"


def _chain() -> Built:
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(16, 16) for _ in range(1000)])
    return net, torch.randn(8, 16), None, "1,000 x Linear(16, 16), batch 8"


MODELS: dict[str, Callable[[], Built]] = {
    "seed": _seed,
    "cnn12": _cnn,
    "resnet50": _resnet50,
    "gpt2_hf": _gpt2,
    "bert_hf": _bert,
    "chain1000": _chain,
}


Sample = dict[str, dict[str, float]]  # "wall" / "cpu" -> "total" and each stage -> seconds


def _steps(net: nn.Module, x: Any, loss: Loss) -> dict[str, Callable[[], Sample]]:
    """One callable per mode, each returning its seconds ("total" and, for runs, per stage)."""
    from gradviz_widgets import GradExplorer
    from gradviz_widgets.run.timing import stage_times

    params = [p for p in net.parameters() if p.requires_grad]
    to_loss = loss or (lambda out: out.sum())

    def bare() -> dict[str, dict[str, float]]:
        for p in params:
            p.grad = None
        t0, c0, f0 = time.perf_counter(), time.process_time(), _faults()
        out = to_loss(net(x))
        t1, c1 = time.perf_counter(), time.process_time()
        out.backward()
        t2, c2 = time.perf_counter(), time.process_time()
        return {
            "wall": {"total": t2 - t0, "forward": t1 - t0, "backward": t2 - t1},
            "cpu": {"total": c2 - c0, "forward": c1 - c0, "backward": c2 - c1},
            "faults": {"total": _faults() - f0},
        }

    def explorer_step(**kw: Any) -> Callable[[], Sample]:
        return _timed_run(GradExplorer(net, x, loss_fn=loss, **kw), stage_times)

    hooked = GradExplorer(net, x, loss_fn=loss)
    for path, _ in net.named_modules():
        if path:
            hooked.set_hook(path, "backward")
    plain = explorer_step()

    def resident() -> Sample:
        """`ex.run()` while the model holds a `.grad` per parameter (after a training step;
        filled before the clock starts): the run's gradients need memory beside it."""
        for p in params:
            p.grad = torch.zeros_like(p)
        return plain()

    return {
        "bare": bare,
        "run": plain,
        "view": _click(GradExplorer(net, x, loss_fn=loss), stage_times),
        "noflow": explorer_step(track_flow=False),
        "hooks": _timed_run(hooked, stage_times),
        "resident": resident,
    }


def _click(ex: Any, stage_times: Any) -> Callable[[], Sample]:
    """A click's re-run: `ex.run(view=...)` measuring the flow the widget's first view draws."""
    widget = ex.show()
    view = widget.measure_view()
    widget.close()  # a widget left open would redraw each run inside the clock
    return _timed_run(ex, stage_times, view)


def _timed_run(ex: Any, stage_times: Any, view: Any = None) -> Callable[[], Sample]:
    def step() -> Sample:
        with stage_times() as clock:
            t0, c0, f0 = time.perf_counter(), time.process_time(), _faults()
            ex.run(view=view)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {
            "wall": {"total": wall, **clock.seconds},
            "cpu": {"total": cpu, **clock.cpu},
            "faults": {"total": _faults() - f0},
        }

    return step


def _faults() -> int:
    """Minor page faults of this process so far: memory the allocator mapped afresh, which
    the kernel zero-fills on first touch (a large share of a big model's step, and one that
    moves with the allocator's state between repeats)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def stage_row(name: str, repeats: int, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Medians per mode and stage over `repeats` interleaved rounds, and the load beside them."""
    torch.manual_seed(0)
    net, x, loss, description = MODELS[name]()
    steps = _steps(net, x, loss)
    for mode in modes:  # warm-up
        steps[mode]()
    samples: dict[str, list[Sample]] = {m: [] for m in modes}
    load = os.getloadavg()[0]
    for r in range(repeats):
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
            for p in net.parameters():  # every mode starts as the suite's do: no `.grad` held
                p.grad = None
            gc.collect()
            samples[mode].append(steps[mode]())

    def med(mode: str, clock: str) -> dict[str, float]:
        keys = {k for s in samples[mode] for k in s[clock]}
        return {k: median([s[clock].get(k, 0.0) for s in samples[mode]]) * 1e3 for k in keys}

    def paired(mode: str, clock: str) -> float:
        pairs = zip(samples[mode], samples["bare"])
        return median([a[clock]["total"] / b[clock]["total"] for a, b in pairs])

    return {
        "description": description,
        "params": sum(p.numel() for p in net.parameters()),
        "repeats": repeats,
        "load": [load, os.getloadavg()[0]],
        "ms": {m: med(m, "wall") for m in modes},
        "cpu_ms": {m: med(m, "cpu") for m in modes},
        "paired_run_ratio": paired("run", "wall"),
        "paired_view_ratio": paired("view", "wall") if "view" in modes else None,
        "cpu_view_ratio": paired("view", "cpu") if "view" in modes else None,
        "paired_hooks_ratio": paired("hooks", "wall"),
        "cpu_run_ratio": paired("run", "cpu"),
        "cpu_hooks_ratio": paired("hooks", "cpu"),
        "paired_resident_ratio": paired("resident", "wall") if "resident" in modes else None,
        "faults": {m: median([s["faults"]["total"] for s in samples[m]]) for m in modes},
    }


def breakdown(row: dict[str, Any], clock: str = "cpu_ms") -> dict[str, float]:
    """The table's columns (ms of process CPU time, or of wall time with "ms") from one row."""
    bare, run, free = row[clock]["bare"], row[clock]["run"], row[clock]["noflow"]
    g = run.get
    parts = {
        "attribution": g("forward", 0) - bare["forward"],
        "walk": g("walk", 0),
        "flow": g("flow_hooks", 0) + g("backward", 0) - free.get("backward", 0),
        "autograd_grad": free.get("backward", 0) - bare["backward"],
        "norms": g("norms", 0),
        "freeze": g("freeze", 0),
        "swap": g("prepare", 0) + g("swap_in", 0) + g("swap_out", 0),
        "release": g("release", 0),
    }
    parts["other"] = run["total"] - bare["total"] - sum(parts.values())
    return parts


COLUMNS = (
    ("attribution", "forward attribution"),
    ("walk", "walk"),
    ("flow", "flow hooks"),
    ("autograd_grad", "autograd.grad vs backward"),
    ("norms", "norms (1 sync)"),
    ("freeze", "freeze + report"),
    ("swap", "stand-in swap"),
    ("release", "release"),
    ("other", "other"),
)


def markdown_section(stages: dict[str, Any]) -> list[str]:
    """The "Where the time goes" section of benchmarks.md (empty without stage rows)."""
    rows = stages.get("models") or {}
    if not rows:
        return []
    meta = stages["meta"]
    L = ["## Where the time goes", ""]
    threads = f"{meta['threads']} torch thread" + ("" if meta["threads"] == 1 else "s")
    L.append(
        f"Generated by `{meta['command']}` on {meta['date']} ({threads}, "
        f"{meta['repeats']} interleaved repeats per mode after one warm-up; load average beside "
        "each row, at its start / end). Per model, medians in one process: *bare* = forward + "
        "`loss.backward()`; *a click's re-run* = `ex.run(view=...)` for the widget's first "
        "view (what a click in the widget runs: the flow measured only where that view draws "
        "it, graph/measure.py); each cost is what `ex.run()` spends on top of it, from the run's "
        "stage clock (`gradviz_widgets.run.timing.stage_times`): *forward attribution* = the "
        "run's forward - the bare forward; *flow hooks* = registering them + the run's "
        "backward - the backward of a `track_flow=False` run; *autograd.grad vs backward* = "
        "that flow-free backward - the bare backward (it measures each large parameter's "
        "gradient as it arrives: trace/arrivals.py); *stand-in swap* = preparing the "
        "stand-ins + swapping them in and out (RNG fork and hooks included); *other* = "
        "what the stages do not cover. Ratios: medians of the per-repeat ratios of wall time "
        "(*CPU x*: of process CPU time). Every mode starts with the model's `.grad` cleared, "
        "as in the suite; *.grad held*: the ratio of `ex.run()` while the model holds a "
        "`.grad` per parameter (as after a training step), when the run's own gradients need "
        "memory beside them. *Page faults*: median minor page faults of one bare step / one "
        "run / one run with `.grad` held (memory mapped afresh and zero-filled on first "
        "touch; on large models a share of each step that moves between repeats with the "
        "allocator's state)."
    )
    L.append("")
    L.append(
        "| model | load | page faults | bare | ex.run() | **ratio** | CPU x | target | "
        "a click's re-run | **ratio** | CPU x | target | "
        ".grad held | hooks on every module | **ratio** | CPU x | target |"
    )
    L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, r in rows.items():
        ms, load = r["ms"], " / ".join(f"{v:.1f}" for v in r["load"])
        L.append(
            f"| {name} | {load} | {_faults_cell(r.get('faults'))} | "
            f"{_ms(ms['bare']['total'])} | {_ms(ms['run']['total'])} | "
            f"**{r['paired_run_ratio']:.2f}x** | {r['cpu_run_ratio']:.2f}x | "
            f"{_target(RUN_TARGETS.get(name), r['paired_run_ratio'], r['cpu_run_ratio'])} | "
            f"{_view_cells(r, name)} | "
            f"{_ratio_cell(r.get('paired_resident_ratio'))} | {_ms(ms['hooks']['total'])} | **{r['paired_hooks_ratio']:.2f}x** | "
            f"{r['cpu_hooks_ratio']:.2f}x | "
            f"{_target(HOOK_TARGETS.get(name), r['paired_hooks_ratio'], r['cpu_hooks_ratio'])} |"
        )
    L.append("")
    L.append(
        "What `ex.run()` spends on top of the bare step, in process CPU ms (one thread: the "
        "work itself, not the waits for a core on a shared machine):"
    )
    L.append("")
    heads = " | ".join(h for _, h in COLUMNS)
    L.append(f"| model | bare | ex.run() | {heads} |")
    L.append("|---|--:|--:|" + "--:|" * len(COLUMNS))
    for name, r in rows.items():
        parts, cpu = breakdown(r), r["cpu_ms"]
        cells = " | ".join(_ms(parts[k]) for k, _ in COLUMNS)
        L.append(f"| {name} | {_ms(cpu['bare']['total'])} | {_ms(cpu['run']['total'])} | {cells} |")
    L.append("")
    L += [
        f"- {name}: {r['description']}, {r['params'] / 1e6:.2f}M parameters"
        for name, r in rows.items()
    ]
    L.append("")
    return L


def _view_cells(r: dict[str, Any], name: str) -> str:
    """A click's re-run: its time, ratio, CPU ratio and target ("" cells in older rows)."""
    if r.get("paired_view_ratio") is None:
        return " |  |  | "
    wall, cpu = r["paired_view_ratio"], r["cpu_view_ratio"]
    return (
        f"{_ms(r['ms']['view']['total'])} | **{wall:.2f}x** | {cpu:.2f}x | "
        f"{_target(RUN_TARGETS.get(name), wall, cpu)}"
    )


def _target(limit: float | None, wall: float, cpu: float) -> str:
    """ "<= 1.10x ✓" (met in wall time), "✗ (CPU ✓)" (met in CPU time only) or "✗"."""
    if limit is None:
        return ""
    mark = "✓" if wall <= limit else ("✗ (CPU ✓)" if cpu <= limit else "✗")
    return f"≤ {limit:.2f}x {mark}"


def _ratio_cell(ratio: float | None) -> str:
    """ "1.17x" ("" in rows from before the mode was measured)."""
    return "" if ratio is None else f"{ratio:.2f}x"


def _faults_cell(faults: dict[str, float] | None) -> str:
    """ "94k / 105k / 120k": page faults of the bare step / the run / the run with `.grad`
    held ("" in rows from before them; the last left out in rows from before it)."""
    if not faults:
        return ""
    return " / ".join(_count(faults[m]) for m in ("bare", "run", "resident") if m in faults)


def _count(n: float) -> str:
    return f"{n / 1e3:.0f}k" if n >= 10_000 else f"{n:.0f}"


def _ms(v: float) -> str:
    if abs(v) >= 1000:
        return f"{v / 1e3:.2f} s"
    return f"{v:.1f} ms" if abs(v) < 100 else f"{v:.0f} ms"


def run_stages(names: list[str], repeats: int, command: str, threads: int = 1) -> dict[str, Any]:
    """The stage table's rows, under `threads` torch threads (one by default: steady on shared
    cores, and the threads the analysis quotes), the caller's count put back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _stage_rows(names, repeats, command)
    finally:
        torch.set_num_threads(before)


def _stage_rows(names: list[str], repeats: int, command: str) -> dict[str, Any]:
    rows = {}
    for name in names:
        log(f"stages: {name} x{repeats}")
        rows[name] = row = stage_row(name, repeats)
        log(
            f"  bare {row['ms']['bare']['total']:.1f} ms, run x{row['paired_run_ratio']:.2f}, "
            f"hooks x{row['paired_hooks_ratio']:.2f}, load {row['load']}"
        )
        gc.collect()
    meta = {
        "command": command,
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
    }
    return {"meta": meta, "models": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS)
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1: steady on shared cores)"
    )
    ap.add_argument("--out-dir", default=str(ROOT / "docs"))
    args = ap.parse_args(argv)
    from benchmarks.report_md import write_section

    command = "python -m benchmarks.stages " + " ".join(sys.argv[1:] if argv is None else argv)
    stages = run_stages(args.models.split(","), args.repeats, command.strip(), args.threads)
    log(f"wrote {write_section(Path(args.out_dir), 'stages', stages, markdown_section)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
