"""Spatial risk scoring of a client (000 §3.3, Eq. 3–4, Alg. 1 lines 3–13).

The paper names the inputs of the risk map R — semantic region attribute sem_k, the
entropy H(π_k) of the label distribution, the sample size n_k and a resolution indicator
res_k — but not R itself. geofl makes R explicit: each factor is mapped to [0, 1] with
*higher = riskier*, and the score is their weighted mean (Eq. 3)::

    sem_k  = Σ_c π_kc · s_c                  expected class sensitivity s_c ∈ [0, 1]
    conc_k = 1 − H(π_k) / log C              concentration: low entropy → high risk
    size_k = n_ref / (n_ref + n_k)           few samples → each sample weighs more in Δw
    res_k  = min(1, gsd_ref / gsd_k)         finer ground sampling distance → more detail
    r_k    = (w_sem·sem_k + w_conc·conc_k + w_size·size_k + w_res·res_k) / Σ w

and discretised by two thresholds (Eq. 4, Alg. 1 lines 4–13): High if r_k ≥ τ_H, Mid if
r_k ≥ τ_M, Low otherwise. Everything is computed on the client from its own data; the
result is logged client-side and never sent to the server.

The default sensitivity table rates built-up and infrastructure classes high and natural
land cover low, for the EuroSAT/synthetic and UC Merced class names; other datasets pass
their own table (unknown classes get ``default_sensitivity``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_SENSITIVITY",
    "RiskAssessment",
    "RiskLevel",
    "RiskParams",
    "assess_risk",
    "normalized_entropy",
    "risk_level",
]

RiskLevel = Literal["low", "mid", "high"]

#: Class sensitivity s_c ∈ [0, 1] by normalised class name (lower case, letters/digits
#: only): built-up areas, infrastructure and sensitive functional zones high; natural land
#: cover low (000 §3.3, "semantic category sensitivity").
DEFAULT_SENSITIVITY: dict[str, float] = {
    # EuroSAT and the synthetic generator
    "industrial": 1.0,
    "residential": 0.9,
    "highway": 0.8,
    "river": 0.3,
    "annualcrop": 0.3,
    "permanentcrop": 0.3,
    "pasture": 0.2,
    "sealake": 0.2,
    "herbaceousvegetation": 0.1,
    "forest": 0.1,
    # UC Merced Land Use
    "buildings": 1.0,
    "storagetanks": 1.0,
    "denseresidential": 0.9,
    "airplane": 0.9,
    "mediumresidential": 0.8,
    "mobilehomepark": 0.8,
    "freeway": 0.8,
    "overpass": 0.8,
    "runway": 0.8,
    "harbor": 0.8,
    "sparseresidential": 0.7,
    "intersection": 0.7,
    "parkinglot": 0.7,
    "tenniscourt": 0.5,
    "baseballdiamond": 0.5,
    "golfcourse": 0.4,
    "agricultural": 0.3,
    "beach": 0.2,
    "chaparral": 0.1,
}


def _norm_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class RiskParams(BaseModel):
    """The explicit risk map R of Eq. 3 and the thresholds of Eq. 4."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sensitivity: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_SENSITIVITY),
        description="class name → sensitivity in [0, 1] (names compared case/space-blind)",
    )
    default_sensitivity: float = Field(0.5, ge=0.0, le=1.0, description="for unlisted classes")
    w_semantic: float = Field(0.5, ge=0.0, description="weight of sem_k")
    w_concentration: float = Field(0.3, ge=0.0, description="weight of 1 − H(π_k)/log C")
    w_size: float = Field(0.1, ge=0.0, description="weight of n_ref/(n_ref + n_k)")
    w_resolution: float = Field(0.1, ge=0.0, description="weight of min(1, gsd_ref/gsd_k)")
    size_ref: float = Field(200.0, gt=0.0, description="n_ref: sample count at size_k = 0.5")
    gsd_ref_m: float = Field(1.0, gt=0.0, description="gsd_ref: GSD (m) at res_k = 1")
    default_gsd_m: float = Field(10.0, gt=0.0, description="GSD when the data carries none")
    tau_mid: float = Field(0.4, ge=0.0, le=1.0, description="τ_M: r_k ≥ τ_M → Mid")
    tau_high: float = Field(0.6, ge=0.0, le=1.0, description="τ_H: r_k ≥ τ_H → High")

    @model_validator(mode="after")
    def _check(self) -> RiskParams:
        if self.tau_mid > self.tau_high:
            raise ValueError(f"tau_mid ({self.tau_mid}) must not exceed tau_high ({self.tau_high})")
        if self.w_semantic + self.w_concentration + self.w_size + self.w_resolution <= 0:
            raise ValueError("at least one risk weight (w_semantic, ...) must be positive")
        bad = {k: v for k, v in self.sensitivity.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"sensitivity values must lie in [0, 1], got {bad}")
        return self


@dataclass(frozen=True)
class RiskAssessment:
    """The client-side result of Alg. 1 lines 3–13 (logged, never sent)."""

    score: float
    level: RiskLevel
    semantic: float
    concentration: float
    size: float
    resolution: float

    def as_dict(self) -> dict[str, float | str]:
        """JSON-ready form for the client log."""
        return {
            "risk": self.score,
            "level": self.level,
            "semantic": self.semantic,
            "concentration": self.concentration,
            "size": self.size,
            "resolution": self.resolution,
        }


def normalized_entropy(histogram: np.ndarray) -> float:
    """H(π)/log C ∈ [0, 1] of a label histogram (natural log; 0·log 0 = 0).

    Args:
        histogram: ``[C]`` non-negative counts, not all zero.
    """
    h = np.asarray(histogram, dtype=np.float64)
    total = h.sum()
    if h.ndim != 1 or h.size < 2 or not total > 0 or (h < 0).any():
        raise ValueError(
            f"label histogram must be [C≥2] non-negative counts with a positive sum, got {h}"
        )
    p = h[h > 0] / total
    return float(-(p * np.log(p)).sum() / math.log(h.size))


def risk_level(score: float, *, tau_mid: float, tau_high: float) -> RiskLevel:
    """g_k from r_k (000 Eq. 4; Alg. 1 lines 4–13: ≥ τ_H → High, ≥ τ_M → Mid)."""
    if score >= tau_high:
        return "high"
    if score >= tau_mid:
        return "mid"
    return "low"


def assess_risk(
    histogram: np.ndarray,
    classes: Sequence[str],
    *,
    gsd_m: float | None,
    params: RiskParams,
) -> RiskAssessment:
    """r_k = R(sem_k, H(π_k), n_k, res_k) and its level g_k (000 Eq. 3–4).

    Args:
        histogram: ``[C]`` local label counts h_k (n_k = Σ h_k).
        classes: The C class names, index-aligned with ``histogram``.
        gsd_m: Mean ground sampling distance of the local images in metres, or None
            (then ``params.default_gsd_m``).
        params: The risk map.

    Returns:
        The score, its level and the four factor values.
    """
    h = np.asarray(histogram, dtype=np.float64)
    if h.shape != (len(classes),):
        raise ValueError(f"histogram has shape {h.shape} but there are {len(classes)} classes")
    conc = 1.0 - normalized_entropy(h)
    n = float(h.sum())
    table = {_norm_name(k): v for k, v in params.sensitivity.items()}
    s = np.array([table.get(_norm_name(c), params.default_sensitivity) for c in classes])
    sem = float(s @ (h / n))
    size = params.size_ref / (params.size_ref + n)
    gsd = params.default_gsd_m if gsd_m is None or not gsd_m > 0 else gsd_m
    res = min(1.0, params.gsd_ref_m / gsd)
    w = np.array([params.w_semantic, params.w_concentration, params.w_size, params.w_resolution])
    score = float(w @ np.array([sem, conc, size, res]) / w.sum())
    level = risk_level(score, tau_mid=params.tau_mid, tau_high=params.tau_high)
    return RiskAssessment(score, level, sem, conc, size, res)
