"""Gradients across ranks: DDP (`ddp`: which parameters get a gradient on which rank, and why),
the sentences about it (`findings`), FSDP2 shard norms (`fsdp`).

`from gradviz_widgets.distributed import gather_ranks, unwrap` (the documented path) keeps
working; code inside the package imports each name from the module that defines it.
"""

from .ddp import REASONS, RanksSummary, gather_ranks, reason_code, unwrap
from .findings import DDP_ERROR, RankParam, rank_findings

__all__ = [
    "DDP_ERROR",
    "REASONS",
    "RankParam",
    "RanksSummary",
    "gather_ranks",
    "rank_findings",
    "reason_code",
    "unwrap",
]
