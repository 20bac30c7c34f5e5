"""Gradients under DistributedDataParallel: which parameters get a gradient on which rank, and why.

DDP's most common failure, "Expected to have finished reduction in the prior iteration before
starting a new one", means some parameter got no gradient on some rank. Each rank explores its
own model locally (no collective: the run uses the user's inner module, `ddp.module`, so DDP's
reducer, its forward hooks and buffer broadcast are never involved), then `gather_ranks` puts the
per-rank statuses side by side with ONE `all_gather` of a small float64 tensor and names every
parameter whose gradient exists on some ranks only, with the ranks and the reason.

    inner, kind = unwrap(ddp_model)             # (ddp_model.module, "DistributedDataParallel")
    report = GradExplorer(inner, x, loss_fn=..., target=y).run()   # local, no collective
    ranks = gather_ranks(report, ddp=ddp_model)  # every rank calls it (two all_gathers)
    ranks.table[1]["b.weight"].status, ranks.findings

FSDP2 (fully_shard) models: see distributed/fsdp.py.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch import nn

from ..errors import GradExplorerError
from ..report.grad_report import GradReport
from ..vocabulary import STATUSES
from .findings import RankParam, rank_findings

#: short none reasons, in the order of their codes (0 means "has a gradient")
REASONS = ("frozen", "never called", "no_grad", "detached", "checkpoint without grad", "other")
_WRAPPERS = ("DistributedDataParallel", "DataParallel")
_SHARDED = ("FSDPModule", "FullyShardedDataParallel")


@dataclasses.dataclass(frozen=True)
class RanksSummary:
    """What `gather_ranks` returns on every rank: `table[rank][param]` and findings sentences."""

    table: Mapping[int, Mapping[str, RankParam]]
    findings: tuple[str, ...]

    def rows(self) -> list[dict]:
        """One plain dict per (rank, parameter), for tables and JSON."""
        return [
            {"rank": r, "param": n, **p._asdict()}
            for r, params in self.table.items()
            for n, p in params.items()
        ]


def unwrap(model: nn.Module) -> tuple[nn.Module, str | None]:
    """The user's module to explore and the wrapper's kind (None when not wrapped).

    DistributedDataParallel and DataParallel are peeled off (`.module`), as is torch.compile
    (`._orig_mod`), in any nesting. FSDP2 (`fully_shard`) changes the module's class instead of
    wrapping it, and FSDP1 flattens parameters: both come back as they are, with their kind.

    Example:
        >>> inner, kind = unwrap(nn.DataParallel(nn.Linear(2, 1)))
        >>> type(inner).__name__, kind
        ('Linear', 'DataParallel')
    """
    kinds: list[str] = []
    while True:
        mro = [c.__name__ for c in type(model).__mro__]
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module) and type(model).__module__.startswith("torch._dynamo"):
            kinds.append("torch.compile")
            model = inner
        elif mro[0] in _WRAPPERS and isinstance(
            wrapped := getattr(model, "module", None), nn.Module
        ):
            kinds.append(mro[0])
            model = wrapped
        else:
            sharded = next((k for k in _SHARDED if k in mro), None)
            if sharded:
                kinds.append("fully_shard" if sharded == "FSDPModule" else sharded)
            return model, " > ".join(kinds) or None


def reason_code(none_reason: str | None) -> int:
    """Index into REASONS + 1 for diagnose.none_reason's sentence (0: no reason, a gradient).

    Example:
        >>> REASONS[reason_code("not reached from the loss: module 'b' was never called") - 1]
        'never called'
    """
    if not none_reason:
        return 0
    text = none_reason.lower()
    for code, key in enumerate(
        ("frozen", "never called", "no_grad", "detached", "torch.utils.checkpoint"), start=1
    ):
        if key in text:
            return code
    return len(REASONS)


def encode(report: GradReport) -> torch.Tensor:
    """(1 + n, 3) float64: a header (crc32 of the names, n, 0), then per parameter
    (status code, reason code, norm; 0.0 where there is no gradient)."""
    names = [p.name for p in report.params]
    rows = [[float(zlib.crc32("\n".join(names).encode())), float(len(names)), 0.0]]
    rows += [
        [
            float(STATUSES.index(p.status)),
            float(reason_code(p.none_reason)),
            0.0 if p.norm is None else p.norm,
        ]
        for p in report.params
    ]
    return torch.tensor(rows, dtype=torch.float64)


def decode(rows: torch.Tensor, names: list[str]) -> dict[str, RankParam]:
    """The inverse of `encode` for one rank's rows (header included)."""
    out = {}
    for name, (status, reason, norm) in zip(names, rows[1:].tolist()):
        status = STATUSES[int(status)]
        out[name] = RankParam(
            status, REASONS[int(reason) - 1] if reason else None, None if status == "none" else norm
        )
    return out


def gather_ranks(
    report: GradReport, group: dist.ProcessGroup | None = None, ddp: nn.Module | None = None
) -> RanksSummary:
    """Every rank's parameter statuses, with two small collectives: an all_gather of each rank's
    parameter count and names' checksum (the same size on every rank), then of
    `encode(report)`, once they agree (tables of other sizes made gloo abort the process).

    Every rank of `group` must call it with its own local report (of the same model). `ddp`,
    the DistributedDataParallel model, lets the findings say what its settings
    (find_unused_parameters, static_graph) will do; without it they cover both settings.
    """
    local = encode(report)
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    local = local.to(device)
    world = dist.get_world_size(group)
    ranks = [dist.get_global_rank(group, i) if group is not None else i for i in range(world)]
    head = local[0].clone()  # (crc32 of the names, their count, 0): one size on every rank
    heads = _gathered(head, world, group)
    different = [r for r, t in zip(ranks, heads) if not torch.equal(t, head)]
    if different:  # every rank sees the same heads: every rank raises
        raise GradExplorerError(
            f"ranks {different} explored a model with other parameters (names or count) than "
            f"rank {dist.get_rank()}: explore the same model on every rank (unwrap(model)[0])"
        )
    gathered = _gathered(local, world, group)
    names = [p.name for p in report.params]
    table = {r: decode(t.cpu(), names) for r, t in zip(ranks, gathered)}
    return RanksSummary(table, rank_findings(table, ddp_settings(ddp)))


def _gathered(t: torch.Tensor, world: int, group: dist.ProcessGroup | None) -> list[torch.Tensor]:
    """`t` of every rank (one all_gather); a rank that never came: GradExplorerError."""
    out = [torch.empty_like(t) for _ in range(world)]
    try:
        dist.all_gather(out, t, group=group)
    except RuntimeError as e:  # a rank that never came: gloo / NCCL time out with their words
        raise GradExplorerError(
            f"rank {dist.get_rank()} waited for the other ranks to compare this run's "
            "gradients (an all_gather) and they did not come: run it on every rank "
            "(ex.run() of a DDP model, or gather_ranks), or ex.run(ranks=False) for this rank "
            f"alone ({type(e).__name__}: {str(e)[:200]})"
        ) from e
    return out


def ddp_settings(ddp: nn.Module | None) -> dict[str, bool] | None:
    """find_unused_parameters and static_graph of a DDP model (None for anything else)."""
    if ddp is None or type(ddp).__name__ != "DistributedDataParallel":
        return None
    return {
        "find_unused_parameters": bool(getattr(ddp, "find_unused_parameters", False)),
        "static_graph": bool(getattr(ddp, "static_graph", False)),
    }


__all__ = ["REASONS", "RanksSummary", "gather_ranks", "reason_code", "unwrap"]


def gathers_ranks(model: nn.Module, ranks: bool | None) -> bool:
    """Whether a run gathers every rank's statuses: as asked, else for a DDP model in an
    initialised process group of more than one rank (every rank must then call run())."""
    if ranks is not None:
        return ranks
    return (
        unwrap(model)[1] == "DistributedDataParallel"
        and dist.is_available()
        and dist.is_initialized()
        and dist.get_world_size() > 1
    )


def with_ranks(report: GradReport, model: nn.Module) -> GradReport:
    """`report` with `ranks` (rank -> parameter -> RankParam) and the cross-rank findings first."""
    summary = gather_ranks(report, ddp=model)
    return dataclasses.replace(
        report, ranks=summary.table, findings=(*summary.findings, *report.findings)
    )
