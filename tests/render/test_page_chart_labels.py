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


def test_value_labels_keep_a_halo_over_the_threshold_lines() -> None:
    """The lines are drawn before the bars; each value label ("None", a norm near a
    threshold) paints a white outline under its glyphs, so a line through it stays behind."""
    rows = [{"name": "frozen.weight", "norm": None, "status": "none", "reason": "frozen"}]
    rows += [{"name": "w", "norm": 9e3, "status": "healthy"}]
    svg = chart_svg(rows, Thresholds())
    assert svg.index("stroke-dasharray") < svg.index('class="bar"')
    values = re.findall(r'<text x="[^"]*" y="[^"]*" font-size="10"([^>]*)>([^<]*)</text>', svg)
    assert [v for _, v in values] == ["no gradient (None)", "9000"]
    assert all('paint-order="stroke"' in a and 'stroke="#fff"' in a for a, _ in values)
