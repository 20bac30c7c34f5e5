"""Shared fixtures: the seed dead-branch network and a snapshot helper."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example

SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.fixture
def dead_branch():
    """(net, x, y) of the seed network with a dead gate."""
    return dead_branch_example()


@pytest.fixture
def dead_explorer(dead_branch):
    net, x, y = dead_branch
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    yield ex
    ex.close()


@pytest.fixture
def snapshot():
    """Compare text with tests/snapshots/NAME; UPDATE_SNAPSHOTS=1 rewrites it."""

    def check(name: str, text: str) -> None:
        path = SNAPSHOTS / name
        if os.environ.get("UPDATE_SNAPSHOTS") == "1" or not path.exists():
            path.write_text(text, encoding="utf-8")
            if os.environ.get("UPDATE_SNAPSHOTS") != "1":
                pytest.fail(f"snapshot {name} did not exist and was written; re-run to compare")
        assert text == path.read_text(encoding="utf-8"), (
            f"{name} changed; if intended, re-run with UPDATE_SNAPSHOTS=1"
        )

    return check
