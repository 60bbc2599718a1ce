"""torchvision's ResNet-18 with a multispectral stem, the norm of choice and FL-SPDP's extras.

:class:`ResNet18` *is* ``torchvision.models.resnet.ResNet`` (a subclass):
``ResNet.__init__(BasicBlock, [2, 2, 2, 2], num_classes, norm_layer=...)`` builds the
network — stem, the four stages of torchvision's ``BasicBlock`` made by its own
``_make_layer`` (1×1-conv + norm shortcuts where the shape changes), pooling and ``fc`` —
and its own forward (``_forward_impl``) runs the plain network. geofl then changes only:

* ``conv1``: a convolution over ``in_channels`` bands (7×7/2, or 3×3/1 with
  ``small_input_stem``, whose ``maxpool`` becomes an identity);
* ``norm_layer``: :func:`~geofl.models.norm.make_norm` (GroupNorm by default, BatchNorm,
  or none), so the normalisation layers keep torchvision's names (``bn1``,
  ``downsample.1``) whatever they are;
* ``width`` ≠ 64 (``resnet18_spdp_small``): the stem norm, the four stages and ``fc`` are
  rebuilt at that width with torchvision's ``_make_layer`` (torchvision fixes 64);
* FL-SPDP's optional ``attention`` after ``layer2`` and ``dropout`` before ``fc``
  (001 §6.1.2), with a forward that adds them to torchvision's sequence.

Rebuilt or added modules take their place in the registration order (module tree, state
dict, flat parameter vector, seeded-initialisation draws): conv1, bn1, relu, maxpool,
layer1, layer2, [attention], layer3, layer4, avgpool, [dropout], fc — the forward order.
The model is built on the meta device by the caller, so torchvision's own
initialisation (global RNG) draws nothing; :func:`geofl.models.resnet.init_resnet`
writes every tensor from a seeded generator.

Importing this module imports torchvision (through
:func:`~geofl.models.detection.tvops.ensure_torchvision_ops`, which makes that work beside a
CPU-only torch), so :mod:`geofl.models.resnet` imports it only when a ResNet is built.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from geofl.models.attention import SpectralAttention
from geofl.models.base import channels_last
from geofl.models.detection.tvops import ensure_torchvision_ops
from geofl.models.mlp import GeneratorDropout
from geofl.models.norm import Norm, make_norm

ensure_torchvision_ops()

from torchvision.models.resnet import BasicBlock as _TorchvisionBasicBlock  # noqa: E402
from torchvision.models.resnet import ResNet  # noqa: E402

__all__ = ["BasicBlock", "ResNet18"]


class BasicBlock(_TorchvisionBasicBlock):  # type: ignore[misc]  # torchvision is untyped
    """torchvision's ``BasicBlock`` (same modules, names, init and values) whose residual
    sum is out of place (``out = out + identity`` where torchvision writes ``out +=
    identity``), so the second norm layer's output is not modified after it is produced:
    the book-keeping DP-SGD engine (:mod:`geofl.client.bookkeeping`) reads every layer's
    recorded output in the backward pass and refuses outputs changed in place."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + identity
        result: torch.Tensor = self.relu(out)
        return result


#: Modules that follow the optional attention / dropout, moved after them on insertion.
_AFTER_ATTENTION = ("layer3", "layer4", "avgpool", "dropout", "fc")


class ResNet18(ResNet):  # type: ignore[misc]  # torchvision ships no type information
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
        norm_layer = partial(make_norm, norm, groups=groups)
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes, norm_layer=norm_layer)
        #: Channels-last inputs (off for hook-based per-sample gradients, see cnn.py).
        self.channels_last = True
        if small_input_stem:
            self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        if width != 64:
            self.bn1 = norm_layer(width)
            self.inplanes = width
            self.layer1 = self._make_layer(BasicBlock, width, 2)
            self.layer2 = self._make_layer(BasicBlock, 2 * width, 2, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 4 * width, 2, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 8 * width, 2, stride=2)
            self.fc = nn.Linear(8 * width * BasicBlock.expansion, num_classes)
        # Absent (not identities) when off, so the plain network's state dict and init
        # draws are torchvision's.
        self.attention: SpectralAttention | None = (
            SpectralAttention(2 * width, attention_reduction) if spectral_attention else None
        )
        self.dropout: GeneratorDropout | None = (
            GeneratorDropout(dropout, torch.Generator(device="cpu")) if dropout > 0 else None
        )
        if spectral_attention or dropout > 0:
            # registered last; move what follows them in the forward after them
            for name in _AFTER_ATTENTION:
                if name in self._modules:
                    self._modules[name] = self._modules.pop(name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_classes]`` for images ``[B, in_channels, H, W]``.

        The input is moved to channels-last layout (faster convolutions on CPU; the weights
        stay views of the flat vector). Without attention and dropout this is
        torchvision's forward. Any ``H, W`` ≥ 1 works: the global average pool makes the
        head independent of the patch size.
        """
        if self.channels_last:
            x = channels_last(x)
        if self.attention is None and self.dropout is None:  # fixed at build time
            out: torch.Tensor = self._forward_impl(x)
            return out
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        if self.attention is not None:
            x = self.attention(x)
        x = torch.flatten(self.avgpool(self.layer4(self.layer3(x))), 1)
        if self.dropout is not None:
            x = self.dropout(x)
        logits: torch.Tensor = self.fc(x)
        return logits
