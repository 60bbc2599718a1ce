"""The spatial factor α_k of FL-SPDP, computed on the client from its own data (001 Eq. 10).

Each participating client summarises its local data into a metadata vector z_k — NDVI
mean and variance from the red/NIR bands, elevation entropy over a binned DEM histogram,
spectral entropy of its normalised mean reflectance and a season term — and maps it by a
fixed rule φ to a scalar α_k = φ(z_k) ∈ [0.5, 1.5] (001 §4.2, §6.1.2). Only α_k (optionally
quantised) travels, in :attr:`~geofl.update.UpdateMeta.spatial_alpha`; z_k goes to the
client-local log. The server weights ω_k ∝ α_k·|D_k| (001 Eq. 11,
:func:`geofl.server.weighting.spatial_weights`).

**The rule φ** (the paper leaves it open: "a domain-calibrated rule-based estimator").
Linear min–max scaling across clients would need the other clients' metadata, which never
leaves them, so every term is mapped into [0, 1] by a *fixed* reference range instead:

====================  ===========================================================
term                  t ∈ [0, 1]
====================  ===========================================================
``ndvi``              ½·((μ_NDVI + 1)/2) + ½·σ²_NDVI   (NDVI ∈ [−1, 1], so σ² ≤ 1)
``elevation``         H(binned elevation) / log(bins)  (fixed range, default 0–4000 m)
``spectral``          H(r̄ / Σ r̄) / log(C)  over the C bands
``season``            H(season histogram) / log(S)  (S = 4 seasons: diversity)
====================  ===========================================================

s = mean of the enabled terms, α = 0.5 + s (linear, s = 0 → 0.5, s = 1 → 1.5). A term
whose input the dataset lacks (no ``elevation_mean`` or ``season`` metadata) is left out
of the mean and named in the log; with no usable term s = ½ (α = 1, FedAvg). Entropies
reward diverse (representative) clients; NDVI orders clients by vegetation. ``terms``
selects the terms (the metadata ablation of 001 Table 5). Quantisation (``levels``) rounds
s to L evenly spaced values, so α takes L values 0.5, 0.5 + 1/(L−1), …, 1.5.

Smoothing across rounds (001 §4.2, "if desired") is not implemented: α_k is a deterministic
function of the client's fixed local data, so an EMA of α over rounds is the identity;
smoothing ω itself would need strategy state (checkpointed) and is left open.

**Privacy.** α_k is computed from the client's raw data, so an exact α_k is outside the
client's ε (the default, as the paper releases it). ``noise_multiplier: z`` releases
α_k + N(0, z²) clamped to [0.5, 1.5] instead — a Gaussian mechanism of sensitivity 1 (the
range of α) reported as a ``dp_event`` and composed into the client's ledger each round
(:func:`noisy_alpha`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS, ReleaseStep, gaussian_event
from geofl.update import ClientDirectives

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    "DARK",
    "SpatialAlphaParams",
    "alpha_from_score",
    "client_alpha",
    "histogram_entropy",
    "ndvi",
    "ndvi_stats",
    "noisy_alpha",
    "normalized_entropy",
    "quantize_score",
    "red_nir_indices",
    "spectral_entropy",
]

ALPHA_MIN, ALPHA_MAX = 0.5, 1.5
Term = Literal["ndvi", "elevation", "spectral", "season"]
#: Red and NIR band names: Sentinel-2 B04 and B08, B8A when B08 is absent.
RED_BANDS, NIR_BANDS = ("B04",), ("B08", "B8A")
#: Reflectance at or below which a pixel (NDVI: NIR + red) or a band mean (spectral entropy)
#: counts as dark. De-standardised no-data zeros come back as ±1e-9 round-off, which would
#: otherwise give NDVI far outside [−1, 1]; 1e-6 is below one digital number (1e-4).
DARK = 1e-6


def ndvi(red: torch.Tensor, nir: torch.Tensor) -> torch.Tensor:
    """NDVI = (NIR − red) / (NIR + red), 0 where NIR + red ≤ :data:`DARK` (001 §4.2, [31]).

    Args:
        red: ``[...]`` red reflectance (reflectance or digital numbers; NDVI is scale-free).
        nir: ``[...]`` NIR reflectance, same shape.

    Returns:
        ``[...]`` float64 NDVI, clamped to [−1, 1] (negative round-off of de-standardised
        zeros). A no-data NIR of 0 under a lit red pixel gives −1.
    """
    r, n = red.double(), nir.double()
    den = n + r
    lit = den > DARK
    safe = torch.where(lit, den, torch.ones_like(den))
    return torch.where(lit, (n - r) / safe, torch.zeros_like(den)).clamp(-1.0, 1.0)


def ndvi_stats(red: torch.Tensor, nir: torch.Tensor) -> tuple[float, float]:
    """Mean and (population) variance of per-pixel NDVI over all pixels (001 §4.2).

    Args:
        red: ``[N, H, W]`` (or any shape) red reflectance.
        nir: Same shape, NIR reflectance.

    Returns:
        ``(μ_NDVI, σ²_NDVI)``.
    """
    v = ndvi(red, nir)
    return float(v.mean()), float(v.var(unbiased=False))


def histogram_entropy(counts: torch.Tensor) -> torch.Tensor:
    """Shannon entropy H = −Σ p_b log p_b (nats) of a histogram, 0·log 0 = 0 (001 §4.2).

    Args:
        counts: ``[B]`` non-negative counts (or weights) with a positive sum.

    Returns:
        Scalar float64 entropy in [0, log B].
    """
    p = counts.double() / counts.double().sum()
    return -(torch.where(p > 0, p * torch.log(torch.where(p > 0, p, 1.0)), 0.0)).sum()


def normalized_entropy(counts: torch.Tensor) -> float:
    """H(counts) / log B ∈ [0, 1] for ``[B]`` counts, B ≥ 2."""
    return float(histogram_entropy(counts)) / math.log(counts.shape[0])


def spectral_entropy(mean_reflectance: torch.Tensor) -> float:
    """Normalised entropy of p_b = r̄_b / Σ r̄ over the C bands (001 §4.2, [33]).

    Args:
        mean_reflectance: ``[C]`` mean reflectance per band (negatives clamped to 0).

    Returns:
        H(p) / log C ∈ [0, 1]; 0 when every band is dark (Σ r̄ ≤ :data:`DARK`).
    """
    r = mean_reflectance.double().clamp(min=0.0)
    if float(r.sum()) <= DARK:
        return 0.0
    return normalized_entropy(r)


def quantize_score(score: float, levels: int | None) -> float:
    """Round s ∈ [0, 1] to the nearest of ``levels`` evenly spaced values (None: as is)."""
    if levels is None:
        return score
    return round(score * (levels - 1)) / (levels - 1)


def alpha_from_score(score: float) -> float:
    """α = 0.5 + s: the linear map of s ∈ [0, 1] onto [0.5, 1.5] (001 §6.1.2)."""
    return ALPHA_MIN + (ALPHA_MAX - ALPHA_MIN) * min(max(score, 0.0), 1.0)


def red_nir_indices(bands: Sequence[str]) -> tuple[int, int] | None:
    """Channel indices of red (B04) and NIR (B08, else B8A), or None if either is absent."""
    red = next((bands.index(b) for b in RED_BANDS if b in bands), None)
    nir = next((bands.index(b) for b in NIR_BANDS if b in bands), None)
    return None if red is None or nir is None else (red, nir)


class SpatialAlphaParams(BaseModel):
    """Parameters of the ``spatial_alpha`` release step (001 Eq. 10)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    terms: tuple[Term, ...] = Field(
        ("ndvi", "elevation", "spectral", "season"),
        min_length=1,
        description="Metadata terms entering φ (001 Table 5 ablation)",
    )
    levels: int | None = Field(
        None, ge=2, description="Quantise α to this many evenly spaced levels in [0.5, 1.5]"
    )
    noise_multiplier: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="z: release α_k + N(0, z²) clamped to [0.5, 1.5], inside ε; None: exact α_k "
        "(outside the client's ε)",
    )
    elevation_bins: int = Field(16, ge=2, description="Bins of the elevation histogram")
    elevation_range_m: tuple[float, float] = Field(
        (0.0, 4000.0), description="Fixed elevation range binned (values clamped into it)"
    )

    @field_validator("terms")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"terms repeat: {list(v)}")
        return v

    @field_validator("elevation_range_m")
    @classmethod
    def _range(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not v[0] < v[1]:
            raise ValueError(f"expected low < high, got {list(v)}")
        return v


def _all_rows(data: ClientData) -> torch.Tensor:
    """The client's inputs as one tensor (a stored index view is read once)."""
    inputs = data.inputs
    return inputs if isinstance(inputs, torch.Tensor) else inputs[torch.arange(len(data))]


def _raw_channels(data: ClientData, chans: Sequence[int]) -> torch.Tensor:
    """``[n, len(chans), …]`` float64 de-standardised values of the chosen channels."""
    x = _all_rows(data)[:, list(chans)].double()
    if data.band_mean is not None and data.band_std is not None:
        mean = data.band_mean.double().flatten()[list(chans)]
        std = data.band_std.double().flatten()[list(chans)]
        shape = (1, len(chans)) + (1,) * (x.ndim - 2)
        x = x * std.view(shape) + mean.view(shape)
    return x


def _band_means(data: ClientData) -> torch.Tensor:
    """``[C]`` float64 mean raw value per band (the mean commutes with de-standardising)."""
    x = _all_rows(data)
    m = x.mean(dim=[0, *range(2, x.ndim)], dtype=torch.float64)
    if data.band_mean is not None and data.band_std is not None:
        m = m * data.band_std.double().flatten() + data.band_mean.double().flatten()
    return m


def _metadata_terms(data: ClientData, params: SpatialAlphaParams) -> dict[str, Any]:
    """Every term's raw statistic and its [0, 1] value (None where data are missing)."""
    out: dict[str, Any] = {}
    rn = red_nir_indices(data.bands)
    if rn is not None:
        x = _raw_channels(data, rn)
        mu, var = ndvi_stats(x[:, 0], x[:, 1])
        out["ndvi"] = {"mean": mu, "var": var, "t": 0.5 * (mu + 1.0) / 2.0 + 0.5 * min(var, 1.0)}
    elev = data.metadata.get("elevation_mean")
    if elev is not None and len(elev):
        lo, hi = params.elevation_range_m
        e = torch.as_tensor(np.asarray(elev, dtype=np.float64)).clamp(lo, hi)
        counts = torch.histc(e, bins=params.elevation_bins, min=lo, max=hi)
        out["elevation"] = {"t": normalized_entropy(counts)}
    out["spectral"] = {"t": spectral_entropy(_band_means(data))}
    season = data.metadata.get("season")
    if season is not None and len(season):
        s = torch.as_tensor(np.asarray(season, dtype=np.int64)).clamp(0, 3)
        out["season"] = {"t": normalized_entropy(torch.bincount(s, minlength=4))}
    return out


def client_alpha(data: ClientData, params: SpatialAlphaParams) -> tuple[float, dict[str, Any]]:
    """α_k = φ(z_k) from the client's own data (001 Eq. 10, rule φ in the module doc).

    Args:
        data: The client's local data (inputs, band names, standardisation, metadata).
        params: Terms, quantisation levels, elevation binning.

    Returns:
        α_k ∈ [0.5, 1.5] and the client-local log: each term's statistics, the terms
        used, the score s and α (this log never leaves the client).
    """
    stats = _metadata_terms(data, params)
    used = [t for t in params.terms if t in stats]
    score = float(np.mean([stats[t]["t"] for t in used])) if used else 0.5
    score = quantize_score(min(max(score, 0.0), 1.0), params.levels)
    alpha = alpha_from_score(score)
    missing = [t for t in params.terms if t not in stats]
    return alpha, {"alpha": alpha, "score": score, "used": used, "missing": missing, **stats}


class _SpatialAlpha:
    name = "spatial_alpha"

    def __init__(self, params: SpatialAlphaParams) -> None:
        self.params = params

    def planned_release(
        self, data: ClientData, directives: ClientDirectives
    ) -> list[dict[str, Any]]:
        """The noisy α's DpEvent when it is privatised (the budget check composes it)."""
        z = self.params.noise_multiplier
        return [] if z is None else [gaussian_event(z)]

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        alpha, log = client_alpha(data, self.params)
        z = self.params.noise_multiplier
        if z is not None:
            log = {**log, **noisy_alpha(alpha, z, generator)}
        return delta, log


def noisy_alpha(alpha: float, z: float, generator: torch.Generator) -> dict[str, Any]:
    """α_k + N(0, z²), clamped to [0.5, 1.5], and its DpEvent.

    α_k lies in [0.5, 1.5] (001 Eq. 10) whatever the data, so one record moves it by at most
    1: the release is the Gaussian mechanism with noise multiplier z, composed into the
    client's ledger; the clamp is post-processing.
    """
    noise = float(torch.randn((), generator=generator, dtype=torch.float64))
    released = min(max(alpha + z * (ALPHA_MAX - ALPHA_MIN) * noise, ALPHA_MIN), ALPHA_MAX)
    return {"alpha": released, "alpha_exact": alpha, "dp_event": gaussian_event(z)}


@RELEASE_STEPS.register(
    "spatial_alpha", params=SpatialAlphaParams, traits=("spatial_alpha", "needs_red_nir")
)
def build_spatial_alpha(params: SpatialAlphaParams) -> ReleaseStep:
    """Attach the client's spatial factor α_k (001 Eq. 10); Δw passes unchanged."""
    return _SpatialAlpha(params)
