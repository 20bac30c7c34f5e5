"""Convolutional models: torchvision-style ResNets and a small Grad-CAM CNN."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet50", "small_cnn"]


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """ResNet-18/34 block: two 3x3 convs and a residual ``out += identity``.

    Example:
        >>> BasicBlock(8, 8)(torch.randn(1, 8, 4, 4)).shape
        torch.Size([1, 8, 4, 4])
    """

    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """ResNet-50 block: 1x1 -> 3x3 -> 1x1 convs (4x expansion) plus residual.

    Example:
        >>> Bottleneck(16, 4)(torch.randn(1, 16, 4, 4)).shape
        torch.Size([1, 16, 4, 4])
    """

    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision-style ResNet; module paths match (``layer2.0.downsample.0``).

    ``width`` is the stem width (64 in torchvision); stages use
    ``width, 2*width, 4*width, 8*width`` planes. Input: ``(N, 3, H, W)``,
    H and W >= 32 (at 32x32 the last stage is 1x1, so in training mode
    BatchNorm needs N >= 2).

    Example:
        >>> model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=5, width=4)
        >>> model(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 5])
    """

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        layers: list[int],
        num_classes: int = 10,
        width: int = 64,
    ) -> None:
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(
        self, block: type[BasicBlock | Bottleneck], planes: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 10, width: int = 64) -> ResNet:
    """ResNet-18 (BasicBlock, ``[2, 2, 2, 2]``); 11.7M params at width 64, 1000 classes.

    Example:
        >>> resnet18(num_classes=10, width=4)(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes=num_classes, width=width)


def resnet50(num_classes: int = 10, width: int = 64) -> ResNet:
    """ResNet-50 (Bottleneck, ``[3, 4, 6, 3]``); 25.6M params at width 64, 1000 classes.

    Example:
        >>> resnet50(num_classes=10, width=4)(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes=num_classes, width=width)


def small_cnn(num_classes: int = 10) -> nn.Module:
    """Small CNN for Grad-CAM lessons; the last conv layer is ``features.conv3``.

    ``features`` holds ``conv1, relu1, pool1, conv2, relu2, pool2, conv3, relu3``
    (ReLUs not in place, so hooks on ``features.conv3`` are safe), then
    ``pool`` (global average) and ``classifier``. Works on ``(N, 3, 32, 32)``;
    ``features.conv3`` outputs ``(N, 64, 8, 8)``.

    Example:
        >>> model = small_cnn()
        >>> model(torch.randn(1, 3, 32, 32)).shape
        torch.Size([1, 10])
    """
    features = nn.Sequential(
        OrderedDict(
            [
                ("conv1", nn.Conv2d(3, 16, 3, padding=1)),
                ("relu1", nn.ReLU()),
                ("pool1", nn.MaxPool2d(2)),
                ("conv2", nn.Conv2d(16, 32, 3, padding=1)),
                ("relu2", nn.ReLU()),
                ("pool2", nn.MaxPool2d(2)),
                ("conv3", nn.Conv2d(32, 64, 3, padding=1)),
                ("relu3", nn.ReLU()),
            ]
        )
    )
    return nn.Sequential(
        OrderedDict(
            [
                ("features", features),
                ("pool", nn.AdaptiveAvgPool2d(1)),
                ("flatten", nn.Flatten()),
                ("classifier", nn.Linear(64, num_classes)),
            ]
        )
    )
