"""The ``method.hierarchy`` section: paper 003's space-assisted hierarchy (§2.2, Alg. 2–3,
§2.3.2–2.3.4), opt-in per method like ``method.uplink``. Checked at config load: κ ≥ 0,
the driver deadline inside the round period, trim fraction below one half, α + β ≤ 1, a
TLE file that exists."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from geofl.config.base import Component, _OmitUnset
from geofl.network.contacts import classify
from geofl.network.orbits import parse_tles
from geofl.network.spacelink import SpaceLinkParams

__all__ = ["HierarchyConfig", "LeoConfig", "PersonalizationConfig"]


class LeoConfig(BaseModel):
    """The LEO/GEO layer (003 §2.3.2, §3.1.3: 8 near-polar LEOs, one GEO, 30 s slots,
    p_LEO-fail = 0.05)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contacts: Literal["orbit", "ideal"] = Field(
        "orbit",
        description="orbit: contact windows and relay slots from sgp4-propagated TLEs; "
        "ideal: zero delay — cluster c always reaches LEO c mod n, every LEO always "
        "reaches the GEO (the synchronous reference)",
    )
    n: int = Field(8, ge=1, le=1000, description="N_LEO satellites")
    planes: int = Field(4, ge=1, le=1000, description="orbital planes of the synthetic Walker set")
    altitude_km: float = Field(550.0, gt=100.0, lt=35_000.0)
    inclination_deg: float = Field(97.6, ge=0.0, le=180.0)
    geo_longitude_deg: float = Field(-98.0, ge=-180.0, le=180.0)
    elevation_mask_deg: float = Field(10.0, ge=0.0, lt=90.0)
    slot_s: float = Field(30.0, gt=0.0, description="contact-window slot δ (s)")
    p_leo_fail: float = Field(0.05, ge=0.0, le=1.0, description="a LEO pass is dropped w.p.")
    epoch: datetime = Field(
        datetime(2026, 1, 1, tzinfo=UTC), description="simulated time 0 (UTC), the TLE epoch"
    )
    tle_file: Path | None = Field(
        None,
        description="real TLEs (2- or 3-line), LEOs first and the GEO last; None: the "
        "synthetic Walker constellation",
    )

    @model_validator(mode="after")
    def _tle_file_parses(self) -> LeoConfig:
        if self.tle_file is not None:
            if not self.tle_file.is_file():
                raise ValueError(f"tle_file {str(self.tle_file)!r} is not a file: give a TLE file")
            try:
                text = self.tle_file.read_text()
            except (OSError, UnicodeDecodeError) as err:
                raise ValueError(f"tle_file {str(self.tle_file)!r}: {err}") from err
            leos, _ = classify(parse_tles(text, source=str(self.tle_file)))
            if len(leos) != self.n:
                raise ValueError(
                    f"tle_file {str(self.tle_file)!r} has {len(leos)} LEOs but n is "
                    f"{self.n}: set n to {len(leos)}"
                )
        if self.planes > self.n:
            raise ValueError(f"planes {self.planes} exceeds n {self.n}: use planes ≤ n")
        return self


class PersonalizationConfig(BaseModel):
    """On-tractor personalization w = α·ŵ + β·A_r + (1 − α − β)·w_i (003 §2.2.6)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(0.6, ge=0.0, le=1.0)
    beta: float = Field(0.2, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _convex(self) -> PersonalizationConfig:
        if self.alpha + self.beta > 1.0:
            raise ValueError(f"alpha + beta = {self.alpha + self.beta:g} > 1: lower one")
        return self


class HierarchyConfig(_OmitUnset):
    """Tractor → driver → LEO → GEO (003 §2.2, Alg. 3) driven by a simulated clock.

    The tiers' combiners (added later) stay out of the resolved config while unset, so run
    directories written before them resume (:class:`~geofl.config.base._OmitUnset`).
    """

    _OPTIONAL: ClassVar[tuple[str, ...]] = (
        "driver_aggregator",
        "leo_aggregator",
        "driver_weights",
        "suggest_after_s",
    )

    mode: Literal["async", "sync"] = Field(
        "async",
        description="async: the event clock (contacts, relays, staleness); sync: every "
        "tier in one round, staleness 0 (the reference the async mode reproduces with "
        "ideal contacts)",
    )
    round_s: float = Field(3600.0, gt=0.0, description="simulated seconds per global round")
    driver_deadline_s: float = Field(
        600.0, ge=0.0, description="driver FedAvg this many seconds into each round"
    )
    kappa: float = Field(0.5, ge=0.0, description="staleness decay κ (Eq. 8)")
    clip: float = Field(1.0, gt=0.0, description="RobustAvg clip C (§2.2.5)")
    trim_fraction: float = Field(0.1, ge=0.0, lt=0.5, description="RobustAvg trim β (§2.2.5)")
    redundancy_threshold: float = Field(
        0.999,
        gt=-1.0,
        le=1.0,
        description="LEO drops a driver model whose cosine to an earlier kept one reaches "
        "this (Alg. 3 line 3); 1: keep all but exact duplicates in direction",
    )
    geo_delta: Literal["model", "update"] = Field(
        "model",
        description="model: Δ_l = w̄_l − w^t (§2.2.5 Eq. 1 literally); update: Δ_l = the "
        "regional average of the tractors' updates, applied to the current model",
    )
    fairness: bool = Field(True, description="fairness weights (Eq. 11); false: staleness only")
    radius_km: float = Field(50.0, gt=0.0, description="cluster radius r (Alg. 2)")
    p_driver_fail: float = Field(
        0.0, ge=0.0, le=1.0, description="a driver fails at a deadline w.p. (re-election)"
    )
    staleness_metric: bool = Field(
        True,
        description="evaluate every regional model the GEO incorporates on the test split "
        "(Table 10's AUC per staleness bucket; reporting only, ~one test pass per LEO "
        "relay); false: skip",
    )
    train_s: float = Field(0.0, ge=0.0, description="simulated local-training time (s)")
    leo: LeoConfig = Field(default_factory=LeoConfig)
    links: SpaceLinkParams = Field(
        default_factory=SpaceLinkParams,
        description="the space hops: driver codec, envelopes, rates and powers (§2.2.8)",
    )
    driver_aggregator: Component | None = Field(
        None,
        description="the drivers' combiner over their tractors' models (weighted by "
        "driver_weights): "
        "mean, median, trimmed_mean or robust_avg; None: FedAvg (§2.1.6)",
    )
    driver_weights: Literal["samples", "uniform"] | None = Field(
        None,
        description="the driver's FedAvg weights over its tractors: samples (n_i / Σ n, "
        "FedAvg's usual weighting) or uniform (1/N, 003 §2.1.5 as written); None: samples",
    )
    leo_aggregator: Component | None = Field(
        None,
        description="the LEOs' combiner over the driver models a pass kept (equal weights): "
        "mean, median, trimmed_mean or robust_avg; None: regional FedAvg (§2.2.3)",
    )
    suggest_after_s: float | None = Field(
        None,
        gt=0.0,
        description="T_threshold of 003 §2.1.2: a tractor skipped below τ_NQI is suggested "
        "to park for T_suggestion = max(0, T_threshold − T_last) s, recorded per round in "
        "the hierarchy block's `parking`; None: off",
    )
    personalization: PersonalizationConfig | None = Field(
        None, description="on-tractor personalization (§2.2.6); None: tractors adopt ŵ"
    )

    @model_validator(mode="after")
    def _deadline_in_round(self) -> HierarchyConfig:
        if self.driver_deadline_s >= self.round_s:
            raise ValueError(
                f"driver_deadline_s {self.driver_deadline_s:g} must be below round_s "
                f"{self.round_s:g}: the driver aggregates inside the round"
            )
        return self
