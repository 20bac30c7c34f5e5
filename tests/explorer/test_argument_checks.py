"""Arguments checked at the door, with the argument named (issue 9 item 7)."""

from __future__ import annotations

import math

import pytest
import torch
from small_models import CE, data, mlp

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.vocabulary import Thresholds


@pytest.mark.parametrize("thresholds", [1e-6, {"vanishing": 1e-6}, (1e-7, 1e4), "strict"])
def test_thresholds_of_the_wrong_type(thresholds: object) -> None:
    model, (x, y) = mlp(), data()
    with pytest.raises(GradExplorerError, match="thresholds must be a gradviz_widgets.Thresholds"):
        GradExplorer(model, x, loss_fn=CE, target=y, thresholds=thresholds)


def test_thresholds_set_later_are_checked_at_run() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y, thresholds=Thresholds(vanishing=1e-6))
    ex.thresholds = 1e-3  # type: ignore[assignment]
    with pytest.raises(GradExplorerError, match="thresholds"):
        ex.run()


@pytest.mark.parametrize("seed", [1.5, "0", True, 2**70, -(2**64), torch.tensor(3)])
def test_bad_seed(seed: object) -> None:
    model, (x, y) = mlp(), data()
    with pytest.raises(GradExplorerError, match="seed must"):
        GradExplorer(model, x, loss_fn=CE, target=y, seed=seed)


def test_good_seeds() -> None:
    import numpy as np

    model, (x, y) = mlp(), data()
    for seed in (None, 0, 2**64 - 1, np.int64(5)):
        GradExplorer(model, x, loss_fn=CE, target=y, seed=seed).run()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scale": math.nan}, "scale must be a number, got NaN"),
        ({"scale": -1.0}, "scale must be a finite factor >= 0"),
        ({"scale": math.inf}, "scale must be a finite factor >= 0"),
        ({"scale": "2"}, "scale must be a number"),
        ({"clip_norm": math.nan}, "clip_norm must be a number, got NaN"),
        ({"clip_value": math.nan}, "clip_value must be a number, got NaN"),
        ({"clip_value": -1.0}, "clip_value needs a positive value"),
    ],
)
def test_bad_modifier_values(kwargs: dict, message: str) -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    with pytest.raises(GradExplorerError, match=message):
        ex.set_modifier("fc2", **kwargs)
    assert ex.modifiers == {}


def test_zero_scale_is_allowed() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_modifier("fc2", scale=0.0)
    assert ex.run().param_status["fc1.weight"] == "zero"


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"track_flow": "yes"}, "track_flow"),
        ({"keep_tensors": 1}, "keep_tensors"),
        ({"history": 0}, "history"),
        ({"loss_fn": "mse"}, "loss_fn"),
    ],
)
def test_other_arguments(kwargs: dict, name: str) -> None:
    model, (x, _) = mlp(), data()
    with pytest.raises(GradExplorerError, match=name):
        GradExplorer(model, x, **kwargs)
