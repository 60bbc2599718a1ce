"""A GroupNorm ResNet + feature pyramid for detectors trained from scratch on CPU.

ResNet-18's layout (torchvision ``BasicBlock``: two 3×3 convolutions per block, two blocks
per stage, 7×7/2 stem and max-pool) at a chosen base width, with GroupNorm in place of
BatchNorm in every block and in the feature pyramid (Lin et al. 2017). GroupNorm keeps no
running statistics, so a federated average of the flat vector is the whole model state and
non-IID clients cannot disagree about batch statistics (the issue's "norm layers that
federate"; frozen BatchNorm would need pretrained statistics, and none can be downloaded).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from geofl.models.detection.tvops import ensure_torchvision_ops
from geofl.models.norm import make_norm

__all__ = ["GNResNetFPN"]

Extra = Literal["p6p7", "pool"]


def group_norm(groups: int) -> Callable[[int], nn.Module]:
    """``channels -> GroupNorm`` with ``groups`` groups (fewer when they do not divide)."""

    def build(channels: int) -> nn.Module:
        return make_norm("group", channels, groups)

    return build


class GNResNetFPN(nn.Module):
    """ResNet-18-layout GroupNorm backbone with a feature pyramid, torchvision's detector
    backbone contract (``out_channels``; ``forward`` → ordered feature maps).

    Args:
        in_channels: Image bands.
        width: Channels of the first stage (ResNet-18: 64); stages have w, 2w, 4w, 8w.
        fpn_channels: Channels of every pyramid level.
        groups: GroupNorm groups.
        stages: Which stages (1–4, strides 4–32) feed the pyramid.
        extra: ``p6p7`` (RetinaNet/FCOS: two more strided levels from P5) or ``pool``
            (Faster R-CNN: a max-pooled level for the RPN).
    """

    def __init__(
        self,
        in_channels: int,
        width: int,
        fpn_channels: int,
        groups: int,
        stages: tuple[int, ...],
        extra: Extra,
    ) -> None:
        super().__init__()
        ensure_torchvision_ops()
        from torchvision.models.resnet import BasicBlock
        from torchvision.ops.feature_pyramid_network import (
            FeaturePyramidNetwork,
            LastLevelMaxPool,
            LastLevelP6P7,
        )

        norm = group_norm(groups)
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False),
            norm(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        chans = [width * 2**i for i in range(4)]
        self.stages = nn.ModuleList()
        prev = width
        for i, c in enumerate(chans):
            stride = 1 if i == 0 else 2
            down = None
            if stride != 1 or prev != c:
                down = nn.Sequential(nn.Conv2d(prev, c, 1, stride=stride, bias=False), norm(c))
            self.stages.append(
                nn.Sequential(
                    BasicBlock(prev, c, stride, down, norm_layer=norm),
                    BasicBlock(c, c, norm_layer=norm),
                )
            )
            prev = c
        self.returned = tuple(s - 1 for s in stages)
        blocks = (
            LastLevelP6P7(fpn_channels, fpn_channels) if extra == "p6p7" else LastLevelMaxPool()
        )
        self.fpn = FeaturePyramidNetwork(
            [chans[i] for i in self.returned], fpn_channels, extra_blocks=blocks, norm_layer=norm
        )
        self.out_channels = fpn_channels

    def forward(self, x: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        """``[B, C, H, W]`` → pyramid levels ``"0"``, ``"1"``, … (finest first)."""
        feats: OrderedDict[str, torch.Tensor] = OrderedDict()
        x = self.stem(x)
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.returned:
                feats[str(len(feats))] = x
        out: OrderedDict[str, torch.Tensor] = self.fpn(feats)
        return out
