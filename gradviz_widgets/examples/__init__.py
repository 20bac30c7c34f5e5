"""Example models for gradient-flow lessons, tests and benchmarks.

Everything is plain ``torch.nn`` (no torchvision, no downloaded weights).
Builders draw initial weights from the global torch RNG like ``nn`` layers do;
only the ``*_example`` helpers and :func:`zoo` call ``torch.manual_seed``.

Example:
    >>> from gradviz_widgets.examples import dead_branch_example
    >>> net, x, y = dead_branch_example()
    >>> net(x).shape
    torch.Size([6, 3])
"""

from .cnn import BasicBlock, Bottleneck, ResNet, resnet18, resnet50, small_cnn
from .dead_branch import DeadBranchNet, dead_branch_example
from .mlp import ResidualBlock, ResidualMLP, mlp3, relu_residual_mlp, sigmoid_mlp
from .pathologies import (
    FrozenAndDetachedNet,
    NaNMidGraphNet,
    UnsafeNorm,
    UnsafeSqrt,
    exploding_example,
    exploding_mlp,
    frozen_and_detached_example,
    nan_mid_graph_example,
    nan_mid_graph_net,
)
from .recurrent import LSTMClassifier, UnrolledLSTM, lstm_model
from .transformer import BertLike, GPT2Like, bert_like, gpt2_like
from .zoo import ZOO_NAMES, zoo

__all__ = [
    "ZOO_NAMES",
    "BasicBlock",
    "BertLike",
    "Bottleneck",
    "DeadBranchNet",
    "FrozenAndDetachedNet",
    "GPT2Like",
    "LSTMClassifier",
    "NaNMidGraphNet",
    "ResNet",
    "ResidualBlock",
    "ResidualMLP",
    "UnrolledLSTM",
    "UnsafeNorm",
    "UnsafeSqrt",
    "bert_like",
    "dead_branch_example",
    "exploding_example",
    "exploding_mlp",
    "frozen_and_detached_example",
    "gpt2_like",
    "lstm_model",
    "mlp3",
    "nan_mid_graph_example",
    "nan_mid_graph_net",
    "relu_residual_mlp",
    "resnet18",
    "resnet50",
    "sigmoid_mlp",
    "small_cnn",
    "zoo",
]
