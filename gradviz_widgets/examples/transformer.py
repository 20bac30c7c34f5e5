"""Transformers: a GPT-2-shaped decoder with explicit attention and a BERT-like encoder."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["BertLike", "GPT2Like", "bert_like", "gpt2_like"]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written with plain matmul + softmax."""

    mask: torch.Tensor

    def __init__(self, d_model: int, n_head: int, seq: int) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        self.n_head = n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        self.register_buffer("mask", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        hd = c // self.n_head
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    """GPT-2 feed-forward: ``c_fc`` (4x) -> GELU(tanh) -> ``c_proj``."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LN decoder block: ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``."""

    def __init__(self, d_model: int, n_head: int, seq: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, seq)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Like(nn.Module):
    """Decoder-only transformer shaped like GPT-2 (``wte, wpe, h.N, ln_f, lm_head``).

    ``lm_head.weight`` is tied to ``wte.weight`` (one parameter, two uses).
    Input: LongTensor ``(batch, t)`` with ``t <= seq``; output logits
    ``(batch, t, vocab)``. Weights use GPT-2's N(0, 0.02) init. No dropout.

    Example:
        >>> model = GPT2Like(n_layer=1, d_model=8, n_head=2, vocab=11, seq=4)
        >>> model(torch.randint(0, 11, (2, 3))).shape
        torch.Size([2, 3, 11])
    """

    def __init__(self, n_layer: int, d_model: int, n_head: int, vocab: int, seq: int) -> None:
        super().__init__()
        self.seq = seq
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.h = nn.ModuleList(Block(d_model, n_head, seq) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # GPT-2's scaled residual init
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.seq:
            raise ValueError(f"sequence length {t} exceeds seq={self.seq}")
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class BertEmbeddings(nn.Module):
    """Token + position embeddings followed by LayerNorm."""

    def __init__(self, vocab: int, d_model: int, seq: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.norm(self.word(idx) + self.position(pos))


class BertLike(nn.Module):
    """BERT-shaped encoder classifier built from ``nn.TransformerEncoderLayer``.

    Modules: ``embeddings``, ``encoder.N`` (post-LN, ``batch_first=True``,
    GELU, 4x feed-forward), ``pooler`` (+ ``pooler_act`` tanh on the first
    token) and ``classifier``. Input LongTensor ``(batch, t)``, output logits
    ``(batch, num_classes)``. ``dropout`` defaults to 0 so runs are repeatable.

    Example:
        >>> model = BertLike(n_layer=1, d_model=8, n_head=2, vocab=11, seq=4)
        >>> model(torch.randint(0, 11, (2, 3))).shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        n_layer: int,
        d_model: int,
        n_head: int,
        vocab: int,
        seq: int,
        num_classes: int = 2,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, d_model, seq)
        self.encoder = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d_model,
                n_head,
                dim_feedforward=4 * d_model,
                dropout=dropout,
                activation="gelu",
                batch_first=True,
                norm_first=False,
            )
            for _ in range(n_layer)
        )
        self.pooler = nn.Linear(d_model, d_model)
        self.pooler_act = nn.Tanh()
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(idx)
        for layer in self.encoder:
            x = layer(x)
        return self.classifier(self.pooler_act(self.pooler(x[:, 0])))


def gpt2_like(
    n_layer: int = 12, d_model: int = 768, n_head: int = 12, vocab: int = 50257, seq: int = 1024
) -> GPT2Like:
    """Build a :class:`GPT2Like`; the defaults give GPT-2 small (124M params).

    Example:
        >>> gpt2_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=8)(
        ...     torch.randint(0, 64, (2, 8))).shape
        torch.Size([2, 8, 64])
    """
    return GPT2Like(n_layer, d_model, n_head, vocab, seq)


def bert_like(
    n_layer: int = 12,
    d_model: int = 768,
    n_head: int = 12,
    vocab: int = 30522,
    seq: int = 512,
    num_classes: int = 2,
) -> BertLike:
    """Build a :class:`BertLike`; the defaults are BERT-base sized (~110M params).

    Example:
        >>> bert_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=8)(
        ...     torch.randint(0, 64, (2, 8))).shape
        torch.Size([2, 2])
    """
    return BertLike(n_layer, d_model, n_head, vocab, seq, num_classes=num_classes)
