"""A module held under two names, and tied parameters (issue 9 items 2 and 5): the model keeps its
own Parameters and buffers, and every module holding a tied parameter counts it."""

from __future__ import annotations

import pytest
import torch
from test_engine_trust import CE, assert_norms_match, explore_and_check, images, plain_norms
from torch import nn

from gradviz_widgets import GradExplorer

transformers = pytest.importorskip("transformers")


class SharedBackbone(nn.Module):
    """`self.features = self.backbone`: one CNN with BatchNorm reachable under two names."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.features = self.backbone
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


@pytest.mark.parametrize("training", [True, False])
def test_module_under_two_names_keeps_its_parameters(training: bool) -> None:
    torch.manual_seed(0)
    model = SharedBackbone().train(training)
    x, y = images()
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    stats = model.backbone[1].running_mean.clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)  # made before the run
    reference = plain_norms(model, lambda m: CE(m(x), y))
    _, report = explore_and_check(model, x, CE, y)  # bitwise checks after runs and close()
    assert_norms_match(report, reference)
    for name, p in model.named_parameters(remove_duplicate=False):
        assert p is params[name] and isinstance(p, nn.Parameter), name
    for name, b in model.named_buffers(remove_duplicate=False):
        assert b is buffers[name], name
    assert torch.equal(model.features[1].running_mean, stats)
    assert model.backbone[1].num_batches_tracked.item() == 0
    # the optimizer made before the run still trains the model
    before = model.backbone[0].weight.detach().clone()
    opt.zero_grad()
    CE(model(x), y).backward()
    opt.step()
    assert not torch.equal(model.features[0].weight, before)


def test_module_under_two_names_module_norms() -> None:
    torch.manual_seed(0)
    model = SharedBackbone()
    x, y = images()
    report = GradExplorer(model, x, loss_fn=CE, target=y).run()
    assert "features.0.weight" not in report.param_norms  # one record per Parameter
    assert report.module_norms["backbone"] == pytest.approx(
        (
            report.param_norms["backbone.0.weight"] ** 2
            + report.param_norms["backbone.0.bias"] ** 2
            + report.param_norms["backbone.1.weight"] ** 2
            + report.param_norms["backbone.1.bias"] ** 2
        )
        ** 0.5,
        rel=1e-12,
    )


# ---- tied weights in transformers models ---------------------------------------------------------
def gpt2() -> nn.Module:
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=40, n_positions=16)
    return transformers.GPT2LMHeadModel(config)


def llama() -> nn.Module:
    config = transformers.LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=40,
        max_position_embeddings=16,
        tie_word_embeddings=True,
    )
    return transformers.LlamaForCausalLM(config)


def t5() -> nn.Module:
    config = transformers.T5Config(
        vocab_size=40,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        tie_word_embeddings=True,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    return transformers.T5ForConditionalGeneration(config)


def lm_loss(out: object) -> torch.Tensor:
    return out.loss  # type: ignore[attr-defined]


def _norm(report: object, names: list[str]) -> float:
    return sum(report.param_norms[n] ** 2 for n in names) ** 0.5  # type: ignore[attr-defined]


@pytest.mark.parametrize("build", [gpt2, llama], ids=["gpt2", "llama"])
def test_tied_lm_head_counts_the_embedding(build) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    model = build().eval()
    ids = torch.randint(0, 40, (2, 7))
    inputs = {"input_ids": ids, "labels": ids}
    embedding = model.get_input_embeddings().weight
    assert model.lm_head.weight is embedding
    reference = plain_norms(model, lambda m: m(**inputs).loss)
    _, report = explore_and_check(model, inputs, lm_loss, runs=1)
    assert_norms_match(report, reference, rel=1e-4)
    (name,) = [n for n, p in model.named_parameters() if p is embedding]
    assert report.module_norms["lm_head"] == pytest.approx(report.param_norms[name], rel=1e-12)
    assert model.lm_head.weight is embedding


def test_t5_encoder_and_decoder_count_the_shared_embedding() -> None:
    torch.manual_seed(0)
    model = t5().eval()
    src, tgt = torch.randint(0, 40, (2, 6)), torch.randint(0, 40, (2, 5))
    inputs = {"input_ids": src, "labels": tgt}
    reference = plain_norms(model, lambda m: m(**inputs).loss)
    _, report = explore_and_check(model, inputs, lm_loss, runs=1)
    assert_norms_match(report, reference, rel=1e-4)
    for part in ("encoder", "decoder"):
        own = [n for n in report.param_norms if n.startswith(f"{part}.")]
        assert report.module_norms[part] == pytest.approx(
            _norm(report, [*own, "shared.weight"]), rel=1e-9
        )
        assert report.module_norms[f"{part}.embed_tokens"] == pytest.approx(
            report.param_norms["shared.weight"], rel=1e-12
        )
    # the root counts the shared weight once
    assert report.module_norms[""] == pytest.approx(
        _norm(report, list(report.param_norms)), rel=1e-9
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("where", ["model on cuda", "cpu model, device='cuda'"])
def test_shared_module_and_tied_weights_on_cuda(where: str) -> None:
    torch.manual_seed(0)
    model, (x, y) = SharedBackbone().train(), images()
    device = None
    if where == "model on cuda":
        model, x, y = model.cuda(), x.cuda(), y.cuda()
    else:
        device = "cuda"
    reference = plain_norms(model, lambda m: CE(m(x), y))
    _, report = explore_and_check(model, x, CE, y, device=device)
    assert report.device.startswith("cuda")
    # a conv bias before BatchNorm gets ~1e-8 of rounding noise, which differs between devices
    assert_norms_match(report, reference, rel=1e-4, abs_tol=1e-6)
    torch.manual_seed(0)
    lm = gpt2().eval()
    ids = torch.randint(0, 40, (2, 7))
    inputs = {"input_ids": ids, "labels": ids}
    reference = plain_norms(lm, lambda m: m(**inputs).loss)
    _, report = explore_and_check(lm, inputs, lm_loss, runs=1, device="cuda")
    assert_norms_match(report, reference, rel=1e-3)
    assert report.module_norms["lm_head"] == pytest.approx(
        report.param_norms["transformer.wte.weight"], rel=1e-12
    )
