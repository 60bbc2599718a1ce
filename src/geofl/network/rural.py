"""Rural terrestrial link model (003 §2.3.1, §3.1.3, Table 3).

Each tractor gets a nominal profile 3G / 4G / 5G in the shares 31 / 49 / 20 % (exact
counts by largest remainder, placed by a seeded permutation). Every round it draws a link
state (S, B, L) from its profile's ranges — uniform, or a normal centred mid-range with
σ = range / 4 clipped to the range (the paper's "profile-specific distributions ...
clipped to the corresponding profile ranges") — and an outage with probability p_fail.
A payload of n bytes takes ``L + 8n / B`` seconds (latency once, then serialisation at the
uplink rate) and arrives only within the upload deadline ℓ_max. Every draw uses a
generator derived from (seed, round, client, "link"), so a tractor's link does not depend
on who else is simulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from geofl.network.nqi import PROFILE_NAMES, PROFILES
from geofl.rng import numpy_generator

__all__ = [
    "LinkStates",
    "RuralParams",
    "assign_profiles",
    "frames_delivered",
    "sample_link_states",
    "transfer_time_s",
]


class RuralParams(BaseModel):
    """Parameters of the rural link model (003 §2.3.1, §3.1.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shares: tuple[float, float, float] = Field(
        (0.31, 0.49, 0.20), description="shares of 3G, 4G, 5G tractors (sum 1)"
    )
    profile_source: Literal["shares", "data"] = Field(
        "shares",
        description="where each tractor's nominal 3G/4G/5G profile comes from: `shares` "
        "(drawn in exactly those shares, regardless of region) or `data` (the dataset's "
        "per-sample `link_profile`, e.g. synthetic_agri's per-region connectivity of 003 "
        "Table 12; a client holding several takes its most common one)",
    )
    p_fail: float = Field(0.1, ge=0.0, le=1.0, description="per-round outage probability")
    deadline_s: float = Field(10.0, gt=0.0, description="upload deadline ℓ_max (s)")
    max_retries: int = Field(3, ge=0, description="R_max: retries of a buffered update")
    distribution: Literal["uniform", "clipped_normal"] = Field(
        "uniform", description="how (S, B, L) are drawn within the profile ranges"
    )
    forward: bool = Field(True, description="forward via a higher-NQI neighbour in outage")
    neighbour_mbps: float = Field(
        20.0, gt=0.0, description="tractor → neighbour local link rate (Mbps)"
    )
    tx_power_w: tuple[float, float, float] = Field(
        (1.0, 1.0, 1.0), description="P_tx per profile for the energy proxy Σ P_tx·t_i"
    )

    @model_validator(mode="after")
    def _check(self) -> RuralParams:
        if min(self.shares) < 0 or abs(sum(self.shares) - 1.0) > 1e-9:
            raise ValueError(f"shares {self.shares} must be non-negative and sum to 1")
        return self


@dataclass(frozen=True)
class LinkStates:
    """One round's link states of K tractors.

    Attributes:
        values: ``[K, 3]`` raw (S dBm, B Mbps, L ms).
        outage: ``[K]`` bool, the terrestrial link is down this round.
    """

    values: np.ndarray
    outage: np.ndarray


def assign_profiles(num_clients: int, shares: Sequence[float], seed: int) -> np.ndarray:
    """``[K]`` profile indices (0 = 3G, 1 = 4G, 2 = 5G) in exactly the given shares.

    Counts by largest remainder (120 tractors → 37 / 59 / 24), order by a permutation from
    the generator (seed, "network", "profiles").
    """
    raw = np.asarray(shares, dtype=np.float64) * num_clients
    counts = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: num_clients - int(counts.sum())]] += 1
    labels = np.repeat(np.arange(len(shares)), counts)
    return numpy_generator(seed, "network", "profiles").permutation(labels)


def profiles_from_data(link_profile: np.ndarray, indices: Sequence[np.ndarray]) -> np.ndarray:
    """``[K]`` nominal profile of each client from its samples' ``link_profile`` (0 = 3G,
    1 = 4G, 2 = 5G): the most common one (ties: the slower profile), so a tractor whose
    blocks all share its uplink gets exactly that uplink.

    Raises:
        ValueError: a client without samples, or with an unknown (negative or > 2) profile.
    """
    out = np.empty(len(indices), dtype=np.int64)
    for k, idx in enumerate(indices):
        values = np.asarray(link_profile)[np.asarray(idx, dtype=np.int64)]
        if values.size == 0:
            raise ValueError(f"client {k} holds no sample to take its link profile from")
        if values.min() < 0 or values.max() >= len(PROFILE_NAMES):
            raise ValueError(
                f"client {k} has samples with unknown link_profile "
                f"{sorted(set(values.tolist()) - set(range(len(PROFILE_NAMES))))}"
            )
        out[k] = int(np.argmax(np.bincount(values, minlength=len(PROFILE_NAMES))))
    return out


def _draw(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, how: str) -> np.ndarray:
    if how == "uniform":
        return rng.uniform(lo, hi)
    out: np.ndarray = np.clip(rng.normal((lo + hi) / 2, (hi - lo) / 4), lo, hi)
    return out


def sample_link_states(
    profiles: np.ndarray, params: RuralParams, seed: int, round_idx: int
) -> LinkStates:
    """Each tractor's (S, B, L) and outage flag in ``round_idx`` (003 §2.3.1)."""
    table = np.stack([PROFILES[n].as_array() for n in PROFILE_NAMES])
    values = np.empty((len(profiles), 3))
    outage = np.empty(len(profiles), bool)
    for k, p in enumerate(profiles):
        rng = numpy_generator(seed, "round", round_idx, "client", k, "link")
        rows = table[int(p)]
        values[k] = _draw(rng, rows[:, 0], rows[:, 1], params.distribution)
        outage[k] = rng.random() < params.p_fail
    return LinkStates(values, outage)


def transfer_time_s(
    nbytes: float | np.ndarray, bandwidth_mbps: float | np.ndarray, latency_ms: float | np.ndarray
) -> np.ndarray:
    """Seconds to deliver ``nbytes``: ``L / 1000 + 8 · nbytes / (B · 10⁶)``."""
    return np.asarray(latency_ms) / 1e3 + 8.0 * np.asarray(nbytes) / (
        np.asarray(bandwidth_mbps) * 1e6
    )


def frames_delivered(
    frame_bytes: Sequence[int], bandwidth_mbps: float, latency_ms: float, deadline_s: float
) -> tuple[int, float]:
    """How many frames sent back to back finish by the deadline, and the airtime used.

    Frames go in order over one link: frame j ends at ``L + 8·Σ_{i≤j} bytes_i / B``.
    Transmission stops at the deadline, so airtime is at most ``deadline_s − L``.
    """
    ends = transfer_time_s(np.cumsum(frame_bytes), bandwidth_mbps, latency_ms)
    done = int(np.searchsorted(ends, deadline_s, side="right"))
    airtime = min(float(ends[-1]), deadline_s) - latency_ms / 1e3 if len(ends) else 0.0
    return done, max(0.0, airtime)
