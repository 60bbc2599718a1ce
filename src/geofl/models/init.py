"""Seeded weight initialisation (no global RNG).

``torch.nn`` layers initialise themselves from the global RNG on construction; geofl
re-initialises every layer from an explicit generator right after, with the same
distributions PyTorch uses by default (Kaiming-uniform with a = √5 for conv/linear weights,
uniform ±1/√fan_in for biases, ones/zeros for norm layers).
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["init_parameters"]


def init_parameters(module: nn.Module, generator: torch.Generator) -> None:
    """Re-initialise every conv, linear and norm layer of ``module`` from ``generator``."""
    with torch.no_grad():
        for mod in module.modules():
            if isinstance(mod, nn.Conv2d | nn.Linear):
                nn.init.kaiming_uniform_(mod.weight, a=math.sqrt(5), generator=generator)
                if mod.bias is not None:
                    fan_in = mod.weight[0].numel()
                    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                    nn.init.uniform_(mod.bias, -bound, bound, generator=generator)
            elif isinstance(mod, nn.GroupNorm | nn.BatchNorm2d | nn.LayerNorm):
                if mod.weight is not None:
                    nn.init.ones_(mod.weight)
                if mod.bias is not None:
                    nn.init.zeros_(mod.bias)
