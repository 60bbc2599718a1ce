"""The trigger patch of the backdoor attack (BadNets, Gu et al. 2017; 004 §3.1).

The trigger is an ``s × s`` patch at a fixed position, with a value per band and pixel:

* position: the patch's top-left pixel ``(row, col)``; ``bottom_right`` (default) is
  ``(H − s, W − s)``, ``top_left`` is ``(0, 0)``;
* values (model-input units, i.e. band standard deviations after ``data.normalize:
  standardize``): ``values: [v_1, …, v_C]`` fills band c with v_c; without it, each band
  and pixel is ±``amplitude`` with the sign drawn from the generator ``(seed, "attack",
  "trigger")`` — a seeded random pattern, one per run seed, identical for every method of
  that seed (004 §3.1 "trigger size/location/opacity … kept identical across all compared
  methods");
* opacity α: stamped pixels become ``(1 − α)·x + α·patch`` (α = 1, the default, replaces them).

On tabular inputs ``(F,)`` (paper 003's agronomic features, which the 003 hierarchy trains on)
the same parameters place a feature trigger (:class:`FeatureTrigger`): ``size`` features —
the last ``size`` (``bottom_right``) or the first (``top_left``) — set to their values,
``values`` one per stamped feature or the seeded ±``amplitude`` pattern: BadNets' patch
carried over to feature vectors (a fixed, out-of-distribution value pattern on a few
features), so the 004 threat model reaches tractors (issue 32 item 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import ConfigError
from geofl.rng import torch_generator

__all__ = [
    "AnyTrigger",
    "FeatureTrigger",
    "Trigger",
    "TriggerParams",
    "make_backdoor_trigger",
    "make_feature_trigger",
    "make_trigger",
]


class TriggerParams(BaseModel):
    """Size, position, values and opacity of the trigger patch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(
        3, ge=1, description="patch side s in pixels (tabular inputs: number of features)"
    )
    position: Literal["bottom_right", "top_left"] | tuple[int, int] = Field(
        "bottom_right", description="bottom_right, top_left, or [row, col] of its top-left pixel"
    )
    amplitude: float = Field(
        2.0, gt=0.0, allow_inf_nan=False, description="|value| of the seeded ±pattern"
    )
    values: list[float] | None = Field(
        None,
        min_length=1,
        description="one value per band (tabular: per stamped feature) instead of the "
        "seeded pattern",
    )
    opacity: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False, description="α")


@dataclass(frozen=True)
class Trigger:
    """A placed trigger patch.

    Attributes:
        patch: ``[C, s, s]`` float32 values.
        row: Top-left row of the patch.
        col: Top-left column.
        opacity: α in (0, 1].
    """

    patch: torch.Tensor
    row: int
    col: int
    opacity: float = 1.0

    @property
    def size(self) -> int:
        """Patch side s."""
        return int(self.patch.shape[-1])

    def stamp(self, x: torch.Tensor) -> torch.Tensor:
        """A copy of ``x`` (``[N, C, H, W]``) with the patch stamped on every sample."""
        out = x.clone()
        s, r, c = self.size, self.row, self.col
        region = out[:, :, r : r + s, c : c + s]
        patch = self.patch.to(dtype=out.dtype)
        out[:, :, r : r + s, c : c + s] = (1.0 - self.opacity) * region + self.opacity * patch
        return out

    def stamp_at(
        self, x: torch.Tensor, sample: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """A copy of ``x`` with the patch stamped at P given places instead of its own.

        The object-disappearance attack puts the trigger on each target object
        (:mod:`geofl.attacks.oda`); all P placements are written in one indexed assignment.

        Args:
            x: ``[N, C, H, W]`` images.
            sample: ``[P]`` int64 image index of each placement.
            rows: ``[P]`` int64 top-left row of each patch (``0 ≤ row ≤ H − s``).
            cols: ``[P]`` int64 top-left column (``0 ≤ col ≤ W − s``).

        Returns:
            ``[N, C, H, W]``: where patches overlap, each pixel is blended once, with the
            patch of the last placement that covers it.
        """
        out = x.clone()
        if len(sample) == 0:
            return out
        s, (h, w) = self.size, out.shape[-2:]
        offs = torch.arange(s)
        rr = (rows[:, None] + offs[None, :])[:, :, None].expand(-1, s, s).reshape(-1)
        cc = (cols[:, None] + offs[None, :])[:, None, :].expand(-1, s, s).reshape(-1)
        nn = sample[:, None, None].expand(-1, s, s).reshape(-1)  # [P·s·s] pixels
        patch = self.patch.to(dtype=out.dtype).permute(1, 2, 0).reshape(1, s * s, -1)
        values = patch.expand(len(sample), -1, -1).reshape(len(nn), -1)  # [P·s·s, C]
        # one write per pixel (the last placement's), so overlaps are deterministic
        _, inv = torch.unique((nn * h + rr) * w + cc, return_inverse=True)
        last = torch.full((int(inv.max()) + 1,), -1, dtype=torch.int64)
        last = last.scatter_reduce(0, inv, torch.arange(len(nn)), reduce="amax")
        nn, rr, cc, values = nn[last], rr[last], cc[last], values[last]
        region = out[nn, :, rr, cc]  # [U, C]
        out[nn, :, rr, cc] = (1.0 - self.opacity) * region + self.opacity * values
        return out


def make_trigger(params: TriggerParams, shape: tuple[int, ...], seed: int, path: str) -> Trigger:
    """Place the trigger on images of ``shape`` = ``(C, H, W)``.

    Args:
        params: The configured trigger.
        shape: One sample's shape; must be an image ``(C, H, W)``.
        seed: The run's seed (the ±pattern's generator).
        path: Config path of the trigger, for errors.

    Raises:
        ConfigError: tabular inputs, a patch that does not fit, or ``values`` not one per band.
    """
    if len(shape) != 3:
        raise ConfigError(path, f"a trigger patch needs images [C, H, W], inputs are {shape}")
    bands, h, w = shape
    s = params.size
    if params.position == "bottom_right":
        row, col = h - s, w - s
    elif params.position == "top_left":
        row, col = 0, 0
    else:
        row, col = params.position
    if s > min(h, w) or not (0 <= row <= h - s and 0 <= col <= w - s):
        raise ConfigError(
            f"{path}.position", f"a {s}×{s} patch at ({row}, {col}) does not fit {h}×{w} images"
        )
    if params.values is not None:
        if len(params.values) != bands:
            raise ConfigError(
                f"{path}.values",
                f"{len(params.values)} values for {bands} bands; give one per band",
            )
        patch = torch.tensor(params.values, dtype=torch.float32)[:, None, None].expand(-1, s, s)
    else:
        gen = torch_generator(seed, "attack", "trigger")
        signs = torch.randint(0, 2, (bands, s, s), generator=gen).float() * 2.0 - 1.0
        patch = params.amplitude * signs
    return Trigger(patch.contiguous(), int(row), int(col), params.opacity)


@dataclass(frozen=True)
class FeatureTrigger:
    """A placed feature trigger on tabular inputs (module docstring).

    Attributes:
        features: ``[s]`` int64 indices of the stamped features.
        values: ``[s]`` float32 values they take.
        opacity: α in (0, 1].
    """

    features: torch.Tensor
    values: torch.Tensor
    opacity: float = 1.0

    @property
    def size(self) -> int:
        """Number of stamped features s."""
        return int(self.features.numel())

    def stamp(self, x: torch.Tensor) -> torch.Tensor:
        """A copy of ``x`` (``[N, F]``) with the trigger stamped on every sample."""
        out = x.clone()
        cols = out[:, self.features]
        values = self.values.to(dtype=out.dtype)
        out[:, self.features] = (1.0 - self.opacity) * cols + self.opacity * values
        return out

    def describe(self) -> dict[str, object]:
        """JSON-ready placement (``final.json["threat"]["trigger"]``)."""
        return {
            "features": self.features.tolist(),
            "values": self.values.tolist(),
            "size": self.size,
            "opacity": self.opacity,
        }


#: A trigger the backdoor attacks stamp: an image patch or a feature trigger.
AnyTrigger = Trigger | FeatureTrigger


def make_feature_trigger(
    params: TriggerParams, shape: tuple[int, ...], seed: int, path: str
) -> FeatureTrigger:
    """Place the trigger on tabular inputs of ``shape`` = ``(F,)``.

    Args:
        params: The configured trigger (``position`` bottom_right: the last ``size``
            features; top_left: the first; ``[row, col]`` has no meaning here).
        shape: One sample's shape ``(F,)``.
        seed: The run's seed (the ±pattern's generator, as for patches).
        path: Config path of the trigger, for errors.

    Raises:
        ConfigError: more features than the inputs have, a ``[row, col]`` position, or
            ``values`` not one per stamped feature.
    """
    (width,) = shape
    s = params.size
    if s > width:
        raise ConfigError(f"{path}.size", f"{s} trigger features but inputs have {width}")
    if params.position == "bottom_right":
        first = width - s
    elif params.position == "top_left":
        first = 0
    else:
        raise ConfigError(
            f"{path}.position",
            f"[row, col] {list(params.position)} places a patch on images; tabular inputs "
            "take bottom_right (last features) or top_left (first)",
        )
    if params.values is not None:
        if len(params.values) != s:
            raise ConfigError(
                f"{path}.values", f"{len(params.values)} values for {s} features; give one each"
            )
        values = torch.tensor(params.values, dtype=torch.float32)
    else:
        gen = torch_generator(seed, "attack", "trigger")
        values = params.amplitude * (torch.randint(0, 2, (s,), generator=gen).float() * 2.0 - 1.0)
    features = torch.arange(first, first + s, dtype=torch.int64)
    return FeatureTrigger(features, values, params.opacity)


def make_backdoor_trigger(
    params: TriggerParams, shape: tuple[int, ...], seed: int, path: str
) -> AnyTrigger:
    """The backdoor's trigger for inputs of ``shape``: a patch on images ``(C, H, W)``, a
    feature trigger on tabular inputs ``(F,)``.

    Raises:
        ConfigError: other input shapes, or a trigger that does not fit them.
    """
    if len(shape) == 1:
        return make_feature_trigger(params, shape, seed, path)
    if len(shape) != 3:
        raise ConfigError(
            path, f"a trigger needs images [C, H, W] or tabular inputs [F], inputs are {shape}"
        )
    return make_trigger(params, shape, seed, path)
