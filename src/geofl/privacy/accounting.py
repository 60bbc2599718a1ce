"""Per-client privacy accounting: every private release is a ``dp_accounting`` DpEvent.

Release steps that add calibrated noise report ``{"dp_event": {"mechanism": "gaussian",
"noise_multiplier": z}}`` in their client-local log (:mod:`geofl.privacy.mechanisms`). The
engine feeds each one to the run's accountant under the releasing client's id; at the end
it reports ε(δ) per client and the maximum.

Composition is over the rounds a client actually took part in. No amplification by
subsampling is claimed: geofl's participation sampling draws a fixed-size set without
replacement, which is not the Poisson sampling the amplification theorems assume, so the
bound stays the conservative one of Gaussian composition (Mironov 2017, Prop. 7 and
Cor. 3 for RDP; Meiser & Mohammadi 2018 / Koskela et al. 2020 for PLD).
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

import dp_accounting as dpa
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from pydantic import BaseModel, ConfigDict, Field

from geofl.registry import Registry

log = logging.getLogger("geofl")

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "DpLedger",
    "PldParams",
    "RdpParams",
    "dp_event_from_log",
    "epsilon_summary",
]


class Accountant(Protocol):
    """Composes the private releases of each client and answers ε for a given δ."""

    def record(self, client_id: int, event: dpa.DpEvent) -> None:
        """Add one private release to the client's ledger."""
        ...

    def epsilon(self, client_id: int, delta: float) -> float:
        """ε(δ) of everything the client has released so far (inf if unbounded)."""
        ...

    def clients(self) -> list[int]:
        """Ids of the clients with at least one recorded release."""
        ...


#: Accountant registry: ``rdp``, ``pld``.
ACCOUNTANTS: Registry[Accountant] = Registry("accountant")


def dp_event_from_log(report: Mapping[str, Any]) -> dpa.DpEvent | None:
    """The DpEvent a release step reported in its local-log entry, if any."""
    spec = report.get("dp_event")
    if not spec:
        return None
    if spec.get("mechanism") != "gaussian":
        raise ValueError(f"unknown dp_event mechanism {spec.get('mechanism')!r}")
    z = float(spec["noise_multiplier"])
    return dpa.GaussianDpEvent(z) if z > 0 else dpa.NonPrivateDpEvent()


class DpLedger:
    """Per-client multiset of Gaussian noise multipliers (identical events are counted)."""

    def __init__(self) -> None:
        self._events: dict[int, Counter[float]] = defaultdict(Counter)
        self._non_private: set[int] = set()

    def record(self, client_id: int, event: dpa.DpEvent) -> None:
        """Add one release; only Gaussian and non-private events are supported."""
        if isinstance(event, dpa.GaussianDpEvent):
            self._events[client_id][float(event.noise_multiplier)] += 1
        elif isinstance(event, dpa.NonPrivateDpEvent):
            self._non_private.add(client_id)
        else:
            raise ValueError(f"unsupported DpEvent {type(event).__name__}")

    def clients(self) -> list[int]:
        """Clients with at least one recorded release."""
        return sorted(set(self._events) | self._non_private)

    def composed(self, client_id: int) -> dpa.DpEvent | None:
        """All of a client's releases as one ComposedDpEvent (None if non-private)."""
        if client_id in self._non_private:
            return None
        return dpa.ComposedDpEvent(
            [
                dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), count)
                for z, count in sorted(self._events[client_id].items())
            ]
        )


class RdpParams(BaseModel):
    """Rényi-DP accountant parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    extra_orders: list[float] = Field(
        default_factory=lambda: [1.001, 1.01, 1.05],
        description="RDP orders added to dp_accounting's defaults (small ones help huge ε)",
    )


class _Rdp(DpLedger):
    def __init__(self, params: RdpParams) -> None:
        super().__init__()
        self.orders = sorted(
            set(rdp_privacy_accountant.DEFAULT_RDP_ORDERS) | set(params.extra_orders)
        )

    def epsilon(self, client_id: int, delta: float) -> float:
        event = self.composed(client_id)
        return math.inf if event is None else self.epsilon_of(event, delta)

    def epsilon_of(self, event: dpa.DpEvent, delta: float) -> float:
        """ε(δ) of one composed event."""
        acc = rdp_privacy_accountant.RdpAccountant(self.orders)
        acc.compose(event)
        return float(acc.get_epsilon(delta))


@ACCOUNTANTS.register("rdp", params=RdpParams)
def build_rdp(params: RdpParams) -> Accountant:
    """Rényi-DP composition of Gaussian releases (Mironov 2017), via dp_accounting."""
    return _Rdp(params)


#: Below this noise multiplier the PLD accountant defers to RDP (memory; see ``_Pld``).
PLD_MIN_NOISE_MULTIPLIER = 0.05


class PldParams(BaseModel):
    """Privacy-loss-distribution accountant parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value_discretization_interval: float = Field(1e-3, gt=0.0)


class _Pld(DpLedger):
    def __init__(self, params: PldParams) -> None:
        super().__init__()
        self.interval = params.value_discretization_interval

    def epsilon(self, client_id: int, delta: float) -> float:
        event = self.composed(client_id)
        if event is None:
            return math.inf
        if min(self._events[client_id]) < PLD_MIN_NOISE_MULTIPLIER:
            # The PLD of so weak a Gaussian needs 1e8-1e9 discretisation points (memory);
            # RDP bounds these astronomically large ε just as well.
            log.info("client %d: z < %g, PLD defers to RDP", client_id, PLD_MIN_NOISE_MULTIPLIER)
            return _Rdp(RdpParams()).epsilon_of(event, delta)
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=self.interval)
        acc.compose(event)
        return float(acc.get_epsilon(delta))


@ACCOUNTANTS.register("pld", params=PldParams)
def build_pld(params: PldParams) -> Accountant:
    """Privacy-loss-distribution composition (tight for moderate ε; slow for huge ε)."""
    return _Pld(params)


def epsilon_summary(
    accountant: Accountant,
    *,
    delta: float,
    noise_multipliers: Iterable[float] = (),
    kind: Literal["rdp", "pld"] | str = "rdp",
) -> dict[str, Any]:
    """ε per client and the maximum, JSON-ready, with the range of noise multipliers seen.

    Args:
        accountant: The run's accountant.
        delta: Target δ.
        noise_multipliers: Every z recorded (for the report's "z = σ/(2C)" range).
        kind: Accountant name, for the record.
    """
    per_client = {str(c): accountant.epsilon(c, delta) for c in accountant.clients()}
    zs = list(noise_multipliers)
    finite = [e for e in per_client.values() if math.isfinite(e)]
    return {
        "accountant": kind,
        "delta": delta,
        "epsilon_per_client": per_client,
        "epsilon_max": max(per_client.values()) if per_client else None,
        "epsilon_min": min(finite) if finite else None,
        "noise_multiplier_min": min(zs) if zs else None,
        "noise_multiplier_max": max(zs) if zs else None,
        "neighbouring": (
            "replace one client's data (its clipped update moves by ≤ 2C in L2): "
            "update-level DP per round, z = σ/(2C)"
        ),
    }
