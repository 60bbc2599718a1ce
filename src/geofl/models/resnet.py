"""ResNet-18 adapted to small remote-sensing patches and any number of input bands.

Following the usual adaptation for 32–64 px inputs, the 7×7/2 stem and its max-pool are
replaced by one 3×3/1 convolution, so a 64×64 patch reaches the last stage at 8×8 instead of
2×2. Stage widths 64/128/256/512 with two basic blocks each (He et al., 2016). No
torchvision dependency.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from geofl.models.base import MODELS
from geofl.models.init import init_parameters
from geofl.models.norm import Norm, make_norm

__all__ = ["ResNet18", "ResNetParams"]


class ResNetParams(BaseModel):
    """Parameters of :class:`ResNet18`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    width: int = Field(64, ge=4, description="channels of the first stage (64 in ResNet-18)")
    norm: Norm = Field("group", description="normalisation layer: group, batch or none")
    small_input_stem: bool = Field(
        True, description="3×3/1 stem without max-pool (for ≤ 64 px patches)"
    )


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with an identity (or 1×1 projection) shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: Norm) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.n1 = make_norm(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.n2 = make_norm(norm, c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), make_norm(norm, c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, c_in, H, W]`` → ``[B, c_out, H/stride, W/stride]``."""
        out = torch.relu(self.n1(self.conv1(x)))
        return torch.relu(self.n2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for ``[B, in_channels, H, W]`` patches → logits ``[B, num_classes]``."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        width: int = 64,
        norm: Norm = "group",
        small_input_stem: bool = True,
    ) -> None:
        super().__init__()
        if small_input_stem:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 3, 1, 1, bias=False),
                make_norm(norm, width),
                nn.ReLU(inplace=True),
            )
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 7, 2, 3, bias=False),
                make_norm(norm, width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2, 1),
            )
        stages: list[nn.Module] = []
        c_in = width
        for i in range(4):
            c_out = width * 2**i
            stride = 1 if i == 0 else 2
            stages += [BasicBlock(c_in, c_out, stride, norm), BasicBlock(c_out, c_out, 1, norm)]
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_classes]`` (input moved to channels-last, faster on CPU)."""
        x = x.contiguous(memory_format=torch.channels_last)
        out: torch.Tensor = self.head(self.stages(self.stem(x)).mean(dim=(2, 3)))
        return out


@MODELS.register("resnet18", params=ResNetParams, traits=("images",))
def build_resnet18(
    params: ResNetParams, *, in_channels: int, num_classes: int, generator: torch.Generator
) -> nn.Module:
    """ResNet-18 (11.2M parameters at width 64) for any band count."""
    model = ResNet18(
        in_channels,
        num_classes,
        width=params.width,
        norm=params.norm,
        small_input_stem=params.small_input_stem,
    )
    init_parameters(model, generator)
    return model
