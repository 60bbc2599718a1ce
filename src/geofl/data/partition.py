"""Client partitioners over the train split: IID, Dirichlet label skew, by region, pooled.

A partitioner maps the train split's labels (and metadata) to one index array per client;
:class:`Partition` adds the ``[K, C]`` label histograms that reports and consistency-based
aggregation (000 Eq. 9) use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import PartitionError
from geofl.registry import NoParams, Registry

__all__ = [
    "PARTITIONERS",
    "DirichletParams",
    "Partition",
    "PartitionFn",
    "dirichlet_partition",
    "iid_partition",
    "make_partition",
    "region_partition",
]

#: ``(labels [N], metadata, num_clients, rng) -> list of K index arrays``
PartitionFn = Callable[
    [np.ndarray, Mapping[str, np.ndarray], int, np.random.Generator], list[np.ndarray]
]

#: Partitioner registry: ``iid``, ``dirichlet``, ``region``, ``pooled``.
PARTITIONERS: Registry[PartitionFn] = Registry("partitioner")


@dataclass(frozen=True)
class Partition:
    """Client index sets over a labelled pool.

    Attributes:
        indices: K int64 arrays of positions into the partitioned pool (the train split).
        histograms: ``[K, C]`` int64 label counts per client.
    """

    indices: tuple[np.ndarray, ...]
    histograms: np.ndarray

    @property
    def num_clients(self) -> int:
        """K."""
        return len(self.indices)

    @property
    def sizes(self) -> np.ndarray:
        """``[K]`` samples per client."""
        return np.asarray(self.histograms.sum(axis=1))

    def client_means(self, values: np.ndarray | None) -> list[float | None]:
        """Mean of a per-sample array of the pool (e.g. ``gsd_m``) over each client's samples.

        Returns None for every client when ``values`` is None, and for an empty client.
        """
        if values is None:
            return [None] * self.num_clients
        pool = np.asarray(values, dtype=np.float64)
        return [float(pool[idx].mean()) if len(idx) else None for idx in self.indices]


def make_partition(
    fn: PartitionFn,
    labels: np.ndarray,
    metadata: Mapping[str, np.ndarray],
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
) -> Partition:
    """Run a partitioner and attach label histograms.

    Raises:
        PartitionError: if there are fewer samples than clients or a client ends up empty.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if num_clients > labels.size:
        raise PartitionError(
            f"federation.num_clients={num_clients} exceeds the {labels.size} training samples; "
            "use fewer clients or more data"
        )
    parts = fn(labels, metadata, num_clients, rng)
    indices = tuple(np.sort(np.asarray(p, dtype=np.int64)) for p in parts)
    empty = [k for k, p in enumerate(indices) if p.size == 0]
    if empty:
        raise PartitionError(f"clients {empty} received no samples; use fewer clients")
    hist = np.stack([np.bincount(labels[p], minlength=num_classes) for p in indices])
    return Partition(indices, hist.astype(np.int64))


@PARTITIONERS.register("iid")
def iid_partition(_: NoParams) -> PartitionFn:
    """IID: a seeded permutation cut into K near-equal shards."""

    def fn(
        labels: np.ndarray, _m: Mapping[str, np.ndarray], k: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        return list(np.array_split(rng.permutation(labels.size), k))

    return fn


@PARTITIONERS.register("pooled")
def pooled_partition(_: NoParams) -> PartitionFn:
    """One client holding the whole train split (the centralized baseline)."""

    def fn(
        labels: np.ndarray, _m: Mapping[str, np.ndarray], k: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        return [np.arange(labels.size)]

    return fn


class DirichletParams(BaseModel):
    """Dirichlet label-skew parameters (Hsu et al., 2019; 000 §4.1.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(..., gt=0.0, description="concentration α; smaller = more skew")
    min_samples: int = Field(10, ge=1, description="minimum samples each client must receive")
    max_attempts: int = Field(1000, ge=1, description="redraws before giving up")


@PARTITIONERS.register("dirichlet", params=DirichletParams)
def dirichlet_partition(params: DirichletParams) -> PartitionFn:
    """Dirichlet label skew: per class c, proportions p_c ~ Dir(α·1_K) split its samples.

    The draw is repeated (same generator, next draw) until every client has at least
    ``min_samples`` samples, as in the common reference implementation; after
    ``max_attempts`` draws a :class:`PartitionError` says which knob to turn.
    """

    def fn(
        labels: np.ndarray, _m: Mapping[str, np.ndarray], k: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        if params.min_samples * k > labels.size:
            raise PartitionError(
                f"dirichlet min_samples={params.min_samples} × {k} clients exceeds the "
                f"{labels.size} training samples; lower min_samples or use fewer clients"
            )
        classes = np.unique(labels)
        by_class = [np.flatnonzero(labels == c) for c in classes]
        for _ in range(params.max_attempts):
            shards: list[list[np.ndarray]] = [[] for _ in range(k)]
            for idx in by_class:
                idx = idx[rng.permutation(idx.size)]
                props = rng.dirichlet(np.full(k, params.alpha))
                # Rounded (not truncated) cut points: truncation would hand every
                # class's rounding remainder to the last client.
                cuts = np.round(np.cumsum(props)[:-1] * idx.size).astype(np.int64)
                for client, part in enumerate(np.split(idx, cuts)):
                    shards[client].append(part)
            out = [np.concatenate(s) for s in shards]
            if min(p.size for p in out) >= params.min_samples:
                return out
        raise PartitionError(
            f"dirichlet alpha={params.alpha} could not give every client ≥ "
            f"{params.min_samples} samples in {params.max_attempts} draws; "
            "lower min_samples or raise alpha"
        )

    return fn


@PARTITIONERS.register("region")
def region_partition(_: NoParams) -> PartitionFn:
    """Natural partition by geographic region (metadata ``region``).

    With at least as many regions as clients, region i goes to client ``i mod K`` (a
    client may hold several regions); with fewer regions than clients, each region's
    samples are split evenly (seeded) among the clients it is dealt to round-robin. Either
    way a client's data follows its regions' class priors.
    """

    def fn(
        labels: np.ndarray, meta: Mapping[str, np.ndarray], k: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        if "region" not in meta:
            raise PartitionError(
                "partition 'region' needs per-sample 'region' metadata, which this dataset "
                "does not provide; use 'iid' or 'dirichlet'"
            )
        region = np.asarray(meta["region"])
        regions = np.unique(region)
        owners: dict[Any, list[int]] = {r: [] for r in regions}
        if regions.size >= k:
            for i, r in enumerate(regions):
                owners[r].append(i % k)
        else:
            for client in range(k):
                owners[regions[client % regions.size]].append(client)
        shards: list[list[np.ndarray]] = [[] for _ in range(k)]
        for r, clients in owners.items():
            idx = np.flatnonzero(region == r)
            if regions.size >= k:
                shards[clients[0]].append(idx)
                continue
            parts = np.array_split(idx[rng.permutation(idx.size)], len(clients))
            for client, part in zip(clients, parts, strict=True):
                shards[client].append(part)
        return [np.concatenate(s) if s else np.empty(0, np.int64) for s in shards]

    return fn
