"""Lightweight spectral attention for multispectral CNNs (FL-SPDP, 001 §6.1.2).

001 §6.1.2 adds "a lightweight spectral attention module after the second residual block"
of its 12-band ResNet-18 "to improve spectral feature fusion" and says nothing more. What
it leaves open, and what geofl chooses:

* **Where.** "After the second residual block" reads as either the second ``BasicBlock``
  (the end of ``layer1``) or the second residual *stage* (``layer2``). geofl puts it after
  ``layer2``: its 128 channels at 1/8 of the input resolution (default stem) are mixtures of
  every band that already carry spatial context, which is what a "fusion" gate can weigh,
  and it costs ~2k parameters there.
* **What it attends over.** The input bands themselves (12–13 numbers per pixel) or the
  feature channels derived from them. geofl gates the feature channels of ``layer2`` — the
  "spectral" axis of the feature map after the stem has mixed the bands — with a
  squeeze-and-excitation block (Hu et al. 2018): global average pool → linear → ReLU →
  linear → gate, one gate per channel and sample.
* **Gate and initialisation.** SE's gate σ(z) ∈ (0, 1) halves every activation at a
  zero input and would change a pretrained backbone's function. geofl's gate is 2σ(z) ∈
  (0, 2) and the second linear layer starts at zero, so the module is the **identity at
  initialisation** (z ≡ 0 → gate ≡ 1): a model with attention computes exactly the
  function of the same backbone without it until training moves the gate, and weights
  loaded from a plain ResNet-18 (torchgeo's Sentinel-2 ResNet-18) keep their meaning.
* **Reduction.** The hidden width is ``max(4, C // reduction)`` with ``reduction`` 16 (SE's
  default): 8 for ResNet-18's 128 channels.

The module is a per-sample function of its input (no batch statistics, no in-place
writes, no data-dependent Python branches), so it runs under ``torch.func.vmap`` for the
per-sample gradients of DP-SGD.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SpectralAttention"]

#: Smallest hidden width of the excitation MLP.
MIN_HIDDEN = 4


class SpectralAttention(nn.Module):
    """Squeeze-and-excitation over channels with a 2σ gate, identity at initialisation.

    ``[B, C, H, W]`` → ``[B, C, H, W]``: ``y = x ⊙ 2σ(W₂ ReLU(W₁ mean_{H,W}(x) + b₁) + b₂)``
    with ``W₁: [h, C]``, ``W₂: [C, h]``, ``h = max(4, C // reduction)``.

    Args:
        channels: C.
        reduction: Channel reduction of the hidden layer (16, as in SE).
    """

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        hidden = max(MIN_HIDDEN, channels // reduction)
        self.fc1 = nn.Linear(channels, hidden)
        self.fc2 = nn.Linear(hidden, channels)

    def reset_gate(self) -> None:
        """Zero ``fc2`` so that the gate is 1 everywhere (the module is the identity)."""
        with torch.no_grad():
            self.fc2.weight.zero_()
            self.fc2.bias.zero_()

    def gate(self, x: torch.Tensor) -> torch.Tensor:
        """Per-sample channel gates ``[B, C]`` in (0, 2) for features ``[B, C, H, W]``."""
        z = self.fc2(torch.relu(self.fc1(x.mean(dim=(2, 3)))))
        return 2.0 * torch.sigmoid(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x ⊙ gate(x)``, shape ``[B, C, H, W]`` as the input."""
        return x * self.gate(x)[:, :, None, None]
