"""The norms table as CSV / JSON text (files are written by the explorer and the widget), and
`load_json`: a saved JSON back to a GradReport and GradGraph, to re-render without torch."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import Any

from ..graph.flows import PartialFlow
from ..graph.grad_graph import GradGraph
from ..graph.nodes import GradEdge, GradNode, ModuleScope
from ..vocabulary import Thresholds
from .grad_report import GradReport, ParamRecord

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
        "notes": list(report.notes),
        "nonfinite_origin": report.nonfinite_origin,
        "params": report.rows(),
        "module_norms": dict(report.module_norms),
    }
    doc["input_norms"] = dict(report.input_norms)
    if graph is not None:
        doc["graph"] = {
            "nodes": [_node_doc(n) for n in graph.nodes],
            "edges": [
                {
                    "src": e.src,
                    "dst": e.dst,
                    "grad_norm": e.grad_norm,
                    "status": e.status,
                    "grad_max": e.grad_max,
                    "approx": e.approx,
                    "measured": e.measured,
                }
                for e in graph.edges
            ],
            "modules": {p: dataclasses.asdict(m) for p, m in graph.modules.items()},
            "partials": [dataclasses.asdict(p) for p in graph.partials],
        }
    return json.dumps(_clean(doc), indent=1)


def _node_doc(n: GradNode) -> dict[str, Any]:
    return {
        "id": n.id,
        "op": n.op,
        "kind": n.kind,
        "module": n.module,
        "grad_norm": n.grad_norm,
        "status": n.status,
        "label": n.label,
        "scope": [list(c) for c in n.scope],
        "shape": None if n.shape is None else list(n.shape),
        "grad_max": n.grad_max,
        "order": n.order,
        "members": list(n.members),
        "measured": n.measured,
        "forward_note": n.forward_note,
    }


def load_json(text: str) -> tuple[GradReport, GradGraph | None]:
    """The report (and the graph, when it was saved with one) of a `report_json` text: plain
    data, no torch, ready for render.to_dot and chart.figure_dict.

    Example:
        >>> report, graph = load_json(report_json(report, graph))  # doctest: +SKIP
    """
    doc = _restore(json.loads(text))
    params = tuple(ParamRecord(**{**p, "shape": tuple(p["shape"])}) for p in doc.get("params", []))
    report = GradReport(
        loss=doc["loss"],
        loss_description=doc["loss_description"],
        params=params,
        module_norms=doc.get("module_norms", {}),
        thresholds=Thresholds(**doc["thresholds"]),
        device=doc["device"],
        duration_s=doc["duration_s"],
        nonfinite_origin=doc.get("nonfinite_origin"),
        findings=tuple(doc.get("findings", ())),
        input_norms=doc.get("input_norms", {}),
        notes=tuple(doc.get("notes", ())),
    )
    g = doc.get("graph")
    if g is None:
        return report, None
    nodes = tuple(_node(n) for n in g["nodes"])
    edges = tuple(GradEdge(**e) for e in g["edges"])
    modules = {
        p: ModuleScope(**{**m, "children": tuple(m["children"]), "params": tuple(m["params"])})
        for p, m in g.get("modules", {}).items()
    }
    partials = tuple(PartialFlow(**{**p, "dsts": tuple(p["dsts"])}) for p in g.get("partials", ()))
    return report, GradGraph(nodes, edges, modules, partials=partials)


def _node(n: dict[str, Any]) -> GradNode:
    return GradNode(
        **{
            **n,
            "label": n.get("label", n["id"]),
            "scope": tuple((p, c) for p, c in n.get("scope", ())),
            "shape": None if n.get("shape") is None else tuple(n["shape"]),
            "members": tuple(n.get("members", ())),
        }
    )


_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_NUMBERS = {"norm", "max_abs", "norm_before", "grad_norm", "grad_max", "loss"}


def _restore(value: Any, key: str | None = None) -> Any:
    """Undo `_clean`: "nan" / "inf" / "-inf" back to floats where a number belongs."""
    if isinstance(value, str) and value in _NONFINITE and (key in _NUMBERS or key is None):
        return _NONFINITE[value]
    if isinstance(value, dict):
        numeric = key in ("module_norms", "input_norms")
        return {k: _restore(v, None if numeric else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, key) for v in value]
    return value


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
