"""Network Quality Index (003 Eq. 3–4 = Eq. 9–10) and its profile ranges (Table 3).

``NQI = w₁·S̃ + w₂·B̃ − w₃·L̃`` over min–max normalised signal strength S (dBm), uplink
bandwidth B (Mbps) and latency L (ms), with w ≥ 0, Σw = 1 (default 0.35, 0.45, 0.20,
"bandwidth-dominant rural regime", §3.1.3). The normalisation ranges are "obtained from
the profile-specific ranges used in the simulator" (Eq. 9): by default each tractor
normalises by the ranges of *its* profile (``per_profile``); ``global`` uses the envelope
of all profiles instead, so a 5G link scores above a 3G one at equal relative position —
the paper does not say which, so it is a parameter. Values outside the range are clipped
to [0, 1] before weighting. Everything is vectorised over tractors (``[K]`` arrays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "PROFILES",
    "PROFILE_NAMES",
    "LinkRanges",
    "NqiParams",
    "normalise",
    "nqi",
    "ranges_for",
]


@dataclass(frozen=True)
class LinkRanges:
    """Min/max of S (dBm), B (Mbps), L (ms) of one cellular profile (003 Table 3)."""

    s_min: float
    s_max: float
    b_min: float
    b_max: float
    l_min: float
    l_max: float

    def as_array(self) -> np.ndarray:
        """``[3, 2]`` rows (S, B, L) of (min, max)."""
        return np.array(
            [[self.s_min, self.s_max], [self.b_min, self.b_max], [self.l_min, self.l_max]]
        )


#: 003 Table 3, uplink-focused rural regimes.
PROFILES: dict[str, LinkRanges] = {
    "3G": LinkRanges(-112.0, -85.0, 0.2, 2.0, 150.0, 500.0),
    "4G": LinkRanges(-110.0, -80.0, 2.0, 20.0, 60.0, 150.0),
    "5G": LinkRanges(-105.0, -75.0, 10.0, 60.0, 20.0, 60.0),
}
#: Profile index → name (index order used in ``[K]`` profile arrays).
PROFILE_NAMES: tuple[str, ...] = ("3G", "4G", "5G")


class NqiParams(BaseModel):
    """NQI weights and thresholds (003 §3.1.3), checked at config load."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: tuple[float, float, float] = Field(
        (0.35, 0.45, 0.20), description="(w1, w2, w3) of S, B, L; non-negative, sum 1"
    )
    tau: float = Field(0.35, description="τ_NQI: below it a tractor does not transmit")
    t_chunked: float = Field(0.55, description="NQI from which the chunked pipeline is used")
    t_fallback: float = Field(0.75, description="NQI from which the light pipeline is used")
    normalisation: Literal["per_profile", "global"] = Field(
        "per_profile", description="ranges of Eq. 9: the tractor's profile, or all profiles"
    )

    @model_validator(mode="after")
    def _check(self) -> NqiParams:
        w = self.weights
        if min(w) < 0 or not math.isclose(sum(w), 1.0, abs_tol=1e-9):
            raise ValueError(f"weights {w} must be non-negative and sum to 1 (Eq. 10)")
        if not self.tau <= self.t_chunked <= self.t_fallback:
            raise ValueError(
                f"thresholds tau {self.tau} ≤ t_chunked {self.t_chunked} ≤ t_fallback "
                f"{self.t_fallback} must be in ascending order"
            )
        return self


def ranges_for(profiles: np.ndarray, normalisation: str = "per_profile") -> np.ndarray:
    """``[K, 3, 2]`` normalisation ranges of tractors with profile indices ``profiles [K]``."""
    table = np.stack([PROFILES[n].as_array() for n in PROFILE_NAMES])  # [3 profiles, 3, 2]
    if normalisation == "global":
        env = np.stack([table[:, :, 0].min(0), table[:, :, 1].max(0)], axis=1)
        return np.broadcast_to(env, (len(profiles), 3, 2))
    return table[np.asarray(profiles, dtype=np.int64)]


def normalise(values: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """Eq. 9: ``(x − min) / (max − min)`` clipped to [0, 1].

    Args:
        values: ``[K, 3]`` raw (S, B, L).
        ranges: ``[K, 3, 2]`` (min, max) per tractor and indicator.
    """
    lo, hi = ranges[..., 0], ranges[..., 1]
    out: np.ndarray = np.clip((values - lo) / (hi - lo), 0.0, 1.0)
    return out


def nqi(values: np.ndarray, ranges: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Eq. 10 for every tractor, or for every weight vector at once.

    Args:
        values: ``[K, 3]`` raw (S, B, L).
        ranges: ``[K, 3, 2]``.
        weights: ``[3]`` → result ``[K]``; or ``[W, 3]`` → result ``[W, K]``.
    """
    norm = normalise(values, ranges) * np.array([1.0, 1.0, -1.0])
    out: np.ndarray = np.asarray(weights, dtype=np.float64) @ norm.T
    return out
