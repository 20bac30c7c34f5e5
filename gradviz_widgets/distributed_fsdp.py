"""The documented path of the FSDP2 shard norms; they live in `gradviz_widgets.distributed.fsdp`."""

from .distributed.fsdp import (
    ShardedParamStat,
    fsdp_gradients,
    fsdp_param_norms,
    fsdp_param_stats,
    total_norm,
)

__all__ = [
    "ShardedParamStat",
    "fsdp_gradients",
    "fsdp_param_norms",
    "fsdp_param_stats",
    "total_norm",
]
