"""rank_findings: the sentences about gradients across ranks (pure: no process group)."""

from __future__ import annotations

from gradviz_widgets.distributed.findings import RankParam, rank_findings


def test_rank_findings_without_ddp_settings() -> None:
    table = {
        0: {"w": RankParam("none", "no_grad", None), "f": RankParam("none", "frozen", None)},
        1: {"w": RankParam("none", "no_grad", None), "f": RankParam("none", "frozen", None)},
    }
    found = rank_findings(table)
    assert found[0].startswith("w gets no gradient on any rank (no_grad")
    assert "find_unused_parameters=False" in found[1] and len(found) == 2  # frozen: no finding


def test_rank_findings_statuses_that_differ() -> None:
    table = {
        0: {"w": RankParam("healthy", None, 1.0)},
        1: {"w": RankParam("nonfinite", None, float("nan"))},
    }
    assert rank_findings(table) == (
        "statuses differ across ranks: w is healthy on rank 0, nonfinite on rank 1",
    )
