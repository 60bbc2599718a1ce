"""Update-level Gaussian perturbation as client release steps (000 Eq. 5–8, Alg. 1).

Both steps clip Δw to an L2 bound C (Eq. 5) and add N(0, σ² I) (Eq. 7):

* ``gaussian`` — the *uniform noise* baseline of 000 §4.4: one (C, σ) for every client.
* ``risk_aware`` — 000's spatial risk-aware perturbation: the client scores its own spatial
  risk (Eq. 3–4, :mod:`geofl.privacy.risk`) and takes (C_k, σ_k) from its level (Eq. 6, 8);
  defaults C_H/C_M/C_L = 80/100/120 and σ_H/σ_M/σ_L = 0.07/0.05/0.03 (000 §4.4).

The noise comes from the per-(seed, round, client) release generator, so the server never
sees the raw update and reruns are identical. Each step reports a ``dp_event`` with the
noise multiplier z = σ/(2C): the server sees each client's noised update on its own (no
secure aggregation), so neighbouring inputs are two versions of the client's data whose
clipped updates differ by at most 2C in L2 (replace-one); the accountant
(:mod:`geofl.privacy.accounting`) turns those into ε. At the paper's settings z is about
5·10⁻⁴, so that ε is astronomically large: the perturbation is a heuristic defence, not a
meaningful differential-privacy guarantee, and reports say so.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS, ReleaseStep, l2_clip
from geofl.privacy.risk import RiskLevel, RiskParams, assess_risk
from geofl.registry import CheckContext
from geofl.update import ClientDirectives

__all__ = [
    "GaussianParams",
    "LevelSetting",
    "RiskAwareParams",
    "check_noise_norm",
    "clip_and_noise",
    "release_report",
]


def clip_and_noise(
    delta: torch.Tensor, *, clip: float, sigma: float, generator: torch.Generator
) -> tuple[torch.Tensor, float]:
    """Δw̃ = Δw · min(1, C/‖Δw‖₂) + N(0, σ² I) (000 Eq. 5 and 7).

    Args:
        delta: ``[D]`` update (not modified).
        clip: C > 0.
        sigma: σ ≥ 0, per-coordinate noise standard deviation.
        generator: Source of the noise.

    Returns:
        The perturbed update (a new ``[D]`` tensor) and the pre-clip norm ‖Δw‖₂.
    """
    clipped, norm = l2_clip(delta, clip)
    if sigma > 0:
        noise = torch.randn(delta.shape, generator=generator, dtype=delta.dtype)
        clipped.add_(noise, alpha=sigma)
    return clipped, norm


def release_report(norm: float, clip: float, sigma: float) -> dict[str, Any]:
    """The local-log entry of one clip-and-noise release, with its dp_event (z = σ/2C)."""
    return {
        "norm": norm,
        "clip": clip,
        "sigma": sigma,
        "clipped": norm > clip,
        # replace-one neighbours: two clipped updates differ by at most 2C in L2
        "dp_event": {"mechanism": "gaussian", "noise_multiplier": sigma / (2.0 * clip)},
    }


class GaussianParams(BaseModel):
    """Parameters of the ``gaussian`` (uniform noise) release step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip: float = Field(100.0, gt=0.0, description="L2 clipping bound C (000 Eq. 5)")
    sigma: float = Field(0.05, ge=0.0, description="noise standard deviation σ (000 Eq. 7)")


class _ClipAndNoise:
    """Both steps: pick (C, σ) for the client, clip, add noise, report (Eq. 5 and 7)."""

    name: str

    def choose(self, data: ClientData) -> tuple[float, float, dict[str, Any]]:
        """(C, σ) for this client and what to log about the choice."""
        raise NotImplementedError

    def planned_release(
        self, data: ClientData, directives: ClientDirectives
    ) -> list[dict[str, Any]]:
        """The DpEvent this step reports for ``data`` (z = σ/2C; the budget check's)."""
        clip, sigma, _ = self.choose(data)
        return [release_report(0.0, clip, sigma)["dp_event"]]

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        clip, sigma, extra = self.choose(data)
        out, norm = clip_and_noise(delta, clip=clip, sigma=sigma, generator=generator)
        return out, {**extra, **release_report(norm, clip, sigma)}


class _Gaussian(_ClipAndNoise):
    name = "gaussian"

    def __init__(self, params: GaussianParams) -> None:
        self.params = params

    def choose(self, data: ClientData) -> tuple[float, float, dict[str, Any]]:
        return self.params.clip, self.params.sigma, {}


def check_noise_norm(_: object, ctx: CheckContext) -> None:
    """Noise on Δw also hits float buffers; BatchNorm running variances could go negative."""
    if (ctx.experiment.get("model") or {}).get("params", {}).get("norm") == "batch":
        ctx.fail(
            "",
            "noise release steps perturb BatchNorm running statistics too; use "
            "model.params.norm=group (the default) with noise",
        )


@RELEASE_STEPS.register(
    "gaussian", params=GaussianParams, traits=("noise",), check=check_noise_norm
)
def build_gaussian(params: GaussianParams) -> ReleaseStep:
    """Uniform noise: clip to C, add N(0, σ²I), the same (C, σ) for all (000 §4.4)."""
    return _Gaussian(params)


class LevelSetting(BaseModel):
    """(C, σ) of one risk level (000 Eq. 6 and 8)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip: float = Field(..., gt=0.0)
    sigma: float = Field(..., ge=0.0)


class RiskAwareParams(BaseModel):
    """Parameters of the ``risk_aware`` release step (000 §3.3, §4.4 defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    high: LevelSetting = Field(default_factory=lambda: LevelSetting(clip=80.0, sigma=0.07))
    mid: LevelSetting = Field(default_factory=lambda: LevelSetting(clip=100.0, sigma=0.05))
    low: LevelSetting = Field(default_factory=lambda: LevelSetting(clip=120.0, sigma=0.03))
    risk: RiskParams = Field(default_factory=RiskParams, description="the risk map R")


class _RiskAware(_ClipAndNoise):
    name = "risk_aware"

    def __init__(self, params: RiskAwareParams) -> None:
        self.params = params
        self._levels: dict[int, dict[str, Any]] = {}

    def _assess(self, data: ClientData) -> dict[str, Any]:
        # A client's data does not change during a run: score it once (Alg. 1 line 3).
        cached = self._levels.get(data.client_id)
        if cached is None:
            if len(data.classes) != len(data.label_histogram):
                raise ValueError(
                    f"client {data.client_id}: risk scoring needs the class names "
                    f"({len(data.classes)} given for {len(data.label_histogram)} classes)"
                )
            cached = assess_risk(
                data.label_histogram, data.classes, gsd_m=data.gsd_m, params=self.params.risk
            ).as_dict()
            self._levels[data.client_id] = cached
        return cached

    def setting(self, level: RiskLevel) -> LevelSetting:
        """(C_k, σ_k) for a level (000 Eq. 6, 8)."""
        setting: LevelSetting = getattr(self.params, level)
        return setting

    def choose(self, data: ClientData) -> tuple[float, float, dict[str, Any]]:
        risk = self._assess(data)
        s = self.setting(risk["level"])
        return s.clip, s.sigma, risk


@RELEASE_STEPS.register(
    "risk_aware", params=RiskAwareParams, traits=("noise",), check=check_noise_norm
)
def build_risk_aware(params: RiskAwareParams) -> ReleaseStep:
    """Spatial risk-aware perturbation: (C, σ) by the client's risk level (000 Alg. 1)."""
    return _RiskAware(params)
