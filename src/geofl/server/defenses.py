"""Defenses: score or filter a round's updates before weighting (``[K, D]`` → keep ``[K]``).

Later papers add the cosine-MAD filter (004 Eq. 6–7) and FLAME here.
"""

from __future__ import annotations

from typing import Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.registry import Registry

__all__ = ["DEFENSES", "Defense", "NormBoundParams", "norm_bound_mask"]


class Defense(Protocol):
    """Return a ``[K]`` bool mask of updates to keep."""

    def __call__(self, updates: torch.Tensor) -> torch.Tensor: ...


#: Defense registry: ``norm_bound``, ...
DEFENSES: Registry[Defense] = Registry("defense")


def norm_bound_mask(updates: torch.Tensor, factor: float) -> torch.Tensor:
    """Keep updates whose L2 norm is at most ``factor`` × the round's median norm.

    Args:
        updates: ``[K, D]``.
        factor: Multiple of the median norm above which an update is dropped (> 0).

    Returns:
        ``[K]`` bool mask (True = keep).
    """
    norms = torch.linalg.vector_norm(updates, dim=1)
    keep: torch.Tensor = norms <= factor * norms.median()
    return keep


class NormBoundParams(BaseModel):
    """Parameters of the ``norm_bound`` defense."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    factor: float = Field(3.0, gt=0.0, description="drop updates above factor × median norm")


@DEFENSES.register("norm_bound", params=NormBoundParams)
def build_norm_bound(params: NormBoundParams) -> Defense:
    """Drop updates whose norm exceeds a multiple of the round's median norm."""

    def defense(updates: torch.Tensor) -> torch.Tensor:
        return norm_bound_mask(updates, params.factor)

    return defense
