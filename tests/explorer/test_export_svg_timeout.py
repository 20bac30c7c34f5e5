"""A graph `dot` cannot lay out in time: the error says what each fold depth draws, so the
user picks a view that is smaller (a Sequential's depth 1 is its full graph)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch import nn

import gradviz_widgets.render.dot as dot
from gradviz_widgets import GradExplorer, GradExplorerError


def test_a_timed_out_export_names_the_size_of_each_view(tmp_path: Path) -> None:
    ex = GradExplorer(nn.Sequential(*[nn.Linear(4, 4) for _ in range(30)]), torch.randn(2, 4))
    ex.run()
    timeout = subprocess.TimeoutExpired("dot", 60)
    with (
        mock.patch.object(dot.shutil, "which", return_value="/usr/bin/dot"),
        mock.patch.object(dot.subprocess, "run", side_effect=timeout),
        pytest.raises(GradExplorerError) as err,
    ):
        ex.export_svg(tmp_path / "g.svg", depth=1)
    assert "did not lay this graph out" in str(err.value)
    assert "This graph's views: depth 0: 31 nodes, full: 122 nodes." in str(err.value)
    assert not (tmp_path / "g.svg").exists()
