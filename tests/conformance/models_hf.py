"""Registry cases: transformers models from small configs (offline, no downloads)."""

from __future__ import annotations

import torch
from small_models import HF_VOCAB, tiny_bert_config, tiny_gpt2_config  # tests/small_models.py
from torch import nn

from .models import Case, case

VOCAB, SEQ, BATCH = HF_VOCAB, 8, 2


def lm_loss(out, target):
    logits = out.logits
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _ids(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def _gpt2(tied: bool) -> Case:
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = tiny_gpt2_config(tie_word_embeddings=tied)
    model = GPT2LMHeadModel(cfg).train()
    assert (model.lm_head.weight is model.transformer.wte.weight) == tied
    return Case(
        model,
        {"input_ids": _ids()},
        lm_loss,
        _ids(2),
        f"GPT-2 2 layers d32, {'tied' if tied else 'untied'} lm_head, dropout 0.1 train",
    )


case("hf_gpt2_tied")(lambda: _gpt2(True))
case("hf_gpt2_untied")(lambda: _gpt2(False))


@case("hf_bert_mlm_tied")
def _bert():
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    cfg = tiny_bert_config()
    model = BertForMaskedLM(cfg).eval()
    sample = {"input_ids": _ids(), "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long)}
    return Case(
        model,
        sample,
        lm_loss,
        _ids(2),
        "BERT MLM (decoder tied to word embeddings; pooler unused -> None), eval",
    )


def _llama(tied: bool) -> Case:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16,
        tie_word_embeddings=tied,
    )
    model = LlamaForCausalLM(cfg)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    return Case(
        model,
        {"input_ids": _ids()},
        lm_loss,
        _ids(2),
        f"Llama 2 layers, GQA, RoPE, RMSNorm, {'tied' if tied else 'untied'} lm_head",
    )


case("hf_llama_tied")(lambda: _llama(True))
case("hf_llama_untied")(lambda: _llama(False))


@case("hf_t5_shared_embedding")
def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        dropout_rate=0.1,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    model = T5ForConditionalGeneration(cfg).train()
    assert model.encoder.embed_tokens.weight is model.shared.weight
    assert model.decoder.embed_tokens.weight is model.shared.weight
    sample = {"input_ids": _ids(), "decoder_input_ids": _ids(3)}
    return Case(
        model,
        sample,
        lm_loss,
        _ids(2),
        "T5: encoder/decoder share one embedding; relative attention bias; dropout train",
    )


# ---- the model's own loss (labels=, no loss_fn): the loss is output.loss -------------------------
@case("hf_gpt2_labels_own_loss")
def _gpt2_labels():
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = tiny_gpt2_config()
    model = GPT2LMHeadModel(cfg).train()
    sample = {"input_ids": _ids(), "labels": _ids()}
    return Case(model, sample, None, None, "GPT-2 called with labels=, no loss_fn: output.loss")


@case("hf_bert_classifier_labels_own_loss")
def _bert_classifier_labels():
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    cfg = tiny_bert_config(num_labels=3)
    model = BertForSequenceClassification(cfg).train()
    sample = {"input_ids": _ids(), "labels": torch.tensor([0, 2])}
    return Case(model, sample, None, None, "BERT classifier with labels=, dropout train")
