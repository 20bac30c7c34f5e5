"""The offline page's chart labels fit their column: a 300-character name ran off the panel's
left edge; long dotted names lose whole words, never a block's index."""

from __future__ import annotations

import html
import re

from gradviz_widgets.render.page_chart import LABEL_CHARS, chart_svg
from gradviz_widgets.vocabulary import Thresholds


def _labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end" font-size="11">([^<]*)</text>', svg)


def test_labels_fit_and_keep_block_indices() -> None:
    names = [f"encoder.block.{b}.layer.0.SelfAttention.q.weight" for b in range(3)]
    names += ["a" * 300 + ".weight", '<script>alert("x")</script>.bias']
    rows = [{"name": n, "norm": 0.5, "status": "healthy"} for n in names]
    labels = _labels(chart_svg(rows, Thresholds()))
    assert len(labels) == len(names)
    assert all(len(html.unescape(t)) <= LABEL_CHARS for t in labels)
    assert [f".{b}." in t for b, t in enumerate(labels[:3])] == [True] * 3
    assert "<script>" not in chart_svg(rows, Thresholds())  # escaped, as every name
