"""Training-time augmentations of multispectral patches (001 §6.1.2).

Each augmentation is a pure, batched transform ``[B, C, H, W] → [B, C, H, W]`` drawing only
from an explicit ``torch.Generator`` (the client's ``augment`` stream, derived from
(seed, round, client, "augment")), so the batch schedule's draws are untouched. The input
is never modified; every draw is one vectorised call (no loop over samples or bands).

**Space.** 001 §6.1.2 applies the transforms "after reflectance normalization to [0, 1]":
its magnitudes (noise σ = 0.01, dropout to 0) are in reflectance units. Our trainer sees
standardised inputs, so :class:`AugmentPipeline` maps a batch back with the train split's
per-band statistics (``x·std + mean``, the stored reflectance-like values), applies the
transforms there, and standardises again. With ``data.normalize: none`` it acts on the
inputs as stored.

**Seasonal swap** (001 §6.1.2: "for multi-temporal SEN12MS samples, we randomly select one
acquisition among available seasons ... and swap season pairs with probability 0.5") needs
several acquisitions of the same patch. :func:`seasonal_swap` takes them stacked on the
band axis, S blocks of C/S bands (``[B, S·C_s, H, W]``, block 0 the acquisition the model
treats as current): per sample it draws a pair of distinct seasons and, with probability p,
exchanges their blocks — so block 0 holds a randomly selected season and the order of the
acquisitions is no cue. It never pairs different locations, which is why it refuses data
whose band count is not a multiple of S. The bundled sources hold one acquisition per patch
(``season`` is metadata, not a second image), so for them the paper's own proxy,
illumination/contrast jitter (:func:`illumination_contrast`), stands in.

Example:
    >>> pipe = build_pipeline([("band_dropout", {"p": 0.5})])
    >>> y = pipe(torch.ones(2, 3, 4, 4), torch.Generator().manual_seed(0))
    >>> tuple(y.shape)
    (2, 3, 4, 4)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from geofl.models.base import MODELS
from geofl.registry import CheckContext, Registry

__all__ = [
    "AUGMENTATIONS",
    "AugmentPipeline",
    "Augmentation",
    "band_dropout",
    "band_jitter",
    "build_pipeline",
    "gaussian_noise",
    "illumination_contrast",
    "seasonal_swap",
]

#: ``x, generator → augmented copy of x``.
Augmentation = Callable[[torch.Tensor, torch.Generator], torch.Tensor]

#: ``(params) -> Augmentation``; keys are the names in ``train.augment``.
AUGMENTATIONS: Registry[Augmentation] = Registry("augmentation")


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JitterParams(_Params):
    """Per-band factor s_b ~ U[low, high] (001 §6.1.2: U[0.9, 1.1])."""

    low: float = Field(0.9, gt=0.0)
    high: float = Field(1.1, gt=0.0)

    @model_validator(mode="after")
    def _ordered(self) -> JitterParams:
        if self.low > self.high:
            raise ValueError(f"low {self.low:g} > high {self.high:g}; give low ≤ high")
        return self


class NoiseParams(_Params):
    """Additive N(0, std²) per value (001 §6.1.2: std 0.01)."""

    std: float = Field(0.01, ge=0.0)


class DropoutParams(_Params):
    """Each band of each sample set to 0 with probability p (001 §6.1.2: 0.1)."""

    p: float = Field(0.1, ge=0.0, lt=1.0)


class IlluminationParams(_Params):
    """Gain g ~ U[1 − brightness, 1 + brightness] per sample, contrast c ~ U[1 − contrast,
    1 + contrast] per sample about each band's spatial mean (magnitudes not in the paper)."""

    brightness: float = Field(0.1, ge=0.0, lt=1.0)
    contrast: float = Field(0.1, ge=0.0, lt=1.0)


class SeasonalSwapParams(_Params):
    """S acquisitions stacked on the band axis; swap probability p (001 §6.1.2: 0.5)."""

    seasons: int = Field(4, ge=2, description="S: acquisitions per patch, stacked on bands")
    p: float = Field(0.5, ge=0.0, le=1.0, description="probability of a swap per sample")


def _uniform(
    shape: tuple[int, ...], low: float, high: float, gen: torch.Generator, like: torch.Tensor
) -> torch.Tensor:
    u = torch.rand(shape, generator=gen, dtype=like.dtype, device=like.device)
    return u.mul_(high - low).add_(low)


def band_jitter(x: torch.Tensor, gen: torch.Generator, low: float, high: float) -> torch.Tensor:
    """Per-band multiplicative jitter x_b ← s_b·x_b, s_b ~ U[low, high] (001 §6.1.2).

    Args:
        x: ``[B, C, H, W]`` batch (not modified).
        gen: Source of the ``[B, C]`` factors (one per sample and band).
        low: Lower bound of s_b.
        high: Upper bound of s_b.

    Returns:
        The jittered copy.
    """
    b, c = x.shape[:2]
    return x * _uniform((b, c, 1, 1), low, high, gen, x)


def gaussian_noise(x: torch.Tensor, gen: torch.Generator, std: float) -> torch.Tensor:
    """Additive noise x ← x + N(0, std²) on every value (001 §6.1.2, std 0.01).

    Args:
        x: Batch of any shape (not modified).
        gen: Source of the noise.
        std: Standard deviation.

    Returns:
        The noisy copy.
    """
    noise = torch.randn(x.shape, generator=gen, dtype=x.dtype, device=x.device)
    return x + noise.mul_(std)


def band_dropout(x: torch.Tensor, gen: torch.Generator, p: float) -> torch.Tensor:
    """Random band dropout: x_b ← 0 for whole bands with probability p (001 §6.1.2).

    Args:
        x: ``[B, C, H, W]`` batch (not modified).
        gen: Source of the ``[B, C]`` Bernoulli draws.
        p: Drop probability per sample and band.

    Returns:
        The copy with dropped bands zeroed.
    """
    b, c = x.shape[:2]
    u = torch.rand((b, c, 1, 1), generator=gen, device=x.device)
    return x * (u >= p).to(x.dtype)


def illumination_contrast(
    x: torch.Tensor, gen: torch.Generator, brightness: float, contrast: float
) -> torch.Tensor:
    """Illumination/contrast jitter, the paper's proxy for seasonal radiometry shift
    (001 §6.1.2): x ← g·(μ + c·(x − μ)), μ each band's spatial mean.

    Args:
        x: ``[B, C, H, W]`` batch (not modified).
        gen: Source of the per-sample gain g and contrast c (``[B]`` each).
        brightness: g ~ U[1 − brightness, 1 + brightness].
        contrast: c ~ U[1 − contrast, 1 + contrast].

    Returns:
        The jittered copy.
    """
    b = x.shape[0]
    g = _uniform((b, 1, 1, 1), 1 - brightness, 1 + brightness, gen, x)
    c = _uniform((b, 1, 1, 1), 1 - contrast, 1 + contrast, gen, x)
    mu = x.mean(dim=(2, 3), keepdim=True)
    return (mu + c * (x - mu)) * g


def seasonal_swap(x: torch.Tensor, gen: torch.Generator, seasons: int, p: float) -> torch.Tensor:
    """Swap a random pair of season blocks per sample with probability p (001 §6.1.2).

    Args:
        x: ``[B, S·C_s, H, W]`` batch of S same-location acquisitions stacked on the band
            axis (not modified).
        gen: Source of the per-sample pair ``[B, 2]`` and swap draws ``[B]``.
        seasons: S.
        p: Swap probability.

    Returns:
        The copy with the two blocks exchanged where the draw fell below p.

    Raises:
        ValueError: If the band count is not a multiple of ``seasons``.
    """
    b, c = x.shape[:2]
    if c % seasons:
        raise ValueError(
            f"seasonal_swap: {c} bands do not split into seasons={seasons} acquisitions; "
            "set seasons to the number of stacked acquisitions"
        )
    first = torch.randint(0, seasons, (b,), generator=gen, device=x.device)
    # a second season ≠ first: offset 1 … S − 1, so every distinct pair is equally likely
    offset = torch.randint(1, seasons, (b,), generator=gen, device=x.device)
    second = (first + offset) % seasons
    swap = torch.rand((b,), generator=gen, device=x.device) < p
    order = torch.arange(seasons, device=x.device).expand(b, seasons).clone()
    rows = torch.arange(b, device=x.device)[swap]
    order[rows, first[swap]] = second[swap]
    order[rows, second[swap]] = first[swap]
    blocks = x.reshape(b, seasons, c // seasons, *x.shape[2:])
    index = order.view(b, seasons, *([1] * (blocks.dim() - 2))).expand_as(blocks)
    return torch.gather(blocks, 1, index).reshape(x.shape)


def _images_only(key: str) -> Callable[[Any, CheckContext], None]:
    """A load-time check refusing a tabular model (``[B, F]`` inputs have no bands)."""

    def check(_: Any, ctx: CheckContext) -> None:
        model = str(ctx.experiment.get("model", {}).get("name", ""))
        if "tabular" in MODELS.traits(model):
            ctx.fail(
                "name",
                f"{key} transforms image bands [B, C, H, W]; model {model!r} takes tabular "
                "features [B, F]; remove it from train.augment",
            )

    return check


@AUGMENTATIONS.register(
    "band_jitter", params=JitterParams, traits=("images",), check=_images_only("band_jitter")
)
def build_band_jitter(p: JitterParams) -> Augmentation:
    """Per-band multiplicative jitter U[low, high] (001 §6.1.2)."""
    return lambda x, gen: band_jitter(x, gen, p.low, p.high)


@AUGMENTATIONS.register("gaussian_noise", params=NoiseParams)
def build_gaussian_noise(p: NoiseParams) -> Augmentation:
    """Additive Gaussian noise N(0, std²) (001 §6.1.2)."""
    return lambda x, gen: gaussian_noise(x, gen, p.std)


@AUGMENTATIONS.register(
    "band_dropout", params=DropoutParams, traits=("images",), check=_images_only("band_dropout")
)
def build_band_dropout(p: DropoutParams) -> Augmentation:
    """Whole-band dropout with probability p (001 §6.1.2)."""
    return lambda x, gen: band_dropout(x, gen, p.p)


@AUGMENTATIONS.register(
    "illumination_contrast",
    params=IlluminationParams,
    traits=("images",),
    check=_images_only("illumination_contrast"),
)
def build_illumination_contrast(p: IlluminationParams) -> Augmentation:
    """Illumination/contrast jitter, proxy for seasonal radiometry shift (001 §6.1.2)."""
    return lambda x, gen: illumination_contrast(x, gen, p.brightness, p.contrast)


@AUGMENTATIONS.register(
    "seasonal_swap",
    params=SeasonalSwapParams,
    traits=("images",),
    check=_images_only("seasonal_swap"),
)
def build_seasonal_swap(p: SeasonalSwapParams) -> Augmentation:
    """Season-pair swap of stacked multi-temporal acquisitions (001 §6.1.2)."""
    return lambda x, gen: seasonal_swap(x, gen, p.seasons, p.p)


@dataclass(frozen=True)
class AugmentPipeline:
    """Transforms applied in order to each training batch, in reflectance space.

    Attributes:
        transforms: The augmentations, in config order.
        mean: Per-band mean the inputs were standardised with (``[1, C, 1, 1]``), or None.
        std: Per-band std they were divided by, or None.
    """

    transforms: tuple[Augmentation, ...] = ()
    mean: torch.Tensor | None = None
    std: torch.Tensor | None = None

    def __bool__(self) -> bool:
        return bool(self.transforms)

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The augmented copy of a standardised batch ``x`` (``x`` is not modified)."""
        if not self.transforms:
            return x
        mean, std = self.mean, self.std
        y = x * std + mean if mean is not None and std is not None else x
        for transform in self.transforms:
            y = transform(y, generator)
        return (y - mean) / std if mean is not None and std is not None else y


def build_pipeline(
    specs: Sequence[tuple[str, dict[str, Any]]],
    mean: torch.Tensor | None = None,
    std: torch.Tensor | None = None,
) -> AugmentPipeline:
    """The pipeline of ``(registry key, params)`` pairs, in order (empty → identity).

    Args:
        specs: The ``train.augment`` entries.
        mean: Standardisation mean of the inputs (None: inputs are not standardised).
        std: Standardisation std of the inputs.
    """
    transforms = tuple(AUGMENTATIONS.build(name, params) for name, params in specs)
    return AugmentPipeline(transforms, mean, std)
