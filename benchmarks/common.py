"""What the benchmark modes run, shared by the timing process and the memory child processes."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
MODES = ("bare", "run", "hooks")


def build(name: str, size: str, device: str) -> tuple[nn.Module, torch.Tensor, str]:
    """One zoo entry (seeded, so every process builds the same weights), moved to `device`."""
    from gradviz_widgets.examples import zoo

    model, x, description = zoo(size, names=[name], seed=0)[name]
    return model.to(device), x.to(device), description


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def loss_of(output: Any) -> torch.Tensor:
    """The loss GradExplorer uses without a loss_fn: the sum of the (float) model output."""
    return output.sum()


def bare_step(model: nn.Module, x: torch.Tensor, device: str) -> Callable[[], None]:
    """The floor: a plain training-style forward + backward (grads set to None first)."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> None:
        for p in params:
            p.grad = None
        loss_of(model(x)).backward()
        sync(device)

    return step


def clear_grads(model: nn.Module) -> None:
    for p in model.parameters():
        p.grad = None


def explorer(model: nn.Module, x: torch.Tensor, hooks: bool) -> Any:
    """A GradExplorer; with `hooks`, a backward hook on every module but the root."""
    from gradviz_widgets import GradExplorer

    ex = GradExplorer(model, x)
    if hooks:
        for path, _ in model.named_modules():
            if path:
                ex.set_hook(path, "backward")
    return ex


def mode_step(mode: str, model: nn.Module, x: torch.Tensor, device: str):
    """(callable for one run of `mode`, the explorer or None)."""
    if mode == "bare":
        return bare_step(model, x, device), None
    ex = explorer(model, x, hooks=mode == "hooks")

    def step() -> None:
        ex.run()
        sync(device)

    return step, ex


def to_dot_function() -> tuple[Callable[[Any], str], str]:
    """gradviz_widgets.render.to_dot when it exists, else the local fallback below."""
    try:
        from gradviz_widgets import render

        if hasattr(render, "to_dot"):
            return render.to_dot, "gradviz_widgets.render.to_dot"
    except ImportError:
        pass
    return fallback_to_dot, "benchmarks.common.fallback_to_dot"


def fallback_to_dot(view: Any) -> str:
    """Minimal DOT (boxes with op label and norm, edges producer -> consumer) for a graph view."""

    def q(s: str) -> str:
        return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    lines = [
        "digraph g {",
        "  graph [rankdir=TB];",
        '  node [shape=box, style="rounded,filled", '
        'fillcolor="#eeeeee", fontname="Helvetica", fontsize=10];',
    ]
    for n in view.nodes:
        label = (n.label or n.op).lstrip("\n")
        if n.grad_norm is not None:
            label += f"\n|g| {n.grad_norm:.3g}"
        lines.append(f"  {q(n.id)} [label={q(label)}];")
    for e in view.edges:
        lines.append(f"  {q(e.src)} -> {q(e.dst)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def default_view(graph: Any, max_nodes: int = 120) -> tuple[Any, int | None]:
    """The widget's default view: fold depth `auto_depth(120)`."""
    depth = graph.auto_depth(max_nodes)
    return graph.view(depth), depth


# ---- memory ---------------------------------------------------------------------------------
_STATUS = Path("/proc/self/status")


def rss_kib() -> dict[str, int]:
    """VmRSS / VmHWM of this process in KiB (Linux)."""
    text = _STATUS.read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", text).group(1)) for k in ("VmRSS", "VmHWM")}


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def now() -> float:
    return time.perf_counter()
