"""A tiny named MLP and its data, shared by the hook and modifier tests; the tiny transformers
configs (GPT-2, BERT) the run and conformance tests build."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

CE = nn.CrossEntropyLoss()


def mlp() -> nn.Sequential:
    """fc1 -> tanh -> fc2 -> relu -> fc3, seeded."""
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            [
                ("fc1", nn.Linear(4, 6)),
                ("act1", nn.Tanh()),
                ("fc2", nn.Linear(6, 5)),
                ("act2", nn.ReLU()),
                ("fc3", nn.Linear(5, 3)),
            ]
        )
    )


def data(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """n inputs of width 4 and class targets in 0..2, from a fixed generator."""
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


#: vocabulary of the tiny transformers configs
HF_VOCAB = 64


def tiny_gpt2_config(**extra: object) -> object:
    """GPT-2, 2 layers of width 32, 2 heads, 16 positions (`extra`: dropout, tying, or any of
    these settings otherwise)."""
    from transformers import GPT2Config

    settings = {"vocab_size": HF_VOCAB, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 2}
    return GPT2Config(**{**settings, **extra})


def tiny_bert_config(**extra: object) -> object:
    """BERT, 2 layers of width 32, 2 heads, 16 positions (`extra`: the head's settings)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=HF_VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        **extra,
    )


#: The seed's gradient-norm table for the dead-branch network (CrossEntropyLoss, seed 0),
#: rounded to 4 places: what plain `loss.backward()` and the explorer must both give.
SEED_TABLE = {
    "main1.weight": 0.279,
    "main1.bias": 0.1172,
    "gate.weight": 0.0,
    "gate.bias": 0.0,
    "dead.weight": 0.0,
    "dead.bias": 0.1547,
    "main2.weight": 0.2938,
    "main2.bias": 0.1547,
}
