"""ResNet-18 in torchvision's layout, for any number of bands, GroupNorm by default.

The module tree is that of ``torchvision.models.resnet18(weights=None, num_classes=...)``
(``torchvision.models.resnet.ResNet`` with ``BasicBlock`` and ``[2, 2, 2, 2]``), so the
state-dict names are torchvision's — ``conv1.weight``, ``bn1.weight``,
``layer1.0.conv1.weight``, ``layer2.0.downsample.0.weight``, …, ``fc.weight`` — the names
that torchvision, timm and torchgeo's Sentinel-2 ResNet-18 weights use (there, ``conv1``
takes 13 bands). With ``norm: batch`` the state dict equals torchvision's name for name
and shape for shape; with ``norm: group`` the normalisation layers keep their names
(``bn1``, ``downsample.1``) and lose the running statistics; with ``norm: none`` they are
identities and have no entries. ``tests/models/test_resnet.py`` checks names, shapes and
logits against a reference written from torchvision 0.28.0's own ``models/resnet.py``.

Why the classes are written out rather than imported: torchvision 0.28.0 (the release of
torch 2.13.0) is published on PyPI only as a CUDA build (``0.28.0+cu130``), which cannot be
imported next to this project's CPU build of torch (``operator torchvision::nms does not
exist``); its CPU build lives only on PyTorch's own wheel index. The two classes below are
torchvision's ``BasicBlock`` and ``ResNet`` restricted to ResNet-18 (no groups, dilation or
bottlenecks), with three changes: ``conv1`` takes ``in_channels`` bands; an optional small
stem; and seeded initialisation (torchvision initialises from the global RNG).

Stem, for an input ``[B, in_channels, H, W]``:

* default (torchvision's): 7×7/2 conv → norm → ReLU → 3×3/2 max-pool, so ``layer1`` sees
  ``[B, 64, H/4, W/4]`` and ``layer4`` ``[B, 512, H/32, W/32]`` (2×2 for 64 px);
* ``small_input_stem`` (for ≤ 64 px patches, the usual CIFAR/EuroSAT adaptation): 3×3/1
  conv → norm → ReLU, no max-pool (``maxpool`` is an identity), so ``layer1`` sees
  ``[B, 64, H, W]`` and ``layer4`` ``[B, 512, H/8, W/8]`` (8×8 for 64 px; 16× the FLOPs).

GroupNorm uses ``norm_groups`` groups (32 by default, Wu & He 2018) in every layer: the
widths 64/128/256/512 are all multiples of 64, so any divisor of 64 splits each layer evenly.

FL-SPDP's additions (001 §6.1.2), both off by default (the network is then exactly the one
above, weights drawn identically):

* ``spectral_attention``: a :class:`~geofl.models.attention.SpectralAttention` gate on the
  channels of ``layer2``'s output (``attention.fc1``/``attention.fc2``; identity at
  initialisation, so loaded backbone weights keep their function);
* ``dropout``: inverted dropout with probability p on the pooled ``[B, 512]`` features
  before ``fc`` (the paper's p = 0.3), its masks drawn from the layer's own generator
  (:class:`~geofl.models.mlp.GeneratorDropout`, never the global RNG). Under
  ``torch.func.vmap`` in training mode it needs ``randomness="different"`` (one mask per
  sample, as without vmap) or ``"same"``; in eval mode it is the identity.

The paper keeps BatchNorm "synchronized across clients"; geofl's default is GroupNorm,
because BatchNorm's batch statistics mix samples, which per-sample DP-SGD gradients cannot
allow (Opacus refuses BatchNorm for the same reason), and its running statistics would be
non-private aggregates of client data.

:class:`ResNet18` also takes a base ``width`` (64: ResNet-18); the ``resnet18_spdp_small``
family uses 16 (1/16 of the FLOPs and parameters) so that the paper's model trains on a
laptop's CPU cores.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from torch import nn

from geofl.models.attention import SpectralAttention
from geofl.models.base import MODELS, channels_last
from geofl.models.init import init_parameters
from geofl.models.mlp import GeneratorDropout, reseed_dropout
from geofl.models.norm import Norm, make_norm
from geofl.models.weights import load_weights, read_state_dict

__all__ = [
    "BasicBlock",
    "ResNet18",
    "ResNetParams",
    "SpdpResNetParams",
    "SpdpResNetSmallParams",
    "build_resnet18",
    "build_resnet18_spdp",
    "build_resnet18_spdp_small",
    "init_resnet",
]


class ResNetParams(BaseModel):
    """Parameters of :class:`ResNet18`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    norm: Norm = Field("group", description="normalisation layer: group, batch or none")
    norm_groups: int = Field(32, ge=1, le=64, description="GroupNorm groups; must divide 64")
    small_input_stem: bool = Field(
        False, description="3×3/1 stem without max-pool (for ≤ 64 px patches)"
    )
    weights: str | None = Field(
        None,
        description="initial weights: path of a local state dict or checkpoint "
        "(torchvision/timm/torchgeo ResNet-18 layout)",
    )
    spectral_attention: bool = Field(
        False, description="channel gate after layer2, identity at init (001 §6.1.2)"
    )
    attention_reduction: int = Field(
        16, ge=1, le=128, description="hidden width of the attention: max(4, 128 // this)"
    )
    dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="drop probability before fc (001 §6.1.2: 0.3)"
    )

    @field_validator("norm_groups")
    @classmethod
    def _groups_divide_widths(cls, value: int) -> int:
        if 64 % value:
            raise ValueError(f"{value} does not divide 64; use 1, 2, 4, 8, 16, 32 or 64")
        return value

    @field_validator("weights")
    @classmethod
    def _weights_file_holds_a_state_dict(cls, value: str | None) -> str | None:
        """At config load: the file exists and holds a state dict (shapes: at build)."""
        if value is None:
            return value
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(
                f"no file {value!r}; give the path of a state dict saved with torch.save"
            )
        read_state_dict(path)
        return value


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock``: two 3×3 convs and an identity or 1×1 shortcut.

    ``[B, inplanes, H, W]`` → ``[B, planes, H/stride, W/stride]``. Submodules ``conv1``,
    ``bn1``, ``relu``, ``conv2``, ``bn2`` and ``downsample`` (None, or 1×1 conv + norm).
    """

    expansion: int = 1

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        *,
        norm: Norm = "group",
        groups: int = 32,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = make_norm(norm, planes, groups)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = make_norm(norm, planes, groups)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, inplanes, H, W]`` → ``[B, planes, H/stride, W/stride]``."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + identity  # out of place: the bk DP engine records bn2's output
        result: torch.Tensor = self.relu(out)
        return result


class ResNet18(nn.Module):
    """ResNet-18 for ``[B, in_channels, H, W]`` patches → logits ``[B, num_classes]``.

    Args:
        in_channels: Input bands (``conv1``'s input channels).
        num_classes: Output logits (``fc``'s output features).
        norm: ``group`` (default), ``batch`` or ``none``.
        groups: GroupNorm groups per layer (a divisor of ``width``).
        small_input_stem: 3×3/1 ``conv1`` and no max-pool instead of 7×7/2 + max-pool.
        width: Channels of the stem and ``layer1``; ``layer2``–``layer4`` have 2, 4 and 8
            times as many (64: ResNet-18).
        spectral_attention: Gate ``layer2``'s ``[B, 2·width, ·, ·]`` output with a
            :class:`~geofl.models.attention.SpectralAttention` (module ``attention``).
        attention_reduction: Its channel reduction.
        dropout: Drop probability on the pooled features before ``fc`` (0: no layer).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        norm: Norm = "group",
        groups: int = 32,
        small_input_stem: bool = False,
        width: int = 64,
        spectral_attention: bool = False,
        attention_reduction: int = 16,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        #: Channels-last inputs (off for hook-based per-sample gradients, see cnn.py).
        self.channels_last = True
        self.inplanes = width
        if small_input_stem:
            self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = make_norm(norm, width, groups)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool: nn.Module = nn.Identity() if small_input_stem else nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(width, 1, norm, groups)
        self.layer2 = self._make_layer(2 * width, 2, norm, groups)
        # Registered here, between the stages it sits between, so that seeded init draws
        # follow the forward order; absent (not an identity) when off, so the state dict
        # and the init draws of the plain network are unchanged.
        self.attention: SpectralAttention | None = (
            SpectralAttention(2 * width, attention_reduction) if spectral_attention else None
        )
        self.layer3 = self._make_layer(4 * width, 2, norm, groups)
        self.layer4 = self._make_layer(8 * width, 2, norm, groups)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout: GeneratorDropout | None = (
            GeneratorDropout(dropout, torch.Generator(device="cpu")) if dropout > 0 else None
        )
        self.fc = nn.Linear(8 * width * BasicBlock.expansion, num_classes)

    def _make_layer(self, planes: int, stride: int, norm: Norm, groups: int) -> nn.Sequential:
        """Two basic blocks; the first projects the shortcut when the shape changes."""
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                make_norm(norm, planes, groups),
            )
        first = BasicBlock(self.inplanes, planes, stride, downsample, norm=norm, groups=groups)
        self.inplanes = planes
        return nn.Sequential(first, BasicBlock(planes, planes, norm=norm, groups=groups))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_classes]`` for images ``[B, in_channels, H, W]``.

        The input is moved to channels-last layout (faster convolutions on CPU; the weights
        stay views of the flat vector). Any ``H, W`` ≥ 1 works: the global average pool
        makes the head independent of the patch size.
        """
        if self.channels_last:
            x = channels_last(x)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        if self.attention is not None:  # fixed at build time, not data-dependent
            x = self.attention(x)
        x = torch.flatten(self.avgpool(self.layer4(self.layer3(x))), 1)
        if self.dropout is not None:
            x = self.dropout(x)
        out: torch.Tensor = self.fc(x)
        return out


def init_resnet(model: nn.Module, generator: torch.Generator) -> None:
    """torchvision's ResNet initialisation, drawn from ``generator`` instead of the global RNG.

    Convolutions: Kaiming-normal (fan-out, ReLU gain); norm layers: weight 1, bias 0,
    running statistics reset; ``fc`` and the attention's linear layers: PyTorch's
    ``nn.Linear`` default (as torchvision leaves ``fc``), then the attention's gate zeroed
    (identity at init). Every tensor is written, so the model may come from the meta device.

    Raises:
        TypeError: A module with parameters or buffers this function does not know.
    """
    with torch.no_grad():
        for name, mod in model.named_modules():
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(
                    mod.weight, mode="fan_out", nonlinearity="relu", generator=generator
                )
            elif isinstance(mod, nn.Linear):
                init_parameters(mod, generator)  # PyTorch's nn.Linear default
            elif isinstance(mod, nn.GroupNorm | nn.BatchNorm2d):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)
                if isinstance(mod, nn.BatchNorm2d):
                    mod.reset_running_stats()
            elif any(True for _ in mod.parameters(recurse=False)) or any(
                True for _ in mod.buffers(recurse=False)
            ):
                raise TypeError(f"init_resnet: no rule for {name} ({type(mod).__name__})")
        for mod in model.modules():
            if isinstance(mod, SpectralAttention):
                mod.reset_gate()


def _build(
    params: ResNetParams, in_channels: int, num_classes: int, width: int, gen: torch.Generator
) -> nn.Module:
    """Build on the meta device, initialise from ``gen``, then load ``weights`` if set."""
    with torch.device("meta"):
        model = ResNet18(
            in_channels,
            num_classes,
            norm=params.norm,
            groups=params.norm_groups,
            small_input_stem=params.small_input_stem,
            width=width,
            spectral_attention=params.spectral_attention,
            attention_reduction=params.attention_reduction,
            dropout=params.dropout,
        )
    model.to_empty(device="cpu")
    init_resnet(model, gen)
    reseed_dropout(model, gen)  # after the weights: they do not depend on dropout
    if params.weights is not None:
        load_weights(model, Path(params.weights).expanduser(), field="model.params.weights")
    return model


@MODELS.register("resnet18", params=ResNetParams, traits=("images",))
def build_resnet18(
    params: ResNetParams, *, in_channels: int, num_classes: int, generator: torch.Generator
) -> nn.Module:
    """ResNet-18, torchvision layout (11.2M parameters at 13 bands and 10 classes).

    Built on the meta device (no global-RNG draws, no wasted default init), then every
    tensor is initialised from ``generator``; with ``weights`` set, the file is loaded over
    that (see :func:`geofl.models.weights.load_weights` for the mapping rules).
    """
    return _build(params, in_channels, num_classes, 64, generator)


class SpdpResNetParams(ResNetParams):
    """:class:`ResNetParams` with FL-SPDP's model as the defaults (001 §6.1.2)."""

    spectral_attention: bool = Field(True, description="channel gate after layer2 (001 §6.1.2)")
    dropout: float = Field(0.3, ge=0.0, lt=1.0, description="drop probability before fc")


class SpdpResNetSmallParams(SpdpResNetParams):
    """:class:`SpdpResNetParams` at a quarter of the width, for CPU runs."""

    width: int = Field(16, ge=4, le=64, description="stem and layer1 channels (ResNet-18: 64)")
    norm_groups: int = Field(8, ge=1, le=64, description="GroupNorm groups; must divide width")

    @model_validator(mode="after")
    def _groups_divide_width(self) -> SpdpResNetSmallParams:
        if self.norm == "group" and self.width % self.norm_groups:
            raise ValueError(
                f"norm_groups {self.norm_groups} does not divide width {self.width}; "
                "use a divisor of the width"
            )
        return self


@MODELS.register("resnet18_spdp", params=SpdpResNetParams, traits=("images",))
def build_resnet18_spdp(
    params: SpdpResNetParams, *, in_channels: int, num_classes: int, generator: torch.Generator
) -> nn.Module:
    """FL-SPDP's ResNet-18 (001 §6.1.2): spectral attention after layer2, dropout 0.3, GroupNorm.

    ``resnet18`` with ``spectral_attention: true`` and ``dropout: 0.3`` as defaults
    (11.2M parameters + 2.2k for the attention at 13 bands and 10 classes).
    """
    return _build(params, in_channels, num_classes, 64, generator)


@MODELS.register("resnet18_spdp_small", params=SpdpResNetSmallParams, traits=("images",))
def build_resnet18_spdp_small(
    params: SpdpResNetSmallParams,
    *,
    in_channels: int,
    num_classes: int,
    generator: torch.Generator,
) -> nn.Module:
    """``resnet18_spdp`` at base width 16 (~0.7M parameters, 1/16 of the FLOPs) for CPUs.

    Same layout, stages and modules as ``resnet18_spdp``; every layer has a quarter of the
    channels (16/32/64/128), GroupNorm 8 groups.
    """
    return _build(params, in_channels, num_classes, params.width, generator)
