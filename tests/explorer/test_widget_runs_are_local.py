"""The widget's runs never gather ranks: it is shown on one rank, where a collective would wait
for the other ranks for good (a DDP model's click used to all_gather and hang rank 0)."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.explorer import session


def test_widget_runs_ask_for_no_collective_and_ex_run_keeps_its_default(monkeypatch) -> None:
    asked: list[bool | None] = []

    def gathers(model: nn.Module, ranks: bool | None) -> bool:
        asked.append(ranks)
        return False

    monkeypatch.setattr(session, "gathers_ranks", gathers)
    torch.manual_seed(0)
    ex = GradExplorer(nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1)), torch.randn(2, 3))
    w = ex.show()  # its first run
    w.rerun()  # the Run button
    w.click_node(next(n.id for n in w.view.nodes if n.module == "0"))  # a click's re-run
    w.set_device("cpu")
    assert asked == [False, False, False, False]
    ex.run()  # a cell every rank runs: as the explorer was made
    ex.run(ranks=True)
    assert asked[-2:] == [None, True]
