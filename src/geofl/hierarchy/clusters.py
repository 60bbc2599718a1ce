"""Clusters and drivers: 003 Alg. 2 (§2.1.4) and health monitoring with failover (§2.1.6).

* :func:`haversine_km` — great-circle distance d(λ_i, λ_j) on the mean sphere
  R = 6371.0088 km (IUGG mean radius).
* :func:`capability_score` — the Consumption Ability Score ρ = w₁x'_p + w₂x'_e + w₃x'_l +
  w₄x'_c (§2.1.4). Normalisation (the paper only says "normalized"): min–max over the rows
  given (the whole fleet, so scores of different clusters are on one scale), or over fixed
  ``bounds``; compute, energy efficiency and concurrency map their minimum to 0 and maximum
  to 1; latency is lower-is-better, so it is *oriented*: x'_l = (max − x_l)/(max − min), the
  lowest latency scoring 1. (Writing ρ with −w₃L̃, as the NQI of Eq. 10 does, differs by the
  constant w₃ and elects the same driver.) A constant column contributes 0 to every row.
* :func:`form_clusters` — Alg. 2 literally: nodes grouped by model type (groups in
  ascending M); within a group, nodes in ascending id join the *first-created* cluster that
  has *any* member within r (so clusters chain: a member may be far from the others as long
  as it was within r of one of them when it joined; clusters are never merged), else start
  a new cluster. Cluster ids count up across groups in creation order.
* :func:`elect` — D_C = argmax_{i ∈ C} ρ_i over the members not excluded; ties (equal ρ)
  go to the lowest tractor id.
* :class:`DriverMonitor` — §2.1.6's health verification and re-election, with the buffer of
  updates a driver holds for its cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from scipy.spatial import cKDTree

from geofl.errors import HierarchyError
from geofl.hierarchy.fleet import Fleet, check_locations
from geofl.rng import numpy_generator

__all__ = [
    "EARTH_RADIUS_KM",
    "MAX_NEIGHBOUR_PAIRS",
    "Clusters",
    "DriverMonitor",
    "Failover",
    "MonitorState",
    "capability_score",
    "elect",
    "form_clusters",
    "haversine_km",
]

#: IUGG mean Earth radius (km).
EARTH_RADIUS_KM = 6371.0088
#: Column of :attr:`Fleet.capability` that is lower-is-better (latency, ms).
_LATENCY = 2

T = TypeVar("T")


def haversine_km(
    lat1: np.ndarray | float,
    lon1: np.ndarray | float,
    lat2: np.ndarray | float,
    lon2: np.ndarray | float,
) -> np.ndarray:
    """Great-circle distance (km) between points given in degrees; broadcasts.

    d = 2R·asin(√(sin²(Δφ/2) + cos φ₁ cos φ₂ sin²(Δλ/2))), R = :data:`EARTH_RADIUS_KM`.
    """
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp, dl = p2 - p1, np.radians(np.asarray(lon2) - np.asarray(lon1))
    a = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return np.asarray(2.0 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0))))


def capability_score(
    capability: np.ndarray,
    weights: Sequence[float] = (0.25, 0.25, 0.25, 0.25),
    *,
    bounds: tuple[Sequence[float], Sequence[float]] | None = None,
) -> np.ndarray:
    """ρ (003 §2.1.4) of every row of ``capability`` (normalisation: module docstring).

    Args:
        capability: ``[T, 4]`` raw (compute, energy efficiency, latency ms, concurrency).
        weights: (w₁, w₂, w₃, w₄), non-negative, not all zero.
        bounds: ``(low[4], high[4])`` fixed normalisation ranges (values are clipped into
            them); default: each column's min and max over the rows given.

    Returns:
        ``[T]`` float64 in [0, Σw].
    """
    x = np.asarray(capability, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 4 or not np.isfinite(x).all():
        raise HierarchyError(f"capability: expected finite [T, 4] reports, got {x.shape}")
    if w.shape != (4,) or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        raise HierarchyError(f"rho weights: need 4 non-negative weights, not all 0, got {w}")
    if bounds is None:
        lo, hi = x.min(axis=0), x.max(axis=0)
    else:
        lo, hi = (np.asarray(b, dtype=np.float64) for b in bounds)
        if lo.shape != (4,) or hi.shape != (4,) or not (hi >= lo).all():
            raise HierarchyError("rho bounds: need low[4] ≤ high[4]")
        x = np.clip(x, lo, hi)
    span = hi - lo
    norm = np.where(span > 0, (x - lo) / np.where(span > 0, span, 1.0), 0.0)
    norm[:, _LATENCY] = np.where(span[_LATENCY] > 0, 1.0 - norm[:, _LATENCY], 0.0)
    return np.asarray(norm @ w)


@dataclass(frozen=True)
class Clusters:
    """Alg. 2's output.

    Attributes:
        members: cluster c → its tractor ids, ascending.
        driver: cluster c → elected driver tractor id.
        cluster_of: ``[T]`` int64 cluster of every tractor.

    Raises:
        HierarchyError: on an empty cluster, a driver outside its cluster or a mismatched map.
    """

    members: tuple[tuple[int, ...], ...]
    driver: tuple[int, ...]
    cluster_of: np.ndarray

    def __post_init__(self) -> None:
        if len(self.driver) != len(self.members):
            raise HierarchyError("clusters.driver: need one driver per cluster")
        for c, (mem, d) in enumerate(zip(self.members, self.driver, strict=True)):
            if not mem:
                raise HierarchyError(f"clusters.members[{c}]: empty cluster; drop it")
            if d not in mem:
                raise HierarchyError(f"clusters.driver[{c}] = {d} is not a member of cluster {c}")
            if not (np.asarray(self.cluster_of)[list(mem)] == c).all():
                raise HierarchyError(f"clusters.cluster_of disagrees with members[{c}]")

    @property
    def num_clusters(self) -> int:
        """K."""
        return len(self.members)


def elect(members: Collection[int], rho: np.ndarray, *, exclude: Collection[int] = ()) -> int:
    """Driver election (Alg. 2 line 12): argmax ρ over ``members`` − ``exclude``.

    Ties go to the lowest tractor id. Raises :class:`HierarchyError` when no member is left.
    """
    cand = np.array(sorted(set(members) - set(exclude)), dtype=np.int64)
    if cand.size == 0:
        raise HierarchyError(
            f"cluster {sorted(members)}: no eligible member to elect (empty cluster or every "
            "member excluded)"
        )
    return int(cand[int(np.argmax(np.asarray(rho)[cand]))])  # argmax: first (lowest id) max


#: Most candidate pairs the KD-tree search may list (16 bytes each) before the greedy pass
#: falls back to one vectorised haversine per node (O(T) memory).
MAX_NEIGHBOUR_PAIRS = 1 << 23


def _unit_vectors(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    phi, lam = np.radians(lat), np.radians(lon)
    return np.stack([np.cos(phi) * np.cos(lam), np.cos(phi) * np.sin(lam), np.sin(phi)], axis=1)


def _earlier_neighbours(lat: np.ndarray, lon: np.ndarray, radius_km: float) -> Iterator[np.ndarray]:
    """For every node k in turn, the nodes j < k with d(λ_j, λ_k) ≤ r (haversine).

    Candidates come from a KD-tree over unit vectors with a chord radius slightly above
    2 sin(r / 2R) (a superset), then the haversine decides, so the result is exactly the
    pairwise test of Alg. 2 line 5, at O(T log T + pairs). When the fleet is so dense
    that more than :data:`MAX_NEIGHBOUR_PAIRS` pairs are within r, each node is instead
    compared with all earlier nodes (O(T²) time, O(T) memory).
    """
    n = lat.size
    tree = cKDTree(_unit_vectors(lat, lon))
    chord = 2.0 * np.sin(min(radius_km / EARTH_RADIUS_KM, np.pi) / 2.0) * (1 + 1e-9) + 1e-12
    if (int(tree.count_neighbors(tree, chord)) - n) // 2 > MAX_NEIGHBOUR_PAIRS:
        for k in range(n):
            yield np.flatnonzero(haversine_km(lat[k], lon[k], lat[:k], lon[:k]) <= radius_km)
        return
    pairs = tree.query_pairs(chord, output_type="ndarray")
    i, j = pairs.min(axis=1), pairs.max(axis=1)
    near = haversine_km(lat[i], lon[i], lat[j], lon[j]) <= radius_km
    i, j = i[near], j[near]
    order = np.argsort(j, kind="stable")
    i, j = i[order], j[order]
    bounds = np.searchsorted(j, np.arange(n + 1))
    for k in range(n):
        yield i[bounds[k] : bounds[k + 1]]


def form_clusters(fleet: Fleet, *, radius_km: float, rho: np.ndarray | None = None) -> Clusters:
    """003 Alg. 2: group by model type, greedy radius assignment, elect drivers by ρ.

    Args:
        fleet: The tractors (reports λ_i = (lat, lon), M_i = model type).
        radius_km: r ≥ 0: a node joins the first cluster with any member within r.
        rho: ``[T]`` ρ_i; default :func:`capability_score` of ``fleet.capability``.

    Returns:
        :class:`Clusters`. Every earlier node within r is found at once
        (:func:`_earlier_neighbours`); the greedy pass then visits the nodes in id order.
        Measured at 10,000 tractors on 35 farms (``synthetic_fleet``, loaded 2-core machine):
        1.1–1.3 s at r = 5 km, 4–6 s at r = 25 km (dense: 20 clusters); a one-off set-up cost.
    """
    if not (np.isfinite(radius_km) and radius_km >= 0):
        raise HierarchyError(f"radius_km: need a finite r ≥ 0 km, got {radius_km!r}")
    check_locations(fleet.lat, fleet.lon, field="fleet")
    scores = capability_score(fleet.capability) if rho is None else np.asarray(rho, np.float64)
    if scores.shape != (fleet.num_tractors,):
        raise HierarchyError(f"rho: expected {fleet.num_tractors} scores, got {scores.shape}")
    cluster_of = np.full(fleet.num_tractors, -1, dtype=np.int64)
    n_clusters = 0
    for m in np.unique(fleet.model_type):
        group = np.flatnonzero(fleet.model_type == m)  # ascending ids
        local = np.full(group.size, -1, dtype=np.int64)
        for k, nb in enumerate(_earlier_neighbours(fleet.lat[group], fleet.lon[group], radius_km)):
            if nb.size:
                local[k] = local[nb].min()  # the first-created cluster with a member within r
            else:
                local[k] = n_clusters
                n_clusters += 1
        cluster_of[group] = local
    members = tuple(
        tuple(int(i) for i in np.flatnonzero(cluster_of == c)) for c in range(n_clusters)
    )
    return Clusters(members, tuple(elect(mem, scores) for mem in members), cluster_of)


@dataclass(frozen=True)
class Failover:
    """One driver failure and its re-election (003 §2.1.6).

    Attributes:
        round: Round of the health check that found the failure.
        cluster: The cluster.
        failed: The driver that failed.
        driver: The newly elected driver, or None when every member is down.
        handed_over: Buffered updates moved from the failed driver to the new one.
    """

    round: int
    cluster: int
    failed: int
    driver: int | None
    handed_over: int


@dataclass(frozen=True)
class MonitorState(Generic[T]):
    """Everything a :class:`DriverMonitor` holds, for checkpoint and resume.

    Attributes:
        drivers: Cluster → current driver (None while every member is down).
        down_until: (tractor, first round it is up again) of every tractor that is down.
        buffers: Cluster → its buffered updates, submission order.
        last_round: The last round health-checked, or None.
    """

    drivers: tuple[int | None, ...]
    down_until: tuple[tuple[int, int], ...]
    buffers: tuple[tuple[T, ...], ...]
    last_round: int | None


class DriverMonitor(Generic[T]):
    """Health monitoring, ρ re-election and the drivers' update buffers (003 §2.1.6).

    Each round, :meth:`health_check` first brings back the tractors whose down time is
    over, then checks every cluster's driver: it fails with probability ``p_fail``, drawn
    from the generator ``(seed, round, cluster, "driver_health")`` (one draw per cluster and
    round, independent of every other cluster and of the order of calls). A failed driver is
    down for ``down_rounds`` rounds; the cluster re-elects by the same ρ rule over its
    members that are up (:func:`elect`), and its members re-home to the new driver.

    Buffer: members :meth:`submit` updates to their cluster's driver, which holds them until
    :meth:`drain`. Members keep each update until their driver has forwarded it (an
    acknowledged hand-off), so on failover the failed driver's buffer is re-sent to the new
    driver — modelled as a hand-over of the whole buffer, order kept: nothing buffered is
    lost. When every member of a cluster is down, its buffer waits until a member is back
    and elected.

    Recovery policy: a recovered tractor rejoins as a member; the sitting driver keeps its
    role (no pre-emption: no flapping, no needless buffer moves). A cluster with no driver
    elects one as soon as a member is back.
    """

    def __init__(
        self,
        clusters: Clusters,
        rho: np.ndarray,
        *,
        seed: int,
        p_fail: float = 0.0,
        down_rounds: int = 1,
    ) -> None:
        if not 0.0 <= p_fail <= 1.0:
            raise HierarchyError(f"p_driver_fail: need a probability in [0, 1], got {p_fail!r}")
        if isinstance(down_rounds, bool) or not isinstance(down_rounds, int) or down_rounds < 1:
            raise HierarchyError(f"down_rounds: need an integer ≥ 1, got {down_rounds!r}")
        self.clusters = clusters
        self.rho = np.asarray(rho, dtype=np.float64)
        self.seed, self.p_fail, self.down_rounds = seed, float(p_fail), down_rounds
        self._driver: list[int | None] = list(clusters.driver)
        self._down_until: dict[int, int] = {}  # tractor → first round it is up again
        self._buffer: list[list[T]] = [[] for _ in clusters.members]
        self._last_round: int | None = None

    @property
    def drivers(self) -> tuple[int | None, ...]:
        """Cluster → current driver (None while every member is down)."""
        return tuple(self._driver)

    @property
    def down(self) -> frozenset[int]:
        """Tractors that are down now."""
        return frozenset(self._down_until)

    def driver(self, cluster: int) -> int | None:
        """The current driver of ``cluster``."""
        return self._driver[cluster]

    def submit(self, tractor: int, item: T) -> int | None:
        """Buffer ``item`` from ``tractor`` at its cluster's driver; returns that driver."""
        if tractor in self._down_until:
            raise HierarchyError(f"tractor {tractor} is down and cannot upload; check .down")
        c = int(self.clusters.cluster_of[tractor])
        self._buffer[c].append(item)
        return self._driver[c]

    def pending(self, cluster: int) -> int:
        """Updates buffered for ``cluster``."""
        return len(self._buffer[cluster])

    def drain(self, cluster: int) -> list[T]:
        """The driver takes its buffer (submission order) to aggregate and forward it."""
        if self._driver[cluster] is None:
            return []
        out, self._buffer[cluster] = self._buffer[cluster], []
        return out

    def fail(self, cluster: int, round_idx: int) -> Failover | None:
        """Take ``cluster``'s driver down now (a failure) and re-elect; None if it has none."""
        failed = self._driver[cluster]
        if failed is None:
            return None
        self._down_until[failed] = round_idx + self.down_rounds
        new = self._elect(cluster)
        handed = len(self._buffer[cluster]) if new is not None else 0
        return Failover(round_idx, cluster, failed, new, handed)

    def health_check(self, round_idx: int) -> tuple[Failover, ...]:
        """Recoveries, then one seeded health draw per cluster with a driver (see class)."""
        if self._last_round is not None and round_idx <= self._last_round:
            raise HierarchyError(
                f"round_idx: health checks must go forward; {round_idx} after {self._last_round}"
            )
        self._last_round = round_idx
        for tractor in [i for i, r in self._down_until.items() if r <= round_idx]:
            del self._down_until[tractor]
        for c, d in enumerate(self._driver):
            if d is None:
                self._elect(c)
        if self.p_fail <= 0.0:
            return ()
        out = []
        for c, d in enumerate(self._driver):
            if d is not None:
                u = numpy_generator(self.seed, round_idx, c, "driver_health").random()
                if u < self.p_fail and (f := self.fail(c, round_idx)) is not None:
                    out.append(f)
        return tuple(out)

    def snapshot(self) -> MonitorState[T]:
        """The monitor's state (drivers, down times, buffers, last round)."""
        return MonitorState(
            tuple(self._driver),
            tuple(sorted(self._down_until.items())),
            tuple(tuple(b) for b in self._buffer),
            self._last_round,
        )

    def restore(self, state: MonitorState[T]) -> None:
        """Continue from :meth:`snapshot`'s ``state`` (same clusters and parameters)."""
        if len(state.drivers) != self.clusters.num_clusters or len(state.buffers) != len(
            state.drivers
        ):
            raise HierarchyError(
                f"monitor state: {len(state.drivers)} clusters, this monitor has "
                f"{self.clusters.num_clusters}; resume with the same clusters"
            )
        self._driver = list(state.drivers)
        self._down_until = dict(state.down_until)
        self._buffer = [list(b) for b in state.buffers]
        self._last_round = state.last_round

    def _elect(self, cluster: int) -> int | None:
        mem = self.clusters.members[cluster]
        up = [i for i in mem if i not in self._down_until]
        self._driver[cluster] = elect(up, self.rho) if up else None
        return self._driver[cluster]
