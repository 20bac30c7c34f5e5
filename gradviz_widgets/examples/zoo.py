"""The benchmark model zoo: every example architecture with a matching input."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import torch
from torch import nn

from .cnn import resnet18, resnet50
from .mlp import mlp3, sigmoid_mlp
from .recurrent import UnrolledLSTM
from .transformer import bert_like, gpt2_like

__all__ = ["ZOO_NAMES", "zoo"]

ZooEntry = tuple[nn.Module, torch.Tensor, str]
_Spec = Callable[[], ZooEntry]

ZOO_NAMES: tuple[str, ...] = (
    "mlp3",
    "resnet18",
    "resnet50",
    "gpt2_like",
    "bert_like",
    "unrolled_lstm",
    "sigmoid_mlp",
)


def _full() -> dict[str, _Spec]:
    return {
        "mlp3": lambda: (
            mlp3(784, 256, 10),
            torch.randn(64, 784),
            "3-layer MLP 784-256-256-10, batch 64",
        ),
        "resnet18": lambda: (
            resnet18(num_classes=1000),
            torch.randn(8, 3, 224, 224),
            "ResNet-18 (torchvision layout, 1000 classes), batch 8 x 3 x 224 x 224",
        ),
        "resnet50": lambda: (
            resnet50(num_classes=1000),
            torch.randn(8, 3, 224, 224),
            "ResNet-50 (torchvision layout, 1000 classes), batch 8 x 3 x 224 x 224",
        ),
        "gpt2_like": lambda: (
            gpt2_like(),
            torch.randint(0, 50257, (2, 128)),
            "GPT-2 small shape (12 layers, d 768, tied lm_head), batch 2 x seq 128",
        ),
        "bert_like": lambda: (
            bert_like(),
            torch.randint(0, 30522, (2, 128)),
            "BERT-base shape (12 nn.TransformerEncoderLayer), batch 2 x seq 128",
        ),
        "unrolled_lstm": lambda: (
            UnrolledLSTM(32, 128, steps=32),
            torch.randn(8, 32, 32),
            "LSTMCell unrolled 32 steps (hidden 128), batch 8",
        ),
        "sigmoid_mlp": lambda: (
            sigmoid_mlp(48, 64),
            torch.randn(32, 64),
            "48 x (Linear 64 + Sigmoid): vanishing gradients, batch 32",
        ),
    }


def _tiny() -> dict[str, _Spec]:
    return {
        "mlp3": lambda: (mlp3(16, 16, 4), torch.randn(4, 16), "tiny 3-layer MLP 16-16-16-4"),
        "resnet18": lambda: (
            resnet18(num_classes=10, width=4),
            torch.randn(2, 3, 32, 32),
            "tiny ResNet-18 (width 4), batch 2 x 3 x 32 x 32",
        ),
        "resnet50": lambda: (
            resnet50(num_classes=10, width=4),
            torch.randn(2, 3, 32, 32),
            "tiny ResNet-50 (width 4), batch 2 x 3 x 32 x 32",
        ),
        "gpt2_like": lambda: (
            gpt2_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=16),
            torch.randint(0, 64, (2, 8)),
            "tiny GPT-2 shape (2 layers, d 16), batch 2 x seq 8",
        ),
        "bert_like": lambda: (
            bert_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=16),
            torch.randint(0, 64, (2, 8)),
            "tiny BERT shape (2 layers, d 16), batch 2 x seq 8",
        ),
        "unrolled_lstm": lambda: (
            UnrolledLSTM(4, 8, steps=8),
            torch.randn(2, 8, 4),
            "tiny LSTMCell unrolled 8 steps (hidden 8), batch 2",
        ),
        "sigmoid_mlp": lambda: (
            sigmoid_mlp(48, 8),
            torch.randn(4, 8),
            "48 x (Linear 8 + Sigmoid): vanishing gradients, batch 4",
        ),
    }


def zoo(
    size: Literal["full", "tiny"] = "full", names: Iterable[str] | None = None, seed: int | None = 0
) -> dict[str, ZooEntry]:
    """Build the zoo as ``{name: (model, input, description)}`` in :data:`ZOO_NAMES` order.

    ``size="full"`` is the benchmark set (GPT-2 small and BERT-base alone hold
    ~235M parameters); ``size="tiny"`` has the same architectures with widths
    4-16, 32x32 images, 2 transformer layers and seq 8, for tests and CI.
    ``names`` restricts which entries are built. Unless ``seed`` is None, calls
    ``torch.manual_seed(seed)`` before building each entry, so an entry is the
    same whichever others are built. Models are on CPU in training mode; the
    output of every model is a float tensor (reduce it, e.g. ``out.mean()``, to
    get a loss). Token inputs are LongTensors.

    Example:
        >>> models = zoo("tiny", names=["mlp3"])
        >>> model, x, description = models["mlp3"]
        >>> model(x).shape
        torch.Size([4, 4])
    """
    if size not in ("full", "tiny"):
        raise ValueError(f"size must be 'full' or 'tiny', got {size!r}")
    specs = _full() if size == "full" else _tiny()
    wanted = list(ZOO_NAMES) if names is None else list(names)
    unknown = [n for n in wanted if n not in specs]
    if unknown:
        raise KeyError(f"unknown zoo entries {unknown}; choose from {list(ZOO_NAMES)}")
    out: dict[str, ZooEntry] = {}
    for name in ZOO_NAMES:
        if name in wanted:
            if seed is not None:
                torch.manual_seed(seed)
            out[name] = specs[name]()
    return out
