"""Byzantine-robust aggregators over the ``[K, D]`` update tensor (000 §4.5 baselines).

* :func:`trimmed_mean` — coordinate-wise β-trimmed mean (Yin et al. 2018, "Byzantine-robust
  distributed learning: towards optimal statistical rates", §3), :mod:`.trimmed`;
* :func:`coordinate_median` — coordinate-wise median (Yin et al. 2018, §3), :mod:`.median`;
* :func:`krum_scores`, :func:`multi_krum`, :func:`krum` — Krum and Multi-Krum (Blanchard et
  al. 2017, "Machine learning with adversaries: Byzantine tolerant gradient descent", §4),
  :mod:`.krum`, over the exact distances of :mod:`.distances`;
* :func:`robust_avg` — paper 003's RobustAvg (§2.2.5 Eq. 1–3): norm-clipped deltas, then a
  *weighted* coordinate-wise trimmed mean; the one rule here that uses the weights
  (:mod:`.robustavg`).

000 §4.5 compares "Trimmed Mean" and "Krum" with FedAvg and the consistency weighting
(:mod:`geofl.server.consistency`) under Dirichlet α = 0.1, K = 10.

The others are *unweighted*, as in the cited papers: the ``weights`` an
:class:`~geofl.server.aggregators.Aggregator` receives (data sizes, consistency scores, …) are
ignored. What they return instead is the weight each row *effectively* had
(:class:`~geofl.server.aggregators.Aggregate`): 1/m on the rows Multi-Krum selected; for the
coordinate-wise rules each row's share of the kept order statistics, averaged over the
coordinates (:func:`trimmed_mean_aggregate`, :func:`coordinate_median_aggregate`). They are
pure functions that never modify their inputs, and assume finite updates
(:func:`geofl.server.validate.validate_update` rejects NaN/Inf before aggregation).

Speed and exactness: the coordinate-wise rules share the blocked numpy sort of
:mod:`.order_stats`; Krum's distances are exact to ~1e-12 (:mod:`.distances`). The registered
aggregators (``trimmed_mean``, ``median``, ``krum``, ``robust_avg``) live in :mod:`.builders`,
imported here so that loading this package registers them.
"""

from __future__ import annotations

from geofl.server.robust.builders import KrumParams, RobustAvgParams, TrimmedMeanParams
from geofl.server.robust.distances import GRAM_BLOCK_COLUMNS, pairwise_squared_distances
from geofl.server.robust.krum import KrumResult, krum, krum_scores, multi_krum
from geofl.server.robust.median import (
    coordinate_median,
    coordinate_median_aggregate,
    coordinate_median_weights,
)
from geofl.server.robust.order_stats import SORT_BLOCK_ELEMENTS
from geofl.server.robust.robustavg import ROBUST_AVG_CHUNK_ELEMENTS, robust_avg
from geofl.server.robust.trimmed import (
    trim_count,
    trimmed_mean,
    trimmed_mean_aggregate,
    trimmed_mean_weights,
)

__all__ = [
    "GRAM_BLOCK_COLUMNS",
    "ROBUST_AVG_CHUNK_ELEMENTS",
    "SORT_BLOCK_ELEMENTS",
    "KrumParams",
    "KrumResult",
    "RobustAvgParams",
    "TrimmedMeanParams",
    "coordinate_median",
    "coordinate_median_aggregate",
    "coordinate_median_weights",
    "krum",
    "krum_scores",
    "multi_krum",
    "pairwise_squared_distances",
    "robust_avg",
    "trim_count",
    "trimmed_mean",
    "trimmed_mean_aggregate",
    "trimmed_mean_weights",
]
