"""Normalisation-layer choice shared by the model families.

GroupNorm is the default: it has no running statistics, so it behaves identically under
non-IID client data and under DP-SGD (Opacus rejects BatchNorm). BatchNorm's running
statistics travel with the flat parameter vector and are averaged like weights.
"""

from __future__ import annotations

from typing import Literal

from torch import nn

__all__ = ["Norm", "make_norm"]

Norm = Literal["group", "batch", "none"]


def make_norm(kind: Norm, channels: int, groups: int = 8) -> nn.Module:
    """A 2-D normalisation layer for ``channels`` feature maps."""
    if kind == "group":
        g = groups
        while channels % g:
            g -= 1
        return nn.GroupNorm(g, channels)
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    return nn.Identity()
