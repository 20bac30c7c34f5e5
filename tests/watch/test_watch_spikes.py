"""Spikes on real training: a tiny GPT-2 (transformers config) trained on the CPU with AdamW,
a learning-rate jump or a layer's weights scaled at a known step; the watch must find the
spike at that step, name the planted layer first, keep the step's flight record, and read the
same back from disk."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from small_models import tiny_gpt2_config
from torch import nn

from gradviz_widgets import GradWatch
from gradviz_widgets.errors import GradExplorerError
from gradviz_widgets.watch.baselines import Baselines, SpikeRule
from gradviz_widgets.watch.spikes import SPIKE
from gradviz_widgets.watch.writer import Writer

hf = pytest.importorskip("transformers")

PLANT = 32  # the planted step (the baselines need 20 steps first)
STEPS = 44


def _gpt2(n_layer: int = 4) -> Any:
    torch.manual_seed(0)
    config = tiny_gpt2_config(
        n_layer=n_layer,
        vocab_size=101,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return hf.GPT2LMHeadModel(config)


def _batches(n: int) -> list[torch.Tensor]:
    """Arithmetic sequences from random starts: learnable, so the loss settles."""
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randint(0, 101, (8, 1), generator=g) + 3 * torch.arange(16)) % 101 for _ in range(n)
    ]


def _train(plant: str, path: Path, **options: Any) -> tuple[GradWatch, Any, list[float]]:
    torch.set_num_threads(1)
    model = _gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    watch = GradWatch(model, optimizer=opt, path=path, **options)
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step, x in enumerate(_batches(STEPS)):
            if plant == "weights" and step == PLANT:
                with torch.no_grad():
                    model.transformer.h[1].mlp.c_fc.weight.mul_(30.0)
            if plant == "lr":
                for group in opt.param_groups:
                    group["lr"] = 0.3 if step == PLANT else 3e-3
            out = model(input_ids=x, labels=x)
            opt.zero_grad()
            out.loss.backward()
            watch.log_loss(out.loss)
            opt.step()
            losses.append(float(out.loss))
    return watch, model, losses


@pytest.fixture(scope="module")
def planted_layer(tmp_path_factory: pytest.TempPathFactory) -> tuple[GradWatch, Any]:
    watch, model, _ = _train("weights", tmp_path_factory.mktemp("weights"))
    watch.spikes  # noqa: B018 - wait for the writer
    return watch, model


def test_planted_layer_is_found_at_its_step_and_named_first(planted_layer: Any) -> None:
    watch, _ = planted_layer
    spikes = watch.spikes
    assert [s.step for s in spikes] == [PLANT], spikes
    spike = spikes[0]
    assert spike.modules[0].startswith("transformer.h.1."), spike.modules[:3]
    assert spike.params[0].startswith("transformer.h.1."), spike.params[:3]
    assert "transformer.h.1." in spike.sentence and f"step {PLANT}" in spike.sentence
    assert "lower layers" in spike.sentence  # layer 1 of 4 moved, the upper half far less
    rows = spike.frame()
    assert rows.name.iloc[0] in (spike.params[0], spike.modules[0])
    assert rows.lead.iloc[0] == rows.lead.max() == 0  # the first to leave, at the spike; others lag
    kinds = [(a.step, a.kind) for a in watch.anomalies if a.kind == SPIKE]
    assert kinds == [(PLANT, SPIKE)]


def test_spike_explore_opens_its_first_step_and_compare_a_calm_one(planted_layer: Any) -> None:
    watch, _ = planted_layer
    spike = watch.spikes[0]
    ex = spike.explore(loss_fn=lambda out: out.loss)
    want = watch.history(start=PLANT, stop=PLANT + 1).set_index("param").norm
    name = spike.params[0]
    # the replayed step (batch, RNG, pre-update weights) gives the norm the watch recorded
    assert ex.report.param_norms[name] == pytest.approx(want[name], rel=1e-4)
    widget = spike.compare(loss_fn=lambda out: out.loss)
    assert type(widget).__name__ == "ExplorerWidget"
    # A and B say which step each is (both read "cpu · loss ..." before)
    line = widget.notes.value
    assert re.search(r"A = calm step \d+ · cpu · loss ", line), line
    assert f"B = spike step {PLANT} · cpu · loss " in line, line


def test_compare_with_a_target_replays_the_calm_step_with_its_own(planted_layer: Any) -> None:
    """No record holds a target: one `target=` for both replays gave the calm step the spike
    step's labels, its norms wrong and unsaid (an outside try-out). Each step gets its own."""
    watch, _ = planted_layer
    spike, batches = watch.spikes[0], _batches(STEPS)

    def loss_fn(out: Any, y: torch.Tensor) -> torch.Tensor:  # the model's own loss, by hand
        logits = out.logits[:, :-1].flatten(0, 1)
        return nn.functional.cross_entropy(logits, y[:, 1:].flatten())

    with pytest.raises(GradExplorerError, match=r"calm_target=<step (\d+)'s>") as said:
        spike.compare(loss_fn=loss_fn, target=batches[PLANT])
    calm = int(re.search(r"calm_target=<step (\d+)'s>", str(said.value)).group(1))  # type: ignore[union-attr]
    widget = spike.compare(loss_fn=loss_fn, target=batches[PLANT], calm_target=batches[calm])
    a = widget.compare_view.baseline[0]
    want = watch.history(start=calm, stop=calm + 1).set_index("param").norm
    for name in spike.params[:3]:
        assert a.param_norms[name] == pytest.approx(want[name], rel=1e-4)


def test_recorded_run_reads_the_same_spikes(planted_layer: Any) -> None:
    watch, model = planted_layer
    live = watch.spikes
    watch.close()
    run = GradWatch.open(watch.path)
    read = run.spikes
    assert [(s.step, s.params, s.modules, s.sentence) for s in read] == [
        (s.step, s.params, s.modules, s.sentence) for s in live
    ]
    frame = run.spike_frame()
    assert set(frame.spike) == {PLANT} and frame.name.iloc[0] in live[0].params + live[0].modules
    assert read[0].explore(model, loss_fn=lambda out: out.loss) is not None


def test_learning_rate_jump_found_at_its_step_with_the_loss_after(tmp_path: Path) -> None:
    watch, _, losses = _train("lr", tmp_path, update_ratio=True)
    spikes = watch.spikes
    assert [s.step for s in spikes] == [PLANT], spikes
    spike = spikes[0]
    assert spike.rows[0]["signal"] == "update_ratio"  # the step that moved the weights
    assert spike.loss_step == PLANT + 1  # the loss shows it at the next forward
    assert losses[PLANT + 1] > 1.5 * losses[PLANT]
    assert "before the loss" in spike.sentence
    # the rise quoted is the first moving module's peak over the event, and says so
    leader = next(r for r in spike.rows if r["kind"] == "module")
    assert f"up to {leader['rise']:.3g}x its baseline" in spike.sentence
    # the update ratio is found after the step; the gradients spike at the next one, whose
    # pre-update state is the one kept
    ex = spike.explore(loss_fn=lambda out: out.loss)
    # and the replay says it is that next step, not the spike's own
    said = f"this replays step {PLANT + 1}, the first step of the spike of step {PLANT}"
    assert ex.report.findings[0].startswith(said), ex.report.findings
    watch.close()


def test_no_spike_in_a_calm_run_and_off_switch(tmp_path: Path) -> None:
    watch, _, _ = _train("none", tmp_path / "a")
    assert watch.spikes == [] and not [a for a in watch.anomalies if a.kind == SPIKE]
    watch.close()
    off, _, _ = _train("weights", tmp_path / "b", spikes=False)
    assert off.spikes == []
    off.close()


def test_spike_without_a_record_says_why(tmp_path: Path) -> None:
    watch, _, _ = _train("weights", tmp_path, flight_recorder=False)
    (spike,) = watch.spikes
    with pytest.raises(GradExplorerError, match="flight_recorder=False"):
        spike.explore()
    watch.close()


def test_rule_is_checked_at_the_door(tmp_path: Path) -> None:
    model = _gpt2(1)
    with pytest.raises(GradExplorerError, match="spikes"):
        GradWatch(model, path=tmp_path, spikes="yes")  # type: ignore[arg-type]
    with pytest.raises(GradExplorerError, match="factor"):
        SpikeRule(factor=1.0)
    with pytest.raises(GradExplorerError, match="window"):
        SpikeRule(window=0)
    assert not list(tmp_path.iterdir())


def test_baselines_follow_a_trend_and_flag_a_jump() -> None:
    """A steadily falling series with noise is no spike; a 10x jump is, once."""
    rule = SpikeRule()
    base = Baselines(rule)
    rng = np.random.default_rng(0)
    flagged = []
    for t in range(200):
        value = np.exp(-t / 60 + 0.1 * rng.standard_normal())
        value *= 10 if t == 150 else 1
        _, spike, _ = base.step(np.array([value]))
        flagged += [t] if spike[0] else []
    assert flagged == [150]


def test_loss_from_the_lightning_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from gradviz_widgets.integrations.lightning import GradWatchCallback

    batches = _batches(60)

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = _gpt2(2)

        def forward(self, x: torch.Tensor) -> Any:
            return self.net(input_ids=x, labels=x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            for group in self.trainer.optimizers[0].param_groups:  # a learning-rate jump
                group["lr"] = 0.3 if self.trainer.global_step == 40 else 3e-3
            return self(batch).loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    # the writer drains the whole run at once (as on a busy machine, where a drain spans more
    # steps than the event's gap): each loss must still meet its own step's event
    made = Writer.__init__

    def slow(self: Writer, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.poll_s = 30.0  # woken only by the flush and stop at the end

    monkeypatch.setattr(Writer, "__init__", slow)
    callback = GradWatchCallback(path=tmp_path)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=60,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    loader = torch.utils.data.DataLoader([b for b in batches], batch_size=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), loader)
    run = GradWatch.open(tmp_path)
    (spike,) = run.spikes
    # update ratios every 10th step (the default) have no warm baseline after 40 steps: the
    # jump shows in the next step's gradients, and in its loss, which the callback passed on
    assert spike.step == 41 and spike.loss_step == 41
    assert "at the loss's own step" in spike.sentence


def spike_run(path: Path, steps: int = 40, at: int = 30) -> GradWatch:
    """A small MLP whose batch at step `at` is corrupted (inputs x30): a spike led by 0.weight."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.Tanh(),
        torch.nn.Linear(16, 16),
        torch.nn.Tanh(),
        torch.nn.Linear(16, 1),
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    watch = GradWatch(net, optimizer=opt, path=path)
    g = torch.Generator().manual_seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(steps):
            x = torch.randn(32, 8, generator=g) * (30.0 if step == at else 1.0)
            loss = (net(x) - x[:, :1].sin()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return watch


def test_corrupted_batch_is_found_and_led_by_the_first_layer(tmp_path: Path) -> None:
    watch = spike_run(tmp_path)
    (spike,) = watch.spikes
    assert spike.step == 30 and spike.params[0] == "0.weight", spike
    watch.close()


def test_live_and_reopened_anomalies_are_listed_alike(tmp_path: Path) -> None:
    """A spike is found steps after its own step, so the live list had it after later
    anomalies while the disk's had it by step: `anomalies[0]` opened different ones."""
    from gradviz_widgets.watch.anomalies import in_order

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    watch = GradWatch(net, optimizer=opt, path=tmp_path)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for step in range(40):
        for group in opt.param_groups:
            group["lr"] = 50.0 if step == 25 else 0.01
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        watch.log_loss(loss)
        opt.step()
    live = [(a.step, a.kind, tuple(a.params)) for a in watch.anomalies]
    watch.close()
    disk = [(a.step, a.kind, tuple(a.params)) for a in GradWatch.open(tmp_path).anomalies]
    assert live == disk and len(live) > 1
    assert live == [(a.step, a.kind, tuple(a.params)) for a in in_order(watch.anomalies)]


def test_an_event_none_of_whose_steps_was_kept_is_still_described() -> None:
    """The writer lost the event's steps (a read-only disk): describing it raised ValueError
    (a max over no steps) in the writer thread."""
    from gradviz_widgets.watch.baselines import SpikeRule
    from gradviz_widgets.watch.spikes import describe

    event = {"start": 5, "loss_step": None, "last": 5}
    spike = describe(event, {"rows": [], "loss": []}, ["w"], ["m"], SpikeRule())
    assert spike.step == 5 and spike.params == []
