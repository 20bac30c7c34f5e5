"""The norms table as CSV / JSON text (files are written by the explorer and the widget)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from .graph import GradGraph
from .report import GradReport

CSV_COLUMNS = (
    "name",
    "module",
    "shape",
    "dtype",
    "requires_grad",
    "norm",
    "max_abs",
    "status",
    "zero_fraction",
    "none_reason",
    "zero_origin",
    "modified_by",
    "norm_before",
)


def report_csv(report: GradReport) -> str:
    """One row per parameter; None is an empty cell, NaN/Inf are written as nan/inf.

    Example:
        >>> report_csv(report).splitlines()[0]      # doctest: +SKIP
        'name,module,shape,dtype,requires_grad,norm,max_abs,status,...'
    """
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in report.rows():
        row = {k: row[k] for k in CSV_COLUMNS}
        row["shape"] = "x".join(str(d) for d in row["shape"])
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def report_json(report: GradReport, graph: GradGraph | None = None) -> str:
    """The report (and optionally the graph's nodes and edges) as JSON; NaN/Inf become strings."""
    doc: dict[str, Any] = {
        "loss": report.loss,
        "loss_description": report.loss_description,
        "device": report.device,
        "duration_s": report.duration_s,
        "thresholds": {
            "vanishing": report.thresholds.vanishing,
            "exploding": report.thresholds.exploding,
        },
        "findings": list(report.findings),
        "nonfinite_origin": report.nonfinite_origin,
        "params": report.rows(),
        "module_norms": dict(report.module_norms),
    }
    if graph is not None:
        doc["graph"] = {
            "nodes": [
                {
                    "id": n.id,
                    "op": n.op,
                    "kind": n.kind,
                    "module": n.module,
                    "grad_norm": n.grad_norm,
                    "status": n.status,
                }
                for n in graph.nodes
            ],
            "edges": [
                {"src": e.src, "dst": e.dst, "grad_norm": e.grad_norm, "status": e.status}
                for e in graph.edges
            ],
        }
    return json.dumps(_clean(doc), indent=1)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
