"""Which rank's flight record `anomaly.explore()` replays, in a run of two rank folders built
without a process group (as tests/watch/test_watch_ranks.py does): the all-reduce that spreads
one rank's NaN/Inf to every rank is stood in for by setting the other rank's gradients."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from gradviz_widgets.errors import GradExplorerError
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.anomalies import Anomaly

STEPS, BAD = 3, 2
#: the stand-in for the all-reduce edits the gradients between backward and step
pytestmark = pytest.mark.filterwarnings("ignore:GradWatch. the gradients changed in place")


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.square().mean()


def _tanh_net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def _record(
    path: Path,
    rank: int,
    make: Callable[[], nn.Module],
    batch: Callable[[int, torch.Tensor], None],
    spread: Callable[[nn.Module], None] | None = None,
) -> Path:
    """One process's run: `batch(step, x)` edits the step's input in place, `spread(model)`
    edits the gradients of step BAD before the optimizer (another rank's all-reduce)."""
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    with GradWatch(model, optimizer=opt, path=path, loss_fn=_loss) as watch:
        for step in range(STEPS):
            x = torch.randn(16, 8, generator=g)
            batch(step, x)
            opt.zero_grad()
            _loss(model(x)).backward()
            if spread is not None and step == BAD:
                spread(model)
            opt.step()
    return watch.rank_path


def _two_ranks(
    tmp_path: Path, make: Callable[[], nn.Module], value: float, spread: tuple[str, ...] = ()
) -> Path:
    """Rank 1's batch holds `value` at step BAD; rank 0's is finite and gets NaN gradients
    (in the parameters `spread`; none named: every one)."""

    def bad(step: int, x: torch.Tensor) -> None:
        if step == BAD:
            x[3, 5] = value

    def nan_grads(model: nn.Module) -> None:
        for name, p in model.named_parameters():
            if not spread or name in spread:
                p.grad.fill_(float("nan"))  # type: ignore[union-attr]

    run_path = tmp_path / "run-20261201-000000-0000"
    run_path.mkdir()
    _record(tmp_path / "src", 0, make, lambda s, x: None, nan_grads).rename(run_path / "rank0")
    _record(tmp_path / "src", 1, make, bad).rename(run_path / "rank1")
    shutil.rmtree(tmp_path / "src")
    return run_path


def _nonfinite(path: Path) -> Anomaly:
    found = [a for a in GradWatch.open(path).anomalies if a.kind == "nonfinite"]
    assert len(found) == 1 and found[0].step == BAD and found[0].ranks == (0, 1)
    return found[0]


def _all_nonfinite(report: object) -> bool:
    return set(report.param_status.values()) == {"nonfinite"}  # type: ignore[attr-defined]


def _said(report: object) -> list[str]:
    return [f for f in report.findings if "the replay of rank" in f]  # type: ignore[attr-defined]


def test_explore_replays_the_rank_whose_batch_holds_nan(tmp_path: Path) -> None:
    a = _nonfinite(_two_ranks(tmp_path, _tanh_net, float("nan")))
    report = a.explore(_tanh_net(), loss_fn=_loss).report
    assert _all_nonfinite(report) and report.nonfinite_origin is not None
    assert _said(report) == []


def test_explore_rank_chooses_and_says_when_it_does_not_reproduce(tmp_path: Path) -> None:
    a = _nonfinite(_two_ranks(tmp_path, _tanh_net, float("nan")))
    ex = a.explore(_tanh_net(), loss_fn=_loss, rank=0)
    report = ex.report
    assert set(report.param_status.values()) == {"healthy"} and report.nonfinite_origin is None
    (said,) = _said(report)
    assert said.startswith("the replay of rank 0's batch has no NaN/Inf")
    assert "another rank's batch" in said and said.endswith("explore(rank=1)")
    assert ex.run().findings[0] == said  # a later run (a click) says it too
    assert _all_nonfinite(a.explore(_tanh_net(), loss_fn=_loss, rank=1).report)
    with pytest.raises(GradExplorerError, match="ranks 0, 1"):
        a.explore(_tanh_net(), rank=5)
    with pytest.raises(GradExplorerError, match="rank number"):
        a.explore(_tanh_net(), rank="1")  # type: ignore[arg-type]


def test_explore_finds_the_rank_by_replay_when_the_input_is_finite(tmp_path: Path) -> None:
    # a finite input that overflows in the loss: only the replays can tell the ranks apart
    def linear() -> nn.Module:
        return nn.Linear(8, 4)

    a = _nonfinite(_two_ranks(tmp_path, linear, 1e30, spread=("weight",)))
    report = a.explore(linear(), loss_fn=_loss).report
    assert "nonfinite" in report.param_status.values() and _said(report) == []


def test_other_kinds_say_the_replay_is_one_ranks_gradient(tmp_path: Path) -> None:
    """An exploding averaged gradient that rank 1's batch made: rank 0's replay is healthy."""

    def scaled(step: int, x: torch.Tensor) -> None:
        if step == BAD:
            x.mul_(1e7)

    def linear() -> nn.Module:
        return nn.Linear(8, 4)

    def spread(model: nn.Module) -> None:
        for p in model.parameters():
            p.grad.mul_(1e7)  # type: ignore[union-attr]

    run_path = tmp_path / "run-20261201-000000-0000"
    run_path.mkdir()
    _record(tmp_path / "src", 0, linear, lambda s, x: None, spread).rename(run_path / "rank0")
    _record(tmp_path / "src", 1, linear, scaled).rename(run_path / "rank1")
    (a,) = [a for a in GradWatch.open(run_path).anomalies if a.kind == "exploding"]
    assert a.ranks == (0, 1) and a.params == ["weight", "bias"]
    (said,) = _said(a.explore(linear(), loss_fn=_loss).report)
    assert "rank 0's batch shows no exploding gradient in weight, bias" in said
    assert "averaged gradient" in said and said.endswith("explore(rank=1)")
    report = a.explore(linear(), loss_fn=_loss, rank=1).report
    assert report.param_status["weight"] == "exploding" and _said(report) == []


def test_a_record_from_disk_says_it_holds_no_loss_fn(tmp_path: Path) -> None:
    a = _nonfinite(_two_ranks(tmp_path, _tanh_net, float("nan")))
    with pytest.warns(UserWarning, match="a record read from disk does not hold the run's loss_fn"):
        a.explore(_tanh_net())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        a.explore(_tanh_net(), loss_fn=_loss)
    assert not [w for w in seen if "loss_fn" in str(w.message)]


def test_a_live_watch_replays_its_own_rank_only(tmp_path: Path) -> None:
    model = _tanh_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with GradWatch(model, optimizer=opt, path=tmp_path, loss_fn=_loss) as watch:
        x = torch.randn(16, 8)
        x[0, 0] = float("nan")
        _loss(model(x)).backward()
        opt.step()
        (a,) = [a for a in watch.anomalies if a.kind == "nonfinite"]
        assert a.flight_record is not None and a.flight_record.rank == 0
        assert _all_nonfinite(a.explore(rank=0).report)
        with pytest.raises(GradExplorerError, match=r"GradWatch.open\(watch.run_path\)"):
            a.explore(rank=1)
