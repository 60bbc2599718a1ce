"""Client partitioners over the train split: IID, Dirichlet skew, by region or group, pooled.

A partitioner maps the train split (a :class:`PartitionPool`: targets of any kind, their
discrete label attribute, metadata) to one index array per client; :class:`Partition` adds
the ``[K, C]`` label histograms that reports and consistency-based aggregation (000 Eq. 9)
use. Dirichlet skew is over a **stated discrete attribute** (``by``): the label attribute
of :mod:`geofl.data.targets` (class id; rarest present label for multi-hot targets; a
quantile bin for real targets) or any per-sample metadata key (``season``, ``farm``, a
quantile bin of ``elevation_mean``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.targets import DEFAULT_BINS, TargetKind, attribute_codes, label_codes, label_counts
from geofl.errors import PartitionError
from geofl.registry import NoParams, Registry

__all__ = [
    "PARTITIONERS",
    "DirichletParams",
    "GroupParams",
    "Partition",
    "PartitionFn",
    "PartitionPool",
    "dirichlet_partition",
    "group_partition",
    "iid_partition",
    "make_partition",
    "region_partition",
]


@dataclass(frozen=True)
class PartitionPool:
    """What a partitioner sees of the pool it splits (the train split).

    Attributes:
        targets: ``[N]`` / ``[N, C]`` / ``[N, T]`` targets of ``kind``.
        kind: Target kind (:data:`geofl.data.targets.TargetKind`).
        labels: ``[N]`` int64 label attribute (:func:`geofl.data.targets.label_codes`,
            :data:`~geofl.data.targets.DEFAULT_BINS` quantile bins for real targets).
        metadata: Per-sample arrays of length ``N``.
    """

    targets: np.ndarray
    kind: TargetKind
    labels: np.ndarray
    metadata: Mapping[str, np.ndarray]

    @property
    def size(self) -> int:
        """N."""
        return int(self.labels.size)

    def attribute(self, by: str, bins: int, *, field: str) -> np.ndarray:
        """``[N]`` int64 codes of the discrete attribute ``by`` (``"label"`` or a metadata
        key); real-valued targets and metadata are cut into ``bins`` quantile bins.

        Raises:
            PartitionError: naming ``field`` when ``by`` is not ``"label"`` or a metadata key.
        """
        if by == "label" and self.kind == "real":
            return label_codes(self.targets, self.kind, bins)
        return attribute_codes(by, self.labels, self.metadata, bins, field=field)


#: ``(pool, num_clients, rng) -> list of K index arrays into the pool``
PartitionFn = Callable[[PartitionPool, int, np.random.Generator], list[np.ndarray]]

#: Partitioner registry: ``iid``, ``dirichlet``, ``region``, ``group``, ``pooled``.
PARTITIONERS: Registry[PartitionFn] = Registry("partitioner")


@dataclass(frozen=True)
class Partition:
    """Client index sets over a labelled pool.

    Attributes:
        indices: K int64 arrays of positions into the partitioned pool (the train split).
        histograms: ``[K, C]`` int64 label counts per client
            (:func:`geofl.data.targets.label_counts`): samples per class, positives per
            multi-hot label (rows may sum to more than the client's samples), or samples
            per :data:`~geofl.data.targets.DEFAULT_BINS` quantile bin of a real target.
    """

    indices: tuple[np.ndarray, ...]
    histograms: np.ndarray

    @property
    def num_clients(self) -> int:
        """K."""
        return len(self.indices)

    @property
    def sizes(self) -> np.ndarray:
        """``[K]`` int64 samples per client."""
        return np.asarray([len(idx) for idx in self.indices], dtype=np.int64)

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
    targets: np.ndarray,
    metadata: Mapping[str, np.ndarray],
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
    *,
    kind: TargetKind = "class",
) -> Partition:
    """Run a partitioner over a pool and attach label histograms.

    Args:
        fn: The partitioner.
        targets: ``[N]`` / ``[N, C]`` / ``[N, T]`` targets of the pool, of ``kind``.
        metadata: Per-sample arrays of the pool.
        num_clients: K.
        num_classes: C, the histogram width (ignored for real targets, whose histograms
            count :data:`~geofl.data.targets.DEFAULT_BINS` quantile bins).
        rng: The partition's generator.
        kind: Target kind.

    Raises:
        PartitionError: if there are fewer samples than clients, a client ends up empty, or
            ``class``/``binary`` targets are not ``[N]`` integers (a forgotten ``kind``).
    """
    targets = np.asarray(targets)
    if kind in ("class", "binary"):
        if targets.ndim != 1 or not np.issubdtype(targets.dtype, np.integer):
            raise PartitionError(
                f"{kind} targets must be [N] integers, got {targets.shape} {targets.dtype}; "
                "pass the dataset's target_kind to make_partition"
            )
        targets = targets.astype(np.int64, copy=False)
    labels = label_codes(targets, kind, num_classes=num_classes)
    n = labels.size
    if num_clients > n:
        raise PartitionError(
            f"federation.num_clients={num_clients} exceeds the {n} training samples; "
            "use fewer clients or more data"
        )
    parts = fn(PartitionPool(targets, kind, labels, metadata), num_clients, rng)
    indices = tuple(np.sort(np.asarray(p, dtype=np.int64)) for p in parts)
    empty = [k for k, p in enumerate(indices) if p.size == 0]
    if empty:
        raise PartitionError(f"clients {empty} received no samples; use fewer clients")
    width = DEFAULT_BINS if kind == "real" else num_classes
    hist = np.stack([label_counts(targets[p], kind, width, labels[p]) for p in indices])
    return Partition(indices, hist.astype(np.int64))


@PARTITIONERS.register("iid")
def iid_partition(_: NoParams) -> PartitionFn:
    """IID: a seeded permutation cut into K near-equal shards."""

    def fn(pool: PartitionPool, k: int, rng: np.random.Generator) -> list[np.ndarray]:
        return list(np.array_split(rng.permutation(pool.size), k))

    return fn


@PARTITIONERS.register("pooled")
def pooled_partition(_: NoParams) -> PartitionFn:
    """One client holding the whole train split (the centralized baseline)."""

    def fn(pool: PartitionPool, k: int, rng: np.random.Generator) -> list[np.ndarray]:
        return [np.arange(pool.size)]

    return fn


class DirichletParams(BaseModel):
    """Dirichlet skew parameters (Hsu et al., 2019; 000 §4.1.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(..., gt=0.0, description="concentration α; smaller = more skew")
    by: str = Field(
        "label",
        min_length=1,
        description="discrete attribute skewed over clients: 'label' (class id; rarest "
        "present label for multi-hot targets; quantile bin for real targets) or a "
        "per-sample metadata key (quantile-binned when real-valued)",
    )
    bins: int = Field(
        DEFAULT_BINS, ge=2, description="quantile bins of a real-valued 'by' attribute"
    )
    min_samples: int = Field(10, ge=1, description="minimum samples each client must receive")
    max_attempts: int = Field(1000, ge=1, description="redraws before giving up")


@PARTITIONERS.register("dirichlet", params=DirichletParams)
def dirichlet_partition(params: DirichletParams) -> PartitionFn:
    """Dirichlet skew: per value c of the attribute ``by``, p_c ~ Dir(α·1_K) splits its
    samples among the K clients (``by: label`` on class targets is the classic label skew).

    The draw is repeated (same generator, next draw) until every client has at least
    ``min_samples`` samples, as in the common reference implementation; after
    ``max_attempts`` draws a :class:`PartitionError` says which knob to turn.
    """

    def fn(pool: PartitionPool, k: int, rng: np.random.Generator) -> list[np.ndarray]:
        labels = pool.attribute(params.by, params.bins, field="partition.params.by")
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


class GroupParams(BaseModel):
    """Parameters of the by-group partition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(
        ..., min_length=1, description="per-sample metadata key whose values are the groups"
    )


@PARTITIONERS.register("region")
def region_partition(_: NoParams) -> PartitionFn:
    """Natural partition by geographic region: :func:`group_partition` on ``region``."""
    return _by_group("region", "partition 'region'")


@PARTITIONERS.register("group", params=GroupParams)
def group_partition(params: GroupParams) -> PartitionFn:
    """Natural partition by a metadata group (``farm``, ``region``, ``tile``...).

    With at least as many groups as clients, group i (in sorted order of its value) goes
    to client ``i mod K`` (a client may hold several groups); with fewer groups than
    clients, each group's samples are split evenly (seeded) among the clients it is dealt
    to round-robin. Either way a client's data follows its groups' distribution.
    """
    return _by_group(params.key, f"partition 'group' with key={params.key!r}")


def _by_group(key: str, what: str) -> PartitionFn:
    """The by-group partitioner over metadata ``key``; errors start with ``what``."""

    def fn(pool: PartitionPool, k: int, rng: np.random.Generator) -> list[np.ndarray]:
        if key not in pool.metadata:
            raise PartitionError(
                f"{what} needs per-sample {key!r} metadata, which this dataset does not "
                f"provide (it has {sorted(pool.metadata)}); use 'iid' or 'dirichlet'"
            )
        group = np.asarray(pool.metadata[key])
        groups = np.unique(group)
        owners: dict[Any, list[int]] = {g: [] for g in groups}
        if groups.size >= k:
            for i, g in enumerate(groups):
                owners[g].append(i % k)
        else:
            for client in range(k):
                owners[groups[client % groups.size]].append(client)
        shards: list[list[np.ndarray]] = [[] for _ in range(k)]
        for g, clients in owners.items():
            idx = np.flatnonzero(group == g)
            if groups.size >= k:
                shards[clients[0]].append(idx)
                continue
            parts = np.array_split(idx[rng.permutation(idx.size)], len(clients))
            for client, part in zip(clients, parts, strict=True):
                shards[client].append(part)
        return [np.concatenate(s) if s else np.empty(0, np.int64) for s in shards]

    return fn
