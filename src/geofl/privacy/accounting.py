"""Per-client privacy accounting: every private release is a ``dp_accounting`` DpEvent.

Release steps and private trainers report what they released in their client-local log as
a JSON-ready *event spec* (the client's ledger keeps these, and the run directory keeps
each client's list so ε can be recomputed offline):

* ``{"mechanism": "gaussian", "noise_multiplier": z}`` — one Gaussian release of an update
  clipped to its sensitivity (000's update perturbation; update-level DP);
* ``{"mechanism": "poisson_gaussian", "noise_multiplier": σ, "sampling_probability": q,
  "count": n}`` — n DP-SGD steps, each the Gaussian mechanism on a Poisson-sampled batch
  with rate q (001 Eq. 14–18; record-level DP, Abadi et al. 2016, Mironov et al. 2019).

The engine composes each client's events into its own accountant and reports ε(δ) per
client and the maximum. Composition is over the rounds a client actually took part in.
No amplification by *client* sampling is claimed: that a client took part is public here
(it uploads), and geofl's fixed-size cohort draw is not the Poisson sampling the
amplification theorems assume; the bound stays the conservative one of composing the
client's own releases (Mironov 2017, Prop. 1 and 3 for RDP; Koskela et al. 2020 for PLD).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

import dp_accounting as dpa
import numpy as np
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from pydantic import BaseModel, ConfigDict, Field

from geofl.privacy.rdp_sampled_gaussian import rdp_poisson_gaussian
from geofl.registry import Registry

log = logging.getLogger("geofl")


class _QuietUnconvergedOrders(logging.Filter):
    """dp_accounting logs a warning per RDP order whose series does not converge (large q
    with fractional orders) and excludes that order, which is correct and harmless: ε is
    the minimum over the remaining orders. One line per order per (q, σ) floods the run's
    output, so those lines are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


logging.getLogger("absl").addFilter(_QuietUnconvergedOrders())

__all__ = [
    "ACCOUNTANTS",
    "DP_EVENTS_FILE",
    "MAX_RELEASES",
    "MIN_SAMPLING_RATE",
    "NOISE_MULTIPLIER_RANGE",
    "TF_PRIVACY_ORDERS",
    "Accountant",
    "DpLedger",
    "PldParams",
    "RdpParams",
    "dp_event_from_log",
    "dp_event_from_spec",
    "dp_events_json",
    "epsilon_summary",
    "read_dp_events",
]

#: Per seed directory: every client's ledger, to recompute ε offline.
DP_EVENTS_FILE = "dp_events.json"

#: A ledger key: ``(q, z)`` of one (Poisson-sampled, if q < 1) Gaussian release.
EventKey = tuple[float, float]


class Accountant(Protocol):
    """Composes the private releases of each client and answers ε for a given δ."""

    def record(self, client_id: int, event: dpa.DpEvent) -> None:
        """Add one private release to the client's ledger."""
        ...

    def epsilon(self, client_id: int, delta: float) -> float:
        """ε(δ) of everything the client has released so far (inf if unbounded)."""
        ...

    def epsilon_with(self, client_id: int, extra: Sequence[dpa.DpEvent], delta: float) -> float:
        """ε(δ) the client would have after also releasing ``extra`` (a budget check)."""
        ...

    def clients(self) -> list[int]:
        """Ids of the clients with at least one recorded release."""
        ...


#: Accountant registry: ``rdp``, ``pld``.
ACCOUNTANTS: Registry[Accountant] = Registry("accountant")


#: The noise multipliers σ the accountants are numerically defined for: σ² and 1/σ² stay
#: finite normal floats with room to spare. Beyond it dp_accounting divides by σ² = 0
#: (σ = 1e-300) or overflows exp(·/σ²) and cosh (σ = 1e300), and its PLD accountant
#: reports ε = 0 for σ = 1e-160; ``geofl epsilon`` refuses σ outside it.
NOISE_MULTIPLIER_RANGE = (1e-150, 1e150)
#: The smallest sampling rate q accounted: the smallest normal float (dp_accounting's PLD
#: raises on a subnormal q, and its RDP series take seconds there).
MIN_SAMPLING_RATE = sys.float_info.min
#: The most releases one event composes: dp_accounting's PLD self-composition takes the
#: count as a C ``ssize_t``.
MAX_RELEASES = 2**63 - 1


def dp_event_from_spec(spec: Mapping[str, Any]) -> dpa.DpEvent:
    """The DpEvent of one ledger entry (see the module docstring for the two formats).

    Raises:
        ValueError: Unknown mechanism or out-of-range parameters.
    """
    mech = spec.get("mechanism")
    z = float(spec["noise_multiplier"])
    if math.isnan(z):  # NaN ≤ 0 is False: it would pass as a private release with ε = 0
        raise ValueError(f"{mech} event with noise_multiplier=nan")
    if mech == "gaussian":
        return dpa.GaussianDpEvent(z) if z > 0 else dpa.NonPrivateDpEvent()
    if mech == "poisson_gaussian":
        q, count = float(spec["sampling_probability"]), int(spec.get("count", 1))
        if not 0.0 <= q <= 1.0 or count < 0:
            raise ValueError(f"poisson_gaussian event with q={q}, count={count}")
        if z <= 0:
            return dpa.NonPrivateDpEvent()
        step = dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))
        return step if count == 1 else dpa.SelfComposedDpEvent(step, count)
    raise ValueError(f"unknown dp_event mechanism {mech!r}")


def dp_event_from_log(report: Mapping[str, Any]) -> dpa.DpEvent | None:
    """The DpEvent a release step or trainer reported in its local-log entry, if any."""
    spec = report.get("dp_event")
    return dp_event_from_spec(spec) if spec else None


def _flatten(event: dpa.DpEvent, count: int = 1) -> Iterable[tuple[EventKey, int]]:
    """``((q, z), count)`` pairs of a supported event (raises on anything else)."""
    if isinstance(event, dpa.GaussianDpEvent):
        yield (1.0, float(event.noise_multiplier)), count
    elif (
        isinstance(event, dpa.PoissonSampledDpEvent)
        and isinstance(event.event, dpa.GaussianDpEvent)
        and event.sampling_probability > 0
    ):
        yield (float(event.sampling_probability), float(event.event.noise_multiplier)), count
    elif isinstance(event, dpa.PoissonSampledDpEvent) and event.sampling_probability == 0:
        return
    elif isinstance(event, dpa.SelfComposedDpEvent):
        yield from _flatten(event.event, count * int(event.count))
    elif isinstance(event, dpa.ComposedDpEvent):
        for e in event.events:
            yield from _flatten(e, count)
    else:
        raise ValueError(f"unsupported DpEvent {type(event).__name__}")


def _key_event(key: EventKey) -> dpa.DpEvent:
    q, z = key
    gauss = dpa.GaussianDpEvent(z)
    return gauss if q >= 1.0 else dpa.PoissonSampledDpEvent(q, gauss)


class DpLedger:
    """Per-client multiset of (q, z) releases (identical releases are counted)."""

    def __init__(self) -> None:
        self._events: dict[int, Counter[EventKey]] = defaultdict(Counter)
        self._non_private: set[int] = set()

    def record(self, client_id: int, event: dpa.DpEvent) -> None:
        """Add releases: Gaussian, Poisson-sampled Gaussian, their (self-)compositions, or a
        non-private event (which makes the client's ε infinite)."""
        if isinstance(event, dpa.NonPrivateDpEvent):
            self._non_private.add(client_id)
            return
        pairs = list(_flatten(event))  # validate everything before changing the ledger
        for key, count in pairs:
            self._events[client_id][key] += count
            self._added(client_id, key, count)

    def _added(self, client_id: int, key: EventKey, count: int) -> None:
        """Hook for accountants that keep running totals."""

    def clients(self) -> list[int]:
        """Clients with at least one recorded release."""
        return sorted(set(self._events) | self._non_private)

    def counts(self, client_id: int) -> Mapping[EventKey, int]:
        """The client's releases: ``(q, z) → count``."""
        return dict(self._events.get(client_id, {}))

    def composed(self, client_id: int, extra: Sequence[dpa.DpEvent] = ()) -> dpa.DpEvent | None:
        """All of a client's releases (and ``extra``) as one event (None if non-private)."""
        if client_id in self._non_private:
            return None
        parts = [
            dpa.SelfComposedDpEvent(_key_event(key), count)
            for key, count in sorted(self._events.get(client_id, {}).items())
        ]
        return dpa.ComposedDpEvent([*parts, *extra])


#: The RDP orders of TensorFlow Privacy's classic DP-SGD tutorials, which 001 §6.1.2
#: describes as "α ∈ {1.1, 1.2, …, 64}": 1.1 … 10.9 in steps of 0.1, then 12 … 63.
TF_PRIVACY_ORDERS: tuple[float, ...] = tuple(
    [round(1 + x / 10.0, 1) for x in range(1, 100)] + [float(a) for a in range(12, 64)]
)


class RdpParams(BaseModel):
    """Rényi-DP accountant parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    orders: Literal["dp_accounting", "tf_privacy"] = Field(
        "dp_accounting",
        description="base RDP orders: dp_accounting's defaults, or TF Privacy's "
        "{1.1, 1.2, …, 10.9, 12, …, 63} (001 §6.1.2)",
    )
    extra_orders: list[float] = Field(
        default_factory=lambda: [1.05],
        description="RDP orders added to the base ones (1.05 helps ε in the hundreds; "
        "orders ≤ 1.01 only matter for ε > ~10⁴ and dp_accounting drops them for sampled "
        "mechanisms whose series does not converge)",
    )


@lru_cache(maxsize=4096)
def _rdp_per_release(key: EventKey, orders: tuple[float, ...]) -> np.ndarray:
    """``[A]`` RDP of one release at each order (computed once per (q, z)).

    Every key is a (Poisson-sampled, if q < 1) Gaussian (:func:`_flatten`): its curve comes
    from the vectorised Mironov et al. (2019) §3.3 sums of
    :func:`~geofl.privacy.rdp_sampled_gaussian.rdp_poisson_gaussian`, which equal
    dp_accounting's ``RdpAccountant`` to ~1e-11 relative (where RDP > 1e-6) at ~1/35 of its
    cost (benchmarks/bench_dp_step.py --only accountant)."""
    q, z = key
    rdp = rdp_poisson_gaussian(q=q, noise_multiplier=z, orders=orders)
    rdp.setflags(write=False)
    return rdp


class _Rdp(DpLedger):
    """RDP composition with a running ``[A]`` RDP curve per client: recording a release is
    one vector add, ε(δ) one conversion (Canonne, Kamath & Steinke 2020, via
    ``dp_accounting.rdp.compute_epsilon``), so 100 clients cost well under 50 ms a round
    once their (q, z) curves are cached; each new (q, z) costs one curve (~1.5 ms CPU on the
    default orders, most of it the fractional orders' slowly converging series)."""

    def __init__(self, params: RdpParams) -> None:
        super().__init__()
        base = (
            rdp_privacy_accountant.DEFAULT_RDP_ORDERS
            if params.orders == "dp_accounting"
            else TF_PRIVACY_ORDERS
        )
        self.orders = tuple(sorted(set(base) | set(params.extra_orders)))
        self._curves: dict[int, np.ndarray] = {}

    def _added(self, client_id: int, key: EventKey, count: int) -> None:
        curve = self._curves.get(client_id)
        step = _rdp_per_release(key, self.orders) * count
        self._curves[client_id] = step if curve is None else curve + step

    def _eps(self, curve: np.ndarray, delta: float) -> float:
        eps, _ = rdp_privacy_accountant.compute_epsilon(list(self.orders), curve, delta)
        return float(eps)

    def epsilon(self, client_id: int, delta: float) -> float:
        if client_id in self._non_private:
            return math.inf
        curve = self._curves.get(client_id)
        return 0.0 if curve is None else self._eps(curve, delta)

    def epsilon_with(self, client_id: int, extra: Sequence[dpa.DpEvent], delta: float) -> float:
        if client_id in self._non_private or any(
            isinstance(e, dpa.NonPrivateDpEvent) for e in extra
        ):
            return math.inf
        curve = self._curves.get(client_id, np.zeros(len(self.orders)))
        for event in extra:
            for key, count in _flatten(event):
                curve = curve + _rdp_per_release(key, self.orders) * count
        return self._eps(curve, delta)

    def epsilon_of(self, event: dpa.DpEvent, delta: float) -> float:
        """ε(δ) of one composed event (the plain dp_accounting path)."""
        acc = rdp_privacy_accountant.RdpAccountant(list(self.orders))
        acc.compose(event)
        return float(acc.get_epsilon(delta))


@ACCOUNTANTS.register("rdp", params=RdpParams)
def build_rdp(params: RdpParams) -> Accountant:
    """Rényi-DP composition (Mironov 2017; subsampled Gaussian: Mironov et al. 2019)."""
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
        return self.epsilon_with(client_id, (), delta)

    def epsilon_with(self, client_id: int, extra: Sequence[dpa.DpEvent], delta: float) -> float:
        event = self.composed(client_id, extra)
        if event is None or any(isinstance(e, dpa.NonPrivateDpEvent) for e in extra):
            return math.inf
        zs = [z for _, z in self._events.get(client_id, {})]
        zs += [z for e in extra for (_, z), _ in _flatten(e)]
        if not zs:
            return 0.0
        if min(zs) < PLD_MIN_NOISE_MULTIPLIER:
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
    record_level: bool = False,
) -> dict[str, Any]:
    """ε per client and the maximum, JSON-ready, with the range of noise multipliers seen.

    Args:
        accountant: The run's accountant.
        delta: Target δ.
        noise_multipliers: Every z recorded (for the report's noise range).
        kind: Accountant name, for the record.
        record_level: Whether the releases were DP-SGD steps (one training record's
            neighbour) rather than whole-update perturbations (one client's update).
    """
    per_client = {str(c): accountant.epsilon(c, delta) for c in accountant.clients()}
    zs = list(noise_multipliers)
    finite = [e for e in per_client.values() if math.isfinite(e)]
    neighbouring = (
        "add or remove one training record of a client (DP-SGD, record-level DP), "
        "composed over the client's local steps in the rounds it took part in"
        if record_level
        else "replace one client's data (its clipped update moves by ≤ 2C in L2): "
        "update-level DP per round, z = σ/(2C)"
    )
    return {
        "accountant": kind,
        "delta": delta,
        "epsilon_per_client": per_client,
        "epsilon_max": max(per_client.values()) if per_client else None,
        "epsilon_min": min(finite) if finite else None,
        "noise_multiplier_min": min(zs) if zs else None,
        "noise_multiplier_max": max(zs) if zs else None,
        "record_level": record_level,
        "neighbouring": neighbouring,
    }


def dp_events_json(
    ledgers: Mapping[str, Sequence[Mapping[str, Any]]], privacy: Any
) -> dict[str, Any]:
    """The JSON of :data:`DP_EVENTS_FILE`: each client's event specs in release order.

    Args:
        ledgers: Client id → its ledger.
        privacy: The run's privacy config (accountant, δ), recorded for reference.
    """
    return {
        "format": 1,
        "accountant": privacy.accountant.name,
        "delta": privacy.delta,
        "how_to_recompute": (
            "geofl.privacy.accounting.read_dp_events(path)[client] is the client's "
            "dp_accounting ComposedDpEvent; compose it into any dp_accounting accountant"
        ),
        "clients": {k: [dict(s) for s in v] for k, v in ledgers.items()},
    }


def read_dp_events(path: Any) -> dict[int, dpa.DpEvent]:
    """Each client's releases from a :data:`DP_EVENTS_FILE` as one ``ComposedDpEvent``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {
        int(k): dpa.ComposedDpEvent([dp_event_from_spec(s) for s in specs])
        for k, specs in data["clients"].items()
    }
