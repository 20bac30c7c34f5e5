"""Sentences about gradients across ranks: which parameters get a gradient on some ranks only
(with the ranks and the reason), statuses that differ, and what the DDP settings will do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class RankParam(NamedTuple):
    """One parameter on one rank: status, short none reason (None when it has a gradient), norm."""

    status: str
    reason: str | None
    norm: float | None


#: DDP's message when a parameter got no gradient on some rank (torch's wording)
DDP_ERROR = "Expected to have finished reduction in the prior iteration before starting a new one"


def rank_findings(
    table: Mapping[int, Mapping[str, RankParam]], settings: dict[str, bool] | None = None
) -> tuple[str, ...]:
    """Sentences naming parameters whose gradient exists on some ranks only (or on none), and
    parameters whose status differs across ranks.

    Example:
        >>> from gradviz_widgets.distributed.findings import RankParam
        >>> t = {0: {"b.weight": RankParam("none", "never called", None)},
        ...      1: {"b.weight": RankParam("healthy", None, 0.5)}}
        >>> rank_findings(t, {"find_unused_parameters": True, "static_graph": False})[0][:46]
        'b.weight gets no gradient on rank 0 (never cal'
    """
    ranks = sorted(table)
    names = list(table[ranks[0]]) if ranks else []
    groups: dict[tuple, list[str]] = {}
    other: list[str] = []
    for name in names:
        per = {r: table[r][name] for r in ranks}
        if any(p.reason == "frozen" for p in per.values()):
            continue  # DDP does not reduce parameters that do not require grad
        without = tuple(r for r in ranks if per[r].status == "none")
        if without:
            why = tuple(sorted({per[r].reason or "other" for r in without}))
            groups.setdefault((without, why), []).append(name)
        elif len({p.status for p in per.values()}) > 1:
            other.append(
                f"{name} is "
                + ", ".join(
                    f"{s} on {_ranks([r for r in ranks if per[r].status == s])}"
                    for s in sorted({p.status for p in per.values()})
                )
            )
    out = [
        _missing_sentence(names_, without, why, ranks) for (without, why), names_ in groups.items()
    ]
    if groups:
        out.append(
            _ddp_consequence(settings, all_ranks=all(len(w) == len(ranks) for w, _ in groups))
        )
    if other:
        out.append(
            "statuses differ across ranks: "
            + "; ".join(other[:4])
            + ("…" if len(other) > 4 else "")
        )
    return tuple(out)


def _missing_sentence(
    names: list[str], without: tuple[int, ...], why: tuple[str, ...], ranks: list[int]
) -> str:
    shown = ", ".join(names[:4]) + ("…" if len(names) > 4 else "")
    verb = "gets" if len(names) == 1 else "get"
    having = [r for r in ranks if r not in without]
    where = f"on {_ranks(list(without))}" if having else "on any rank"
    tail = f", a gradient on {_ranks(having)}" if having else ""
    hint = {
        "never called": "a data-dependent branch or an unused module",
        "detached": "its output was detached or did not feed the loss",
        "no_grad": "it ran under torch.no_grad()",
    }
    reasons = "; ".join(f"{w}: {hint[w]}" if w in hint else w for w in why)
    return f"{shown} {verb} no gradient {where} ({reasons}){tail}"


def _ddp_consequence(settings: dict[str, bool] | None, all_ranks: bool) -> str:
    raises = (
        f'raises "{DDP_ERROR}" at the next iteration (or hangs when a rank launches a '
        "reduction the others never start)"
    )
    fix = (
        "pass find_unused_parameters=True (one graph traversal per iteration; the "
        "average then counts 0 from ranks that did not use the parameter), or make every "
        "parameter feed the loss on every rank"
    )
    if settings is None:
        return f"under DDP(find_unused_parameters=False) training {raises}; {fix}"
    if settings["static_graph"]:
        return (
            "DDP(static_graph=True) assumes the same parameters are used in every "
            f"iteration on every rank, which is not the case here; {fix}"
        )
    if settings["find_unused_parameters"]:
        return "this DDP model has find_unused_parameters=True: it handles this, " + (
            "but these parameters never change (no rank gives them a gradient)"
            if all_ranks
            else "averaging in 0 from ranks that did not use them"
        )
    return f"this DDP model has find_unused_parameters=False: it {raises}; {fix}"


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
