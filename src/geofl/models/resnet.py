"""ResNet-18 models: torchvision's network, any number of bands, GroupNorm by default.

The network is ``torchvision.models.resnet.ResNet`` with ``BasicBlock`` and
``[2, 2, 2, 2]`` (``torchvision.models.resnet18``), built with a ``norm_layer`` and a
``conv1`` over the data's bands (:class:`geofl.models.torchvision_resnet.ResNet18`, a
subclass that adds only the stem choice, a base width and FL-SPDP's optional layers), so the
state-dict names are torchvision's — ``conv1.weight``, ``bn1.weight``,
``layer1.0.conv1.weight``, ``layer2.0.downsample.0.weight``, …, ``fc.weight`` — the names
that torchvision, timm and torchgeo's Sentinel-2 ResNet-18 weights use (there, ``conv1``
takes 13 bands). With ``norm: batch`` the state dict equals torchvision's name for name
and shape for shape; with ``norm: group`` the normalisation layers keep their names
(``bn1``, ``downsample.1``) and lose the running statistics; with ``norm: none`` they are
identities and have no entries. ``tests/models/test_resnet.py`` checks names, shapes and
logits against ``torchvision.models.resnet18`` itself. Initialisation is geofl's, seeded
(:func:`init_resnet`: torchvision's rules, drawn from the run's generator instead of the
global RNG); torchvision is imported when a ResNet is first built, not with this module.

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

:class:`~geofl.models.torchvision_resnet.ResNet18` also takes a base ``width`` (64:
ResNet-18); the ``resnet18_spdp_small`` family uses 16 (1/16 of the FLOPs and parameters)
so that the paper's model trains on a laptop's CPU cores.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from torch import nn

from geofl.models.attention import SpectralAttention
from geofl.models.base import MODELS
from geofl.models.init import init_parameters
from geofl.models.mlp import reseed_dropout
from geofl.models.norm import Norm
from geofl.models.weights import check_weights_file, load_weights

__all__ = [
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
        return check_weights_file(value)


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
    from geofl.models.torchvision_resnet import ResNet18  # imports torchvision

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
