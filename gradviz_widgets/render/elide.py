"""Dotted names shortened word by word for a chart's labels: whole parts are left out (longest
first), never the first part, a block's index or the last part (the one before it only when
nothing else is left to leave out), and never so that the label could name
another parameter. Cutting the middle of "encoder.block.0.layer.0.SelfAttention.q.weight"
left out the block's index, and every block's label then read alike but for a "(2)".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

GAP = "…"


def elide_parts(names: list[str], limit: int) -> list[str]:
    """Each of the distinct `names` in at most `limit` characters where leaving out whole
    parts gets it there, each label naming one name only; longer ones as they are.

    Example:
        >>> names = [f"{s}.block.{i}.layer.0.SelfAttention.q.weight"
        ...          for s in ("encoder", "decoder") for i in (0, 1)]
        >>> elide_parts(names, 31)[:2]
        ['encoder.….0.layer.0.….q.weight', 'encoder.….1.layer.0.….q.weight']
    """
    split = [n.split(".") for n in names]
    sizes = Counter(len(p) for p in split)
    views: dict[tuple[int, frozenset[int]], Counter[tuple[str, ...]]] = {}

    def unique(parts: list[str], left_out: frozenset[int]) -> bool:
        key = (len(parts), left_out)
        if key not in views:  # each name of this length seen without those parts
            views[key] = Counter(_kept(q, left_out) for q in split if len(q) == len(parts))
        return sizes[len(parts)] == 1 or views[key][_kept(parts, left_out)] == 1

    return [_shortened(parts, limit, unique) for parts in split]


def _shortened(
    parts: list[str], limit: int, unique: Callable[[list[str], frozenset[int]], bool]
) -> str:
    """`parts` joined, leaving out the longest words first (the last two parts last, the
    last one never) while the label is too long and still names this name alone."""
    left_out: frozenset[int] = frozenset()
    # the first part (the top of the name: which half of the model) stays, and so does an index
    # or a word no longer than the ellipsis that stands for it
    words = [i for i in range(1, len(parts) - 2) if not parts[i].isdigit() and len(parts[i]) > 2]
    # the module's own name before the parameter's ("layer_norm.weight") goes last
    own = [len(parts) - 2] if len(parts) > 1 and not parts[-2].isdigit() else []
    order = sorted(words, key=lambda i: -len(parts[i])) + own
    for i in order:
        if len(_joined(parts, left_out)) <= limit:
            break
        if unique(parts, left_out | {i}):
            left_out |= {i}
    return _joined(parts, left_out)


def _kept(parts: list[str], left_out: frozenset[int]) -> tuple[str, ...]:
    return tuple(p for i, p in enumerate(parts) if i not in left_out)


def _joined(parts: list[str], left_out: frozenset[int]) -> str:
    """The parts joined by dots, each run of left-out parts one ellipsis."""
    out: list[str] = []
    for i, p in enumerate(parts):
        if i not in left_out:
            out.append(p)
        elif not out or out[-1] != GAP:
            out.append(GAP)
    return ".".join(out)


def elide_middle(text: str, limit: int) -> str:
    """`text` shortened to `limit` characters by an ellipsis in the middle: both ends of a
    long dotted name stay readable (the hover shows it whole).

    Example:
        >>> elide_middle("transformer.h.11.attn.c_attn.weight", 24)
        'transformer…_attn.weight'
    """
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return text[:head] + "…" + text[len(text) - tail :]
