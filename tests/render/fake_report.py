"""A GradReport built from names and norms, for the chart and compare-view tests."""

from __future__ import annotations

import math

from gradviz_widgets.report.grad_report import GradReport, ParamRecord
from gradviz_widgets.vocabulary import Thresholds


def report(norms: dict[str, float | None], **kw) -> GradReport:
    def status(n: float | None) -> str:
        if n is None:
            return "none"
        if not math.isfinite(n):
            return "nonfinite"
        return "zero" if n == 0.0 else "healthy"

    params = tuple(
        ParamRecord(
            name=k,
            module=k.rpartition(".")[0],
            shape=(2,),
            dtype="float32",
            requires_grad=True,
            norm=v,
            max_abs=v,
            status=status(v),
            none_reason="unused" if v is None else None,
        )
        for k, v in norms.items()
    )
    return GradReport(
        loss=1.0,
        loss_description="loss",
        params=params,
        module_norms={},
        thresholds=Thresholds(),
        device="cpu",
        duration_s=0.01,
        **kw,
    )
