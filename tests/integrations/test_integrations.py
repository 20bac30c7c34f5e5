"""GradWatch in the frameworks people train with: Lightning, the Hugging Face Trainer and an
accelerate loop, real frameworks on tiny CPU models. One row per real optimizer step (gradient
accumulation included), numbered by the framework's global step, with the gradients that step
applied; the watch never changes the training."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

pl = pytest.importorskip("lightning.pytorch")
hf = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

from gradviz_widgets.integrations.lightning import GradWatchCallback as LightningWatch  # noqa: E402
from gradviz_widgets.integrations.transformers import GradWatchCallback as TrainerWatch  # noqa: E402
from gradviz_widgets.watch import GradWatch  # noqa: E402

# ---- optimizer.step(closure): how Lightning steps ----------------------------------------


@pytest.mark.parametrize("kind", ["SGD", "LBFGS"])
def test_step_with_closure_records_the_gradients_it_applies(kind: str, tmp_path: Path) -> None:
    """The closure runs inside step(), after its pre-hooks: the row holds the gradients the
    closure made (LBFGS: of its first evaluation), and the closure's loss comes back unchanged."""
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    opt = getattr(torch.optim, kind)(net.parameters(), lr=0.1)
    x = torch.randn(8, 3)
    watch = GradWatch(net, optimizer=opt, path=tmp_path, start_step=7)
    reference, losses = {}, []

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = net(x).pow(2).mean()
        loss.backward()
        if len(reference) == len(losses):  # the first evaluation of this step
            reference[7 + len(losses)] = {
                n: float(p.grad.double().norm()) for n, p in net.named_parameters()
            }
        return loss

    for i in range(3):
        losses.append(opt.step(closure) if i % 2 else opt.step(closure=closure))
    assert all(isinstance(loss, torch.Tensor) for loss in losses)
    history = watch.history()
    watch.close()
    _check_norms(history, reference)


# ---- Lightning -----------------------------------------------------------------------------


class TinyModule(pl.LightningModule):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.fail_at = fail_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at is not None and self.trainer.global_step == self.fail_at:
            raise RuntimeError("boom")
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.05)


class Reference(pl.Callback):
    """float64 norms of the gradients the optimizer is about to apply, keyed by global step."""

    def __init__(self) -> None:
        self.norms: dict[int, dict[str, float]] = {}

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.norms[trainer.global_step] = {
            n: float(p.grad.double().norm()) for n, p in pl_module.named_parameters()
        }


def _loader(n: int = 32, batch: int = 4) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True).sin())
    return torch.utils.data.DataLoader(data, batch_size=batch)


def _fit(
    callbacks: list,
    max_steps: int,
    module: TinyModule | None = None,
    ckpt: Any = None,
    plugins: Any = None,
) -> tuple[pl.Trainer, TinyModule]:
    pl.seed_everything(0, verbose=False)
    module = module or TinyModule()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        accumulate_grad_batches=2,
        callbacks=callbacks,
        plugins=plugins,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        trainer.fit(module, _loader(), ckpt_path=ckpt)
    return trainer, module


def _check_norms(history: Any, reference: dict[int, dict[str, float]]) -> None:
    assert sorted(set(history.step)) == sorted(reference)
    for row in history.itertuples():
        assert row.norm == pytest.approx(reference[row.step][row.param], rel=1e-6, abs=1e-12)


def test_lightning_one_row_per_optimizer_step(tmp_path: Path) -> None:
    callback, reference = LightningWatch(path=tmp_path / "run", update_ratio=True), Reference()
    trainer, module = _fit([callback, reference], max_steps=5)
    assert trainer.global_step == 5  # 10 batches, 2 accumulated per step
    watch = callback.watch
    assert watch is not None and watch.closed
    history = GradWatch.open(tmp_path / "run").history()
    assert sorted(set(history.step)) == [0, 1, 2, 3, 4]
    assert len(history) == 5 * len(list(module.parameters()))
    _check_norms(history, reference.norms)
    assert history.update_ratio.notna().all()


def test_lightning_watch_never_changes_training(tmp_path: Path) -> None:
    _, bare = _fit([], max_steps=4)
    _, watched = _fit([LightningWatch(path=tmp_path)], max_steps=4)
    for (name, a), b in zip(bare.state_dict().items(), watched.state_dict().values()):
        assert torch.equal(a, b), name


def test_lightning_resumed_run_counts_on(tmp_path: Path) -> None:
    trainer, module = _fit([], max_steps=3)
    trainer.save_checkpoint(tmp_path / "ckpt.ckpt")
    callback, reference = LightningWatch(path=tmp_path / "run"), Reference()
    _fit([callback, reference], max_steps=6, module=module, ckpt=tmp_path / "ckpt.ckpt")
    history = GradWatch.open(tmp_path / "run").history()
    assert sorted(set(history.step)) == [3, 4, 5]
    _check_norms(history, reference.norms)


def test_lightning_exception_closes_the_watch(tmp_path: Path) -> None:
    callback = LightningWatch(path=tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        _fit([callback], max_steps=5, module=TinyModule(fail_at=2))
    assert callback.watch is not None and callback.watch.closed
    assert sorted(set(GradWatch.open(tmp_path).history().step)) == [0, 1]


def test_lightning_skipped_amp_steps_are_recorded(tmp_path: Path) -> None:
    """precision "16-mixed" with a real GradScaler whose scale overflows every step: the scaler
    skips optimizer.step(), the global step still counts; the callback hands the scaler to the
    watch, which records each skipped step as skipped (nonfinite) under the trainer's numbers."""
    from lightning.pytorch.plugins import MixedPrecision

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**100)
    callback = LightningWatch(path=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit([callback], max_steps=2, plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)])
    assert not [w for w in caught if "global step" in str(w.message)]
    assert callback.scaler is scaler
    run = GradWatch.open(tmp_path)
    h = run.history()
    assert sorted(set(h.step)) == [0, 1] and h.skipped.all()
    assert [a.kind for a in run.anomalies][:1] == ["nonfinite"]


class LazyModule(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LazyLinear(8), nn.Tanh(), nn.Linear(8, 1))


def test_lightning_watch_that_cannot_start_leaves_training_alone(tmp_path: Path) -> None:
    """GradWatch refuses an uninitialised lazy module: the callback warns, training goes on."""
    callback = LightningWatch(path=tmp_path)
    with pytest.warns(UserWarning, match="could not start a GradWatch"):
        trainer, _ = _fit([callback], max_steps=2, module=LazyModule())
    assert trainer.global_step == 2 and callback.watch is None


def test_misspelt_option_fails_when_the_callback_is_made() -> None:
    from gradviz_widgets.errors import GradExplorerError

    with pytest.raises(GradExplorerError, match="update_ratoi"):
        LightningWatch(update_ratoi=True)
    with pytest.raises(GradExplorerError, match="start_step"):
        TrainerWatch(start_step=3)


# ---- Hugging Face Trainer ------------------------------------------------------------------


class TrainerReference(hf.TrainerCallback):  # type: ignore[misc]
    """float64 norms of the gradients the optimizer is about to apply (after clipping)."""

    def __init__(self) -> None:
        self.norms: dict[int, dict[str, float]] = {}

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.norms[state.global_step] = {
            n: float(p.grad.double().norm()) for n, p in kw["model"].named_parameters()
        }


def _train(tmp: Path, callbacks: list, max_steps: int = 4, resume: Any = None) -> Any:
    hf.set_seed(0)
    config = hf.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = hf.GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 64, (32, 12), generator=g)
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = hf.TrainingArguments(
        output_dir=str(tmp / "out"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=max_steps,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no" if resume is None else "steps",
        save_steps=2,
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = hf.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_trainer_one_row_per_optimizer_step(tmp_path: Path) -> None:
    callback, reference = TrainerWatch(path=tmp_path / "run", update_ratio=True), TrainerReference()
    trainer = _train(tmp_path, [callback, reference])
    assert trainer.state.global_step == 4
    assert callback.watch is not None and callback.watch.closed
    assert callback.scaler is None  # fp32 on the CPU
    history = GradWatch.open(tmp_path / "run").history()
    assert sorted(set(history.step)) == [0, 1, 2, 3]
    assert len(history) == 4 * len(list(trainer.model.parameters()))
    _check_norms(history, reference.norms)


def test_trainer_watch_never_changes_training(tmp_path: Path) -> None:
    bare = _train(tmp_path / "a", [], max_steps=3).model.state_dict()
    watched = _train(tmp_path / "b", [TrainerWatch(path=tmp_path / "run")], max_steps=3)
    for (name, a), b in zip(bare.items(), watched.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_trainer_resumed_run_counts_on(tmp_path: Path) -> None:
    _train(tmp_path, [], max_steps=2, resume=False)  # saves checkpoint-2
    callback, reference = TrainerWatch(path=tmp_path / "run"), TrainerReference()
    checkpoint = str(tmp_path / "out" / "checkpoint-2")
    _train(tmp_path, [callback, reference], max_steps=4, resume=checkpoint)
    history = GradWatch.open(tmp_path / "run").history()
    assert sorted(set(history.step)) == [2, 3]
    _check_norms(history, reference.norms)


# ---- accelerate ----------------------------------------------------------------------------


def test_accelerate_loop_one_row_per_optimizer_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, loader = accelerator.prepare(model, opt, _loader(n=16, batch=2))
    # the torch optimizer inside accelerate's AcceleratedOptimizer: its step runs once per
    # real optimizer step (the wrapper's step() does nothing between accumulation steps)
    watch = GradWatch(model, optimizer=opt, path=tmp_path)
    reference, steps = {}, 0
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            if accelerator.sync_gradients:
                reference[steps] = {
                    n: float(p.grad.double().norm()) for n, p in model.named_parameters()
                }
                steps += 1
            opt.step()
            opt.zero_grad()
    watch.close()
    assert steps == 4
    _check_norms(GradWatch.open(tmp_path).history(), reference)


# ---- optional extras -----------------------------------------------------------------------

BLOCKED = """
import json, sys
sys.path.insert(0, {root!r})
import gradviz_widgets, gradviz_widgets.watch, gradviz_widgets.integrations
frameworks = {{"lightning", "transformers", "accelerate"}}
found = sorted({{m.split(".")[0] for m in sys.modules}} & frameworks)
for name in ["lightning", "lightning.pytorch", *frameworks]:
    sys.modules[name] = None  # as if not installed: `import name` raises ImportError
errors = []
for module in ["lightning", "transformers"]:
    try:
        __import__("gradviz_widgets.integrations." + module)
    except ImportError as e:
        errors.append([type(e).__name__, str(e)])
print(json.dumps([found, errors]))
"""


def test_core_needs_no_framework_and_each_integration_says_what_to_install() -> None:
    root = str(Path(__file__).resolve().parents[2])
    cmd = [sys.executable, "-c", BLOCKED.format(root=root)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found, errors = json.loads(done.stdout)
    assert found == []  # the core and the integrations package import none of them
    assert [kind for kind, _ in errors] == ["MissingExtraError"] * 2
    for (_, message), extra in zip(errors, ["lightning", "transformers"]):
        assert f"pip install gradviz_widgets[{extra}]" in message


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_start_step_must_be_a_step_number(bad: Any) -> None:
    from gradviz_widgets.errors import GradExplorerError

    with pytest.raises(GradExplorerError, match="start_step"):
        GradWatch(nn.Linear(2, 1), start_step=bad)


def test_lightning_logs_each_training_steps_own_loss(tmp_path: Path, monkeypatch) -> None:
    """Lightning hands on_train_batch_end the loss divided by accumulate_grad_batches (what it
    backpropagates): the watch had recorded half each batch's loss with 2 batches a step."""
    logged: list[float] = []
    real = GradWatch.log_loss

    def spy(self: GradWatch, loss: Any, step: Any = None) -> None:
        logged.append(float(loss))
        real(self, loss, step=step)

    monkeypatch.setattr(GradWatch, "log_loss", spy)

    class Recording(TinyModule):
        def __init__(self) -> None:
            super().__init__()
            self.losses: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.losses.append(float(loss))
            return loss

    module = Recording()
    _fit([LightningWatch(path=tmp_path / "run")], max_steps=3, module=module)
    assert len(logged) == len(module.losses) == 6
    assert logged == pytest.approx(module.losses, rel=1e-6)
