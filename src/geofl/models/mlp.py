"""A multi-layer perceptron for tabular features ``[N, F]`` (paper 003's tabular tasks).

``len(hidden)`` × (linear → norm → activation → dropout), then a linear head of width
``num_classes`` (the task's ``num_outputs``: C logits, one logit for ``binary``, T values
for ``regression``). ``hidden: []`` is a linear model (logistic / linear regression).

**Dropout without the global RNG.** ``torch.nn.Dropout`` draws its masks from the global
generator, which geofl never uses. :class:`GeneratorDropout` draws them from a
``torch.Generator`` it holds:

* at build time each dropout layer gets its own generator, seeded from the builder's
  ``generator`` *after* the weights are initialised (so the weights do not depend on
  whether dropout is on), which makes a model used on its own deterministic;
* a trainer makes masks depend on (seed, round, client) only — what exact resume needs —
  by calling :func:`reseed_dropout` with a dedicated stream before each local training
  call, e.g. ``reseed_dropout(model, streams.torch("dropout"))``. It derives one seed per
  layer from that generator and touches nothing when the model has no dropout layer, so
  models without dropout keep bit-identical results.

With ``dropout: 0`` no dropout layer is built: the model is the same function with the
same weights as with dropout in eval mode.
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from geofl.errors import ConfigError
from geofl.models.base import MODELS
from geofl.models.init import init_parameters

__all__ = ["MLP", "GeneratorDropout", "MLPParams", "build_mlp", "reseed_dropout"]

Activation = Literal["relu", "gelu", "tanh"]
MlpNorm = Literal["none", "layer", "batch"]

_SEED_BOUND = 2**62


class MLPParams(BaseModel):
    """Parameters of :class:`MLP`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hidden: list[Annotated[int, Field(ge=1, le=65536, strict=True)]] = Field(
        default_factory=lambda: [256, 128],
        max_length=16,
        description="widths of the hidden layers; [] is a linear model",
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="drop probability after each layer")
    norm: MlpNorm = Field("none", description="per hidden layer: none, layer or batch")
    activation: Activation = Field("relu", description="relu, gelu or tanh")


class GeneratorDropout(nn.Module):
    """Inverted dropout (Srivastava et al. 2014) whose masks come from its own generator.

    In training, each element is kept with probability 1 − p and scaled by 1 / (1 − p),
    as ``torch.nn.Dropout``; in eval mode it is the identity.

    Args:
        p: Drop probability in [0, 1).
        generator: Source of the masks (see :func:`reseed_dropout`).
    """

    def __init__(self, p: float, generator: torch.Generator) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.generator = generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (any shape) with a fresh mask in training, unchanged in eval."""
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty_like(x).bernoulli_(1.0 - self.p, generator=self.generator)
        return x * keep / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def reseed_dropout(module: nn.Module, generator: torch.Generator) -> int:
    """Give every :class:`GeneratorDropout` in ``module`` a generator seeded from ``generator``.

    One 62-bit seed per layer is drawn from ``generator`` in module order; nothing is drawn
    when ``module`` has no dropout layer.

    Returns:
        The number of dropout layers reseeded.
    """
    layers = [m for m in module.modules() if isinstance(m, GeneratorDropout)]
    if not layers:
        return 0
    seeds = torch.randint(_SEED_BOUND, (len(layers),), generator=generator).tolist()
    for layer, seed in zip(layers, seeds, strict=True):
        layer.generator = torch.Generator(device="cpu").manual_seed(int(seed))
    return len(layers)


def _activation(kind: Activation) -> nn.Module:
    if kind == "gelu":
        return nn.GELU()
    if kind == "tanh":
        return nn.Tanh()
    return nn.ReLU()


def _norm(kind: MlpNorm, width: int) -> nn.Module:
    if kind == "layer":
        return nn.LayerNorm(width)
    if kind == "batch":
        return nn.BatchNorm1d(width)
    return nn.Identity()


class MLP(nn.Module):
    """Fully connected network on ``[B, F]`` features → ``[B, num_outputs]``.

    Args:
        in_features: F.
        num_outputs: Width of the head.
        hidden: Hidden layer widths.
        dropout: Drop probability after each hidden layer (0: no dropout layer).
        norm: Normalisation after each hidden linear layer (``batch``: its linear layer has
            no bias, which BatchNorm's shift makes redundant).
        activation: Non-linearity after each norm.
        generator: Seeds the dropout layers' generators (ignored without dropout).
    """

    def __init__(
        self,
        in_features: int,
        num_outputs: int,
        *,
        hidden: tuple[int, ...] = (256, 128),
        dropout: float = 0.0,
        norm: MlpNorm = "none",
        activation: Activation = "relu",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h, bias=norm != "batch"), _norm(norm, h)]
            layers.append(_activation(activation))
            if dropout > 0:
                layers.append(GeneratorDropout(dropout, torch.Generator(device="cpu")))
            width = h
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_outputs)
        if generator is not None:
            reseed_dropout(self, generator)

    def check_input(self, shape: tuple[int, ...]) -> None:
        """Refuse inputs that are not ``[B, in_features]`` with a one-line error.

        Raises:
            ConfigError: under ``model.name`` (image batches: use a CNN) or ``data``.
        """
        if len(shape) == 4:
            raise ConfigError(
                "model.name",
                f"the mlp model takes tabular [N, F] features, got images "
                f"[N, {', '.join(map(str, shape[1:]))}]; use a CNN (small_cnn or resnet18)",
            )
        if len(shape) != 2 or shape[1] != self.in_features:
            raise ConfigError(
                "data",
                f"the mlp model was built for [N, {self.in_features}] features, got "
                f"[{', '.join(['N', *map(str, shape[1:])])}]; rebuild it for these features",
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs ``[B, num_outputs]`` for features ``[B, F]``."""
        if x.ndim != 2 or x.shape[1] != self.in_features:
            self.check_input(tuple(x.shape))
        out: torch.Tensor = self.head(self.features(x))
        return out


@MODELS.register("mlp", params=MLPParams, traits=("tabular",))
def build_mlp(
    params: MLPParams, *, in_channels: int, num_classes: int, generator: torch.Generator
) -> nn.Module:
    """Multi-layer perceptron for tabular ``[N, F]`` features (``in_channels`` = F)."""
    model = MLP(
        in_channels,
        num_classes,
        hidden=tuple(params.hidden),
        dropout=params.dropout,
        norm=params.norm,
        activation=params.activation,
    )
    init_parameters(model, generator)
    reseed_dropout(model, generator)  # after the weights: they do not depend on dropout
    return model
