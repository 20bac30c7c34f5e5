"""The status rules live in one place (vocabulary.py): the statuses, their orders of severity,
their words and the classifier of a norm. Every other module, and the JS (which gets them in
the data Python sends), derives from it; these checks fail on a copy.

The copies are found with `ast` (Python) and regular expressions (js/*.js), nothing imported.
"""

from __future__ import annotations

import ast
import itertools
import math
import pathlib
import re

import numpy as np
import pytest

from gradviz_widgets import vocabulary
from gradviz_widgets.vocabulary import (
    ALARMS,
    SEVERITY,
    SEVERITY_OVER_TIME,
    STATUSES,
    STYLES,
    Thresholds,
    classify,
    classify_codes,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "gradviz_widgets"
JS = ROOT / "js"
HOME = PKG / "vocabulary.py"


def _status_literals(path: pathlib.Path) -> list[str]:
    """Tuples, lists, sets and dicts in `path` that list three or more statuses by name."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        items: list[ast.expr | None] = []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in STATUSES}
        if len(named) >= 3:
            out.append(f"{'/'.join(path.parts[-2:])}:{node.lineno}")
    return out


def _threshold_tests(path: pathlib.Path) -> list[str]:
    """Comparisons against `.vanishing` / `.exploding` (a second classifier) in `path`."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and any(
            isinstance(side, ast.Attribute) and side.attr in ("vanishing", "exploding")
            for side in [node.left, *node.comparators]
        ):
            out.append(f"{'/'.join(path.parts[-2:])}:{node.lineno}")
    return out


def test_no_other_module_keeps_a_status_order_or_a_classifier() -> None:
    others = [p for p in sorted(PKG.rglob("*.py")) if p != HOME]
    copies = [hit for p in others for hit in _status_literals(p)]
    assert not copies, f"status orders / lists outside vocabulary.py (derive them): {copies}"
    tests = [hit for p in others for hit in _threshold_tests(p)]
    assert not tests, f"norms classified outside vocabulary.py (use classify_codes): {tests}"


def test_the_js_holds_no_copy_of_the_status_words_or_orders() -> None:
    """The words reach the page in its data (node info's status_text, the legend, the watch
    page's labels): no JS source spells a status's words, or lists three statuses."""
    words = {t for s in STYLES.values() for t in (s.words, s.label) if t not in STATUSES}
    names = "|".join(STATUSES)
    listing = re.compile(
        rf"""["']?\b({names})\b["']?\s*[:,][^\n]*?\b({names})\b["']?\s*[:,][^\n]*?\b({names})\b"""
    )
    for path in sorted(JS.glob("*.js")):
        source = path.read_text(encoding="utf-8")
        assert not [w for w in words if w in source], path.name
        found = [m.group(0) for m in listing.finditer(source) if len(set(m.groups())) == 3]
        assert not found, f"{path.name} lists statuses: {found}"


def test_the_checks_see_the_old_copies(tmp_path: pathlib.Path) -> None:
    old = tmp_path / "old.py"
    old.write_text(
        'KINDS = ("nonfinite", "exploding", "zero", "none", "vanishing")\n'
        'SEVERITY = {"healthy": 0, "vanishing": 1, "none": 2}\n'
        "def classify_many(norm, th):\n"
        "    return norm > th.exploding\n"
        'OK = ("healthy", "loss")\n'
    )
    assert [h.rsplit(":", 1)[1] for h in _status_literals(old)] == ["1", "2"]
    assert [h.rsplit(":", 1)[1] for h in _threshold_tests(old)] == ["4"]


def test_the_orders_cover_every_status_once() -> None:
    for order in (SEVERITY, SEVERITY_OVER_TIME):
        assert sorted(order) == sorted(STATUSES)
    assert ALARMS == ("nonfinite", "exploding", "zero", "none", "vanishing")
    # the two orders differ in one place only: where None ranks
    assert [s for s in SEVERITY if s != "none"] == [s for s in SEVERITY_OVER_TIME if s != "none"]


def test_the_watch_derives_its_orders_and_kinds() -> None:
    from gradviz_widgets.watch.anomalies import KINDS, WATCH_KINDS
    from gradviz_widgets.watch.history import SEVERITY_RANK
    from gradviz_widgets.watch.ranks import KIND

    assert KINDS == ALARMS and KIND in WATCH_KINDS and not set(WATCH_KINDS) & set(STATUSES)
    by_rank = sorted(range(len(STATUSES)), key=lambda c: -SEVERITY_RANK[c])
    assert [STATUSES[c] for c in by_rank] == list(SEVERITY_OVER_TIME)
    assert SEVERITY_RANK[len(STATUSES)] < SEVERITY_RANK.min(initial=0) + 1  # no data ranks last


VALUES = [0.0, 1e-300, 1e-9, 1e-7, 0.5, 1e4, 1e5, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("th", [Thresholds(), Thresholds(0.0, math.inf), Thresholds(1e-3, 1.0)])
def test_one_classifier_for_one_value_and_for_arrays(th: Thresholds) -> None:
    """classify and classify_codes are the same rules: every pair of values agrees (a NaN
    largest element is unknown, as None is for one value)."""
    pairs = list(itertools.product(VALUES, VALUES))
    codes = classify_codes(np.array([n for n, _ in pairs]), np.array([m for _, m in pairs]), th)
    for (norm, max_abs), code in zip(pairs, codes):
        one = classify(norm, None if math.isnan(max_abs) else max_abs, th)
        assert one == STATUSES[code], (norm, max_abs)
    assert classify(None, None, th) == "none"


def test_the_page_data_carries_the_words(tmp_path: pathlib.Path) -> None:
    """What the watch page's JS gets instead of a copy: the statuses in code order, their
    labels and colours, the ones off the norm scale."""
    import torch
    from torch import nn

    from gradviz_widgets.watch import GradWatch
    from gradviz_widgets.watch.page import page_data

    net = nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    watch = GradWatch(net, optimizer=opt, path=tmp_path)
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(4, 3)).sum().backward()
        opt.step()
    data = page_data(watch)
    watch.close()
    assert data["statuses"] == list(STATUSES) and data["plain"] == list(vocabulary.OFF_SCALE)
    assert data["labels"] == {s: STYLES[s].label for s in STATUSES}
    assert data["colors"]["vanishing"] == [STYLES["vanishing"].fill, STYLES["vanishing"].line]
