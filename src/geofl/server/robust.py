"""Byzantine-robust aggregators over the ``[K, D]`` update tensor (000 §4.5 baselines).

* :func:`trimmed_mean` — coordinate-wise β-trimmed mean (Yin et al. 2018, "Byzantine-robust
  distributed learning: towards optimal statistical rates", §3);
* :func:`coordinate_median` — coordinate-wise median (Yin et al. 2018, §3);
* :func:`krum_scores`, :func:`multi_krum`, :func:`krum` — Krum and Multi-Krum (Blanchard et
  al. 2017, "Machine learning with adversaries: Byzantine tolerant gradient descent", §4);
* :func:`robust_avg` — paper 003's RobustAvg (§2.2.5 Eq. 1–3): norm-clipped deltas, then a
  *weighted* coordinate-wise trimmed mean; the one rule here that uses the weights.

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

Speed (K = 100 × D = 1e6–1.1e7 float32, 2 threads; ``benchmarks/bench_robust_aggregation.py``):
the coordinate-wise rules need every column's order statistics. ``torch.sort`` over dim 0 ran
at ~120×, ``torch.median``/``kthvalue``/``topk`` at 50–90× the time of ``updates.mean(0)``
(also on a transposed contiguous copy). numpy's SIMD sort (x86-simd-sort, numpy ≥ 2) of
a transposed block is ~10× faster than ``torch.sort``, so on CPU for float32/float64 the
columns go in blocks of :data:`SORT_BLOCK_ELEMENTS`: copy the block transposed into a
per-thread buffer, sort its rows, average the needed order statistics in float64; with
``torch.get_num_threads()`` threads (numpy releases the GIL). That runs at ~4–6× mean(0)
(the transposing copy alone is ~2×). The effective weights come from the same pass, while
the block is in cache: the sorted values give each column's kept range [lo_d, hi_d]; every
row counts the columns where lo_d ≤ value ≤ hi_d (two comparisons and an int32 count:
+30–50 %, 5.9× / 5.7× mean(0) for trimmed mean / median with weights on a loaded machine);
constant columns (a parameter no client changed) give 1/K to every row at no cost, and the
other columns whose boundary tie group straddles the kept/trimmed boundary are corrected
exactly — rare in float updates, but when every column has such ties (values rounded to 9
levels) the pass takes ~4× as long. Other devices and dtypes go through float64 CPU copies
of column chunks (exact, so ties survive; a GPU tensor is copied to the host chunk by chunk).

Krum needs the pairwise squared distances, exactly (:func:`pairwise_squared_distances`). A
Gram matrix of the raw updates (d_ij = G_ii + G_jj − 2 G_ij) cancels catastrophically when
the updates share a large common component — in float32 it chose row 0 of [[1000.00],
[1000.01], [1000.03], [1000.06], [1001.0]] (f = 1) where float64 chooses row 1, and adding 100
to every coordinate changed its choice. Here the updates are centred on one central update
(a translation, which leaves distances unchanged) in float64 before the Gram matrix is
accumulated in float64, and the few pairs that could still lose precision are recomputed from
differences: every d_ij is within ~1e-12 (measured ≤ 1e-14) of the float64 per-pair sum
Σ_d (Δw_id − Δw_jd)², whatever the offset, scale or outliers. Cost: 6.8× mean(0) for Krum,
9.9× for Multi-Krum (2 threads on a 2-core machine loaded by other processes, where the
float32 raw Gram measured 7.2× / 7.7×; 6.0× idle). ``torch.pdist`` on float64 blocks
throughout, exact by construction, cost ~1.7× the float64 Gram; a Gram centred on the column
mean is as fast but keeps only ~1e-5 of the other distances next to a 1e6-times-larger
outlier. The blocks go to worker threads (:func:`_blockwise_sum`). Memory beyond the input:
a few MB of block buffers per thread plus the ``[D]`` output.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import AggregationError
from geofl.registry import CheckContext, NoParams
from geofl.server.aggregators import AGGREGATORS, Aggregate, Aggregator

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

#: Elements of one transposed ``[columns, K]`` block sorted at a time by one thread (2 MB of
#: float32: stays in L2/L3 while it is sorted and reduced).
SORT_BLOCK_ELEMENTS = 1 << 19
#: Columns of one centred float64 block of the Krum distances (a ``[K, columns]`` float64
#: buffer, 3.3 MB at K=100: stays in cache between the centring and the products).
GRAM_BLOCK_COLUMNS = 1 << 12
#: Row groups of the block product ``C Cᵀ``: only the tiles on and above the diagonal are
#: computed (4 groups: 10 of 16 tiles).
_GRAM_ROW_GROUPS = 4
#: Column blocks per task of the threaded Krum distances (65536 columns at the default).
_BLOCKS_PER_SPAN = 16
#: Krum distances below this fraction of ‖c_i‖² + ‖c_j‖² (rows centred on the reference)
#: are recomputed from differences: the Gram error (≲ 1e-15 of that sum) could exceed
#: ~1e-12 of the distance there.
_REFINE_RATIO = 1e-3
#: Elements of one float64 CPU chunk when other devices/dtypes are converted (128 MB).
_CONVERT_CHUNK_ELEMENTS = 1 << 24
#: Below this many elements the column sort runs in the calling thread only.
_PARALLEL_MIN_ELEMENTS = 1 << 20
#: Slack for ``floor(β·K)`` so that e.g. β = 0.29, K = 100 trims 29, not 28 (0.29·100 < 29).
_FLOOR_SLACK = 1e-9

_NumpyArray = npt.NDArray[Any]


def _uniform(k: int) -> torch.Tensor:
    return torch.full((k,), 1.0 / k, dtype=torch.float64)


def _check_updates(updates: torch.Tensor) -> tuple[int, int]:
    """``(K, D)`` of a floating ``[K, D]`` tensor with K ≥ 1, else ValueError."""
    if updates.ndim != 2 or updates.shape[0] == 0:
        raise ValueError(f"expected updates [K, D] with K ≥ 1, got shape {tuple(updates.shape)}")
    if not updates.is_floating_point():
        raise ValueError(f"updates must be a floating tensor, got dtype {updates.dtype}")
    return int(updates.shape[0]), int(updates.shape[1])


# --------------------------------------------------------------------------- order statistics


def _reduce_sorted(rows: _NumpyArray, lo: int, hi: int, out: _NumpyArray) -> None:
    """``out[i] = mean(rows[i, lo:hi])`` in float64, for rows sorted ascending."""
    n = hi - lo
    if n == 1:
        out[...] = rows[:, lo]
    elif n == 2:
        # float64 midpoint: no overflow for float32 inputs, exact when both values are equal.
        out[...] = (rows[:, lo].astype(np.float64) + rows[:, lo + 1]) * 0.5
    else:
        # einsum accumulates in float64 ~35 % faster than .sum(axis=1, dtype=float64) here
        # (rows of ~100 values: numpy's per-row pairwise-sum setup dominates .sum).
        out[...] = np.einsum("ij->i", rows[:, lo:hi], dtype=np.float64) / n


def _count_rows(mask: _NumpyArray) -> _NumpyArray:
    """Per row, the number of True values (int32 einsum over the bytes: ~3× faster than
    ``count_nonzero(axis=1)``, which sums in int64)."""
    return np.asarray(np.einsum("ij->i", mask.view(np.uint8), dtype=np.int32))


def _tie_correction(x: _NumpyArray, rows: _NumpyArray, lo: int, hi: int) -> _NumpyArray:
    """``[K]`` float64: exact kept shares minus ``[lo_v ≤ x ≤ hi_v] / n``, summed over columns.

    For the columns (``x`` ``[K, s]``, ``rows`` the same sorted, ``[s, K]``) where the tie
    group of a boundary value lo_v or hi_v (sorted positions ``lo``, ``hi − 1``) straddles
    the kept/trimmed boundary; n = hi − lo.
    """
    k, n = x.shape[0], hi - lo
    lo_v, hi_v = np.ascontiguousarray(rows[:, lo]), np.ascontiguousarray(rows[:, hi - 1])
    lo_c, hi_c = lo_v[:, None], hi_v[:, None]
    # The tie group of lo_v fills sorted positions [#(< lo_v), #(≤ lo_v)), of which those in
    # [lo, hi) are kept; the group of hi_v fills [K − #(≥ hi_v), K − #(> hi_v)).
    below_lo, upto_lo = _count_rows(rows < lo_c), _count_rows(rows <= lo_c)
    from_hi, above_hi = _count_rows(rows >= hi_c), _count_rows(rows > hi_c)
    d_lo = (np.minimum(upto_lo, hi) - lo) / ((upto_lo - below_lo) * n) - 1.0 / n
    d_hi = (hi - np.maximum(k - from_hi, lo)) / ((from_hi - above_hi) * n) - 1.0 / n
    d_hi[lo_v == hi_v] = 0.0  # one tie group holds every kept position: counted via d_lo
    # einsum, not matmul: no BLAS threads (which stall when other processes load the CPUs)
    eq_lo, eq_hi = (x == lo_v).view(np.uint8), (x == hi_v).view(np.uint8)
    return np.asarray(
        np.einsum("ij,j->i", eq_lo, d_lo) + np.einsum("ij,j->i", eq_hi, d_hi), dtype=np.float64
    )


def _block_shares(x: _NumpyArray, rows: _NumpyArray, lo: int, hi: int) -> _NumpyArray:
    """``[K]`` float64: each row's kept share, summed over the columns of one block.

    ``x`` is the block as given (``[K, c]``), ``rows`` its columns sorted (``[c, K]``). A
    value inside [lo_v, hi_v] whose tie group lies wholly in the kept positions holds 1/n; a
    constant column gives each row 1/K; :func:`_tie_correction` fixes the other columns
    whose boundary tie group straddles the kept/trimmed boundary.
    """
    k, n = x.shape[0], hi - lo
    # contiguous thresholds: numpy's comparisons then vectorise (14× faster than on the
    # strided columns of ``rows``)
    lo_v, hi_v = np.ascontiguousarray(rows[:, lo]), np.ascontiguousarray(rows[:, hi - 1])
    if n == 1:
        inside = x == lo_v
    else:
        inside = x >= lo_v
        inside &= x <= hi_v
    shares = _count_rows(inside) / n
    constant = rows[:, 0] == rows[:, -1]  # e.g. a parameter no client changed: 1/K each
    shares += np.count_nonzero(constant) * (1.0 / k - 1.0 / n)
    straddle = np.zeros(rows.shape[0], dtype=bool)
    if lo > 0:
        straddle |= rows[:, lo - 1] == lo_v
    if hi < k:
        straddle |= rows[:, hi] == hi_v
    idx = np.flatnonzero(straddle & ~constant)
    if idx.size:
        shares += _tie_correction(x[:, idx], rows[idx], lo, hi)
    return np.asarray(shares, dtype=np.float64)


def _numpy_span(
    x: _NumpyArray, out: _NumpyArray, lo: int, hi: int, span: tuple[int, int], shares: bool
) -> _NumpyArray | None:
    """Columns ``span`` of ``x`` in blocks: order-statistic means into ``out``, and shares."""
    k = x.shape[0]
    start, stop = span
    cols = max(1, SORT_BLOCK_ELEMENTS // k)
    buf = np.empty((max(1, min(cols, stop - start)), k), dtype=x.dtype)
    acc = np.zeros(k, dtype=np.float64) if shares else None
    for a in range(start, stop, cols):
        b = min(a + cols, stop)
        rows = buf[: b - a]
        np.copyto(rows, x[:, a:b].T)
        rows.sort(axis=1)
        _reduce_sorted(rows, lo, hi, out[a:b])
        if acc is not None:
            acc += _block_shares(x[:, a:b], rows, lo, hi)
    return acc


def _numpy_order_stats(
    x: _NumpyArray, out: _NumpyArray, lo: int, hi: int, workers: int, shares: bool
) -> _NumpyArray | None:
    """Per column of ``x`` (``[K, D]``): mean of its sorted values at ``[lo, hi)`` into
    ``out``; with ``shares``, also each row's kept share summed over all columns (``[K]``)."""
    k, d = x.shape
    cols = max(1, SORT_BLOCK_ELEMENTS // k)
    if workers <= 1 or k * d < _PARALLEL_MIN_ELEMENTS:
        return _numpy_span(x, out, lo, hi, (0, d), shares)
    # A few contiguous spans per thread (balance on a shared machine), each done in blocks.
    n_spans = min(4 * workers, math.ceil(d / cols))
    bounds = [round(i * d / n_spans) for i in range(n_spans + 1)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(_numpy_span, x, out, lo, hi, span, shares)
            for span in itertools.pairwise(bounds)
        ]
        parts = [fut.result() for fut in futures]  # summed in span order: deterministic
    if not shares:
        return None
    return np.asarray(np.sum([p for p in parts if p is not None], axis=0), dtype=np.float64)


def _converted_order_stats(
    x: torch.Tensor, out: torch.Tensor, lo: int, hi: int, workers: int, shares: bool
) -> _NumpyArray | None:
    """:func:`_numpy_order_stats` for other devices/dtypes, on float64 CPU copies of chunks."""
    k, d = x.shape
    chunk = max(1, _CONVERT_CHUNK_ELEMENTS // k)
    acc = np.zeros(k, dtype=np.float64) if shares else None
    for a in range(0, d, chunk):
        part = x[:, a : a + chunk].to("cpu", torch.float64).numpy()  # exact: ties survive
        mean = np.empty(part.shape[1], dtype=np.float64)
        got = _numpy_order_stats(part, mean, lo, hi, workers, shares)
        out[a : a + chunk] = torch.from_numpy(mean)
        if acc is not None and got is not None:
            acc += got
    return acc


def _order_statistics(
    updates: torch.Tensor, lo: int, hi: int, *, shares: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[D]`` per-coordinate mean of the sorted values at positions ``lo … hi − 1``, and
    with ``shares`` the ``[K]`` float64 effective weights (see :func:`trimmed_mean_aggregate`).
    """
    k, d = updates.shape
    x = updates.detach()
    out = torch.empty(d, dtype=x.dtype, device=x.device)
    workers = torch.get_num_threads()
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        acc = _numpy_order_stats(x.numpy(), out.numpy(), lo, hi, workers, shares)
    else:
        acc = _converted_order_stats(x, out, lo, hi, workers, shares)
    if acc is None:
        return out, None
    total = float(acc.sum())
    if not total > 0:  # D = 0: no coordinate to take a share of
        return out, _uniform(k)
    return out, torch.from_numpy(acc / total)


def trim_count(num_updates: int, trim_fraction: float) -> int:
    """b = ⌊β·K⌋, the number of values dropped at *each* end of every coordinate.

    Raises:
        ValueError: if ``trim_fraction`` is outside ``[0, 0.5)`` or leaves no value.
    """
    if not 0.0 <= trim_fraction < 0.5:
        raise ValueError(
            f"trim_fraction must be in [0, 0.5), got {trim_fraction!r}; it is the fraction "
            "dropped at each end, so 0.5 or more would drop every value"
        )
    b = math.floor(trim_fraction * num_updates + _FLOOR_SLACK)
    if num_updates - 2 * b < 1:
        raise ValueError(
            f"trim_fraction={trim_fraction!r} drops {b} values at each end of K={num_updates} "
            "updates, leaving none; lower trim_fraction"
        )
    return b


def trimmed_mean(updates: torch.Tensor, *, trim_fraction: float) -> torch.Tensor:
    """Coordinate-wise β-trimmed mean (Yin et al. 2018, §3).

    For every coordinate j, drop the b = ⌊β·K⌋ smallest and the b largest of the K values
    ``updates[:, j]`` and average the remaining K − 2b (ties are handled exactly: the values
    are sorted). The sum is taken in float64 and rounded once to the input dtype. Unweighted:
    the paper's estimator ignores sample sizes, and so does the registered aggregator. With
    b = 0 the result is ``updates.mean(0)`` itself. :func:`trimmed_mean_aggregate` also
    returns the rows' effective weights.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        trim_fraction: β ∈ [0, 0.5), fraction trimmed at each end.

    Returns:
        ``[D]`` in the dtype of ``updates``.

    Raises:
        ValueError: if β is outside [0, 0.5), K − 2b < 1, or ``updates`` is not ``[K, D]``.
    """
    k, _ = _check_updates(updates)
    b = trim_count(k, trim_fraction)
    if b == 0:
        return updates.mean(dim=0)
    return _order_statistics(updates, b, k - b, shares=False)[0]


def trimmed_mean_aggregate(updates: torch.Tensor, *, trim_fraction: float) -> Aggregate:
    """β-trimmed mean (Yin et al. 2018, §3) and each row's effective weight, in one pass.

    Effective weight of row k: at coordinate d the K − 2b kept order statistics (sorted
    positions b … K − b − 1) carry 1/(K − 2b) each, and row k holds the share of the position
    its value ``updates[k, d]`` occupies — 1/(K − 2b) if kept, 0 if trimmed. Ties: the rows
    of a tie group share the kept positions of that group's value equally, so a group
    straddling the kept/trimmed boundary (e.g. three equal values at sorted positions b − 1,
    b, b + 1) gives each member (kept positions of the group)/(group size)/(K − 2b); the
    trimmed mean at d is unchanged, since tied values are equal. The weight is the average
    of these shares over the D coordinates, so the weights are non-negative and sum to 1
    (exactly 1/K each when b = 0). It measures how much of the aggregate each row accounts
    for: a row trimmed at every coordinate gets 0.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        trim_fraction: β ∈ [0, 0.5), fraction trimmed at each end.

    Returns:
        :class:`~geofl.server.aggregators.Aggregate`: ``delta`` ``[D]`` as
        :func:`trimmed_mean`, ``weights`` ``[K]`` float64.

    Raises:
        ValueError: as :func:`trimmed_mean`.
    """
    k, _ = _check_updates(updates)
    b = trim_count(k, trim_fraction)
    if b == 0:
        return Aggregate(updates.mean(dim=0), _uniform(k))
    delta, weights = _order_statistics(updates, b, k - b, shares=True)
    return Aggregate(delta, weights if weights is not None else _uniform(k))


def trimmed_mean_weights(updates: torch.Tensor, *, trim_fraction: float) -> torch.Tensor:
    """``[K]`` float64 effective weights of the β-trimmed mean; see :func:`trimmed_mean_aggregate`.

    Costs the same pass as the aggregate (Yin et al. 2018, §3).
    """
    return trimmed_mean_aggregate(updates, trim_fraction=trim_fraction).weights


def _median_positions(k: int) -> tuple[int, int]:
    half = k // 2
    return (half, half + 1) if k % 2 else (half - 1, half + 1)


def coordinate_median(updates: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median (Yin et al. 2018, §3).

    For odd K the middle value; for even K the mean of the two middle values (computed in
    float64, so it neither overflows nor moves when both are equal). ``torch.median`` would
    return the lower one; the midpoint is the usual statistical median and is symmetric
    under negation of the updates. :func:`coordinate_median_aggregate` also returns the
    rows' effective weights.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.

    Returns:
        ``[D]`` in the dtype of ``updates``.
    """
    k, _ = _check_updates(updates)
    if k == 1:
        return updates[0].clone()
    return _order_statistics(updates, *_median_positions(k), shares=False)[0]


def coordinate_median_aggregate(updates: torch.Tensor) -> Aggregate:
    """Coordinate-wise median (Yin et al. 2018, §3) and each row's effective weight.

    Effective weight of row k: the average over the D coordinates of its share of the
    middle order statistic(s) — 1 for the row holding the middle value when K is odd, ½ for
    each of the two middle values when K is even, 0 otherwise. Ties share equally, as in
    :func:`trimmed_mean_aggregate` (which this is, with b = ⌊(K − 1)/2⌋): e.g. K = 5 with
    values 1, 3, 3, 3, 9 gives each 3 a share of ⅓. Non-negative, summing to 1.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.

    Returns:
        :class:`~geofl.server.aggregators.Aggregate`: ``delta`` ``[D]`` as
        :func:`coordinate_median`, ``weights`` ``[K]`` float64.
    """
    k, _ = _check_updates(updates)
    if k == 1:
        return Aggregate(updates[0].clone(), _uniform(1))
    delta, weights = _order_statistics(updates, *_median_positions(k), shares=True)
    return Aggregate(delta, weights if weights is not None else _uniform(k))


def coordinate_median_weights(updates: torch.Tensor) -> torch.Tensor:
    """``[K]`` float64 effective weights of the median; see :func:`coordinate_median_aggregate`.

    Costs the same pass as the aggregate (Yin et al. 2018, §3).
    """
    return coordinate_median_aggregate(updates).weights


# --------------------------------------------------------------------------- RobustAvg (003)

#: Elements of one ``[L, columns]`` column chunk of :func:`robust_avg` (8 MB of float64).
ROBUST_AVG_CHUNK_ELEMENTS = 1 << 20


def _boundary_share(rows: _NumpyArray, value: _NumpyArray, lo: int, hi: int) -> _NumpyArray:
    """``[c]`` kept share of the tie group of ``value`` (one value per sorted row of ``rows``).

    The group fills sorted positions ``[#(< value), #(≤ value))``; its kept positions are
    those in ``[lo, hi)``, shared equally by its members.
    """
    start = _count_rows(rows < value[:, None])
    stop = _count_rows(rows <= value[:, None])
    kept = np.minimum(stop, hi) - np.maximum(start, lo)
    return np.asarray(np.maximum(kept, 0) / (stop - start), dtype=np.float64)


def _kept(x: _NumpyArray, rows: _NumpyArray, lo: int, hi: int) -> _NumpyArray:
    """``[L, c]``: the kept share of every value of ``x`` (``rows``: its columns sorted).

    A value inside the kept range [lo_v, hi_v] is kept whole (bool True) unless it belongs
    to a boundary tie group that straddles the kept/trimmed boundary — rare in float
    deltas; those columns get exact float shares from :func:`_boundary_share`.
    """
    lo_v, hi_v = np.ascontiguousarray(rows[:, lo]), np.ascontiguousarray(rows[:, hi - 1])
    frac: _NumpyArray = x >= lo_v
    frac &= x <= hi_v
    straddle = np.zeros(rows.shape[0], dtype=bool)
    if lo > 0:
        straddle |= rows[:, lo - 1] == lo_v
    if hi < rows.shape[1]:
        straddle |= rows[:, hi] == hi_v
    idx = np.flatnonzero(straddle)
    if idx.size:
        sub, srt = x[:, idx], rows[idx]
        exact = ((sub > lo_v[idx]) & (sub < hi_v[idx])).astype(np.float64)
        exact = np.where(sub == hi_v[idx], _boundary_share(srt, hi_v[idx], lo, hi), exact)
        exact = np.where(sub == lo_v[idx], _boundary_share(srt, lo_v[idx], lo, hi), exact)
        frac = frac.astype(np.float64)
        frac[:, idx] = exact
    return frac


def _robust_chunk(
    x: _NumpyArray, alpha: _NumpyArray, lo: int, hi: int
) -> tuple[_NumpyArray, _NumpyArray, int]:
    """Eq. 3 over the columns of ``x`` (``[L, c]`` float64 clipped deltas).

    Sorts a transposed copy (numpy's SIMD sort, as the trimmed mean does) only to find each
    column's kept range; the weights then need no row indices (:func:`_kept`). Returns the
    ``[c]`` aggregate, the ``[L]`` effective shares summed over the columns with kept
    weight, and the number of those columns.
    """
    rows = np.ascontiguousarray(x.T)
    rows.sort(axis=1)
    frac = _kept(x, rows, lo, hi)
    base = rows[:, lo]  # centre on the lowest kept value: exact for constant columns
    total = np.einsum("i,ij->j", alpha, frac, dtype=np.float64)
    ok = total > 0
    inv = np.where(ok, 1.0 / np.where(ok, total, 1.0), 0.0)
    centred = x - base
    centred *= frac
    mean = np.where(ok, base + np.einsum("i,ij->j", alpha, centred) * inv, 0.0)
    shares = alpha * np.einsum("ij,j->i", frac, inv, dtype=np.float64)
    return mean, np.asarray(shares, dtype=np.float64), int(ok.sum())


def _clip_factors(x: torch.Tensor, clip: float, eps: float, step: int) -> _NumpyArray:
    """``[L]`` float64 min(1, C / (‖Δ_l‖₂ + ε)) (003 Eq. 2).

    Squares are summed in float64 over column chunks of ``step`` columns; a float64 row
    whose squares overflow (entries beyond ~1e154) is rescaled by its largest magnitude.
    """
    sq = np.zeros(x.shape[0], dtype=np.float64)
    for a in range(0, x.shape[1], step):
        chunk = x[:, a : a + step].to("cpu", torch.float64).numpy()
        sq += np.einsum("ij,ij->i", chunk, chunk)
    norms = np.sqrt(sq)
    for i in np.flatnonzero(~np.isfinite(norms)):
        row = x[int(i)].to("cpu", torch.float64)
        big = float(row.abs().max())
        norms[i] = big * float(torch.linalg.vector_norm(row / big))
    return np.asarray(np.minimum(clip / (norms + eps), 1.0), dtype=np.float64)


def _normalised_weights(weights: torch.Tensor, k: int) -> torch.Tensor:
    w = weights.detach().to("cpu", torch.float64)
    if w.shape != (k,) or not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError(
            f"weights must be [{k}] finite and non-negative, got shape {tuple(w.shape)}"
        )
    total = float(w.sum())
    if not total > 0:
        raise ValueError("weights must have a positive sum (α_l of 003 Eq. 12)")
    return w / total


def robust_avg(
    deltas: torch.Tensor, weights: torch.Tensor, *, clip: float = 1.0,
    trim_fraction: float = 0.1, eps: float = 1e-12,
) -> Aggregate:  # fmt: skip
    """RobustAvg, 003 §2.2.5 Eq. 1–3: norm-clipped, weighted, coordinate-wise trimmed mean.

    1. Clip (Eq. 2): Δ̃_l = Δ_l · min(1, C / (‖Δ_l‖₂ + ε)).
    2. Trim: per coordinate j, drop the b = ⌊β·L⌋ smallest and b largest values Δ̃_{l,j}
       (by value, :func:`trim_count`), keeping L_j.
    3. Weighted mean (Eq. 3): Δ̃_j = Σ_{l∈L_j} α_l Δ̃_{l,j} / Σ_{l∈L_j} α_l, α normalised.

    Ties: rows with equal values at a trimming boundary share the kept positions of their
    tie group equally (each keeps that fraction of its weight), so the result does not depend
    on the order of the rows; without ties this is exactly Eq. 3. A coordinate whose kept
    rows all have zero weight carries no weighted evidence and stays at 0. With uniform
    weights and C ≥ every ‖Δ_l‖ this equals :func:`trimmed_mean` (b = 0: the weighted mean).
    Computed in float64 on the CPU (centred on the lowest kept value of each coordinate), in
    column chunks sorted by numpy; returned in the dtype and on the device of ``deltas``.
    Speed (one thread, a loaded 2-core machine, randn float32): L = 100, D = 1e6 ~2.5 s =
    ~40× ``mean(0)``, ~7× :func:`trimmed_mean` (which uses both cores); the GEO's L = 8,
    D = 1.2e5 ~1.5 ms.

    Args:
        deltas: ``[L, D]`` regional deltas Δ_l = w̄_l − w^t (Eq. 1), finite; not modified.
        weights: ``[L]`` non-negative GEO weights with a positive sum (normalised here).
        clip: C > 0 (003: 1.0).
        trim_fraction: β ∈ [0, 0.5) (003: 0.1).
        eps: ε ≥ 0 of Eq. 2.

    Returns:
        :class:`~geofl.server.aggregators.Aggregate`: the ``[D]`` update Δ̃ and ``[L]``
        float64 effective weights — each row's share of the kept weight, averaged over the
        coordinates that have kept weight (the normalised weights when b = 0).
    """
    k, d = _check_updates(deltas)
    if not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be a finite C > 0, got {clip!r}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and ≥ 0, got {eps!r}")
    alpha = _normalised_weights(weights, k)
    b = trim_count(k, trim_fraction)
    x = deltas.detach()
    step = max(1, ROBUST_AVG_CHUNK_ELEMENTS // k)
    scale = _clip_factors(x, clip, eps, step)
    an = alpha.numpy()

    def columns(a: int) -> tuple[_NumpyArray, _NumpyArray, int]:
        chunk = x[:, a : a + step].to("cpu", torch.float64).numpy() * scale[:, None]
        if b == 0:
            return np.einsum("i,ij->j", an, chunk), np.zeros(k), 0
        return _robust_chunk(chunk, an, b, k - b)

    starts = range(0, d, step)
    workers = torch.get_num_threads() if k * d >= _PARALLEL_MIN_ELEMENTS else 1
    if workers > 1 and len(starts) > 1:  # numpy sorts and reduces without the GIL
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(columns, starts))  # in column order: deterministic sums
    else:
        parts = [columns(a) for a in starts]
    out = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
    rows = np.sum([p[1] for p in parts], axis=0) if parts else np.zeros(k)
    counted = sum(p[2] for p in parts)
    eff = torch.from_numpy(rows / counted) if counted else alpha
    return Aggregate(torch.from_numpy(out).to(deltas.dtype).to(deltas.device), eff)


# --------------------------------------------------------------------------- Krum


@dataclass(frozen=True)
class KrumResult:
    """Output of :func:`multi_krum`.

    Attributes:
        aggregate: ``[D]`` mean of the selected updates (the selected update when m = 1).
        selected: ``[m]`` int64 row indices, lowest score first (ties: lowest index first).
        scores: ``[K]`` float64 Krum scores.
    """

    aggregate: torch.Tensor
    selected: torch.Tensor
    scores: torch.Tensor


#: What a column-block reduction does with one block: ``(block [K, c] as given, float64
#: scratch [n, c], float64 accumulator)``.
_BlockFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


def _span_sums(
    x: torch.Tensor, fn: _BlockFn, shape: tuple[int, ...], n: int, spans: list[range]
) -> list[torch.Tensor]:
    """Per span, ``fn`` accumulated over its column blocks of :data:`GRAM_BLOCK_COLUMNS`.

    One scratch buffer serves all the spans of a worker.
    """
    cols = max(1, min(max(len(span) for span in spans), GRAM_BLOCK_COLUMNS))
    buf = torch.empty((n, cols), dtype=torch.float64, device=x.device)
    sums = []
    for span in spans:
        acc = torch.zeros(shape, dtype=torch.float64, device=x.device)
        for a in range(span.start, span.stop, cols):
            part = x[:, a : min(a + cols, span.stop)]
            fn(part, buf[:, : part.shape[1]], acc)
        sums.append(acc)
    return sums


def _blockwise_sum(x: torch.Tensor, fn: _BlockFn, shape: tuple[int, ...], n: int) -> torch.Tensor:
    """Σ over all column blocks of ``x`` of what ``fn`` accumulates (``n``-row scratch).

    Spans of :data:`_BLOCKS_PER_SPAN` blocks are dealt round-robin to
    ``torch.get_num_threads()`` worker threads; the spans' sums are added in column order,
    so the result does not depend on the thread count. Independent workers running
    single-block torch ops keep their speed when other processes load the CPUs, unlike a
    loop of small multi-threaded ops in one thread (130× mean(0) instead of ~7× at K=100,
    D=1.1e7 on a loaded 2-core machine: every op waits at a barrier for a descheduled thread).
    """
    d = x.shape[1]
    step = GRAM_BLOCK_COLUMNS * _BLOCKS_PER_SPAN
    spans = [range(a, min(a + step, d)) for a in range(0, d, step)] or [range(0)]
    workers = min(torch.get_num_threads(), len(spans))
    if workers <= 1 or x.device.type != "cpu":
        parts = _span_sums(x, fn, shape, n, spans)
    else:
        parts = [torch.empty(0)] * len(spans)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(_span_sums, x, fn, shape, n, spans[w::workers]) for w in range(workers)
            ]
            for w, fut in enumerate(futures):
                parts[w::workers] = fut.result()
    total = parts[0]
    for part in parts[1:]:
        total += part
    return total


def _squareform(pairs: torch.Tensor, k: int) -> torch.Tensor:
    """``[K, K]`` symmetric matrix, zero diagonal, from the ``pdist``-ordered pairs i < j."""
    out = torch.zeros((k, k), dtype=pairs.dtype, device=pairs.device)
    i, j = torch.triu_indices(k, k, offset=1, device=pairs.device)
    out[i, j] = pairs
    out[j, i] = pairs
    return out


def _difference_distances(x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """``[k, k]`` float64 Σ_d (x_id − x_jd)² over ``rows`` of ``x`` (all if None), exact to
    float64 rounding.

    Difference-based: every term is non-negative, so nothing cancels. Each column block is
    copied to float64 (exact) and ``torch.pdist`` sums each pair's squared differences;
    ``pdist`` returns √Σ, and squaring it back costs ≤ 2 ulps. ~1.7× the cost of the Gram
    matrix, hence only used on sampled columns and for the pairs the Gram matrix cannot
    resolve.
    """
    k = x.shape[0] if rows is None else rows.numel()

    def block(part: torch.Tensor, buf: torch.Tensor, acc: torch.Tensor) -> None:
        buf.copy_(part if rows is None else part.index_select(0, rows))
        acc += torch.pdist(buf).square_()

    return _squareform(_blockwise_sum(x, block, (k * (k - 1) // 2,), k), k)


def _reference_row(x: torch.Tensor) -> int:
    """A central row: least sum of squared distances to its ⌊K/2⌋ nearest others, measured
    exactly on ≤ 2·:data:`GRAM_BLOCK_COLUMNS` evenly spaced columns (outliers, < K/2 of
    them, are not chosen)."""
    k, d = x.shape
    if k <= 2 or d == 0:
        return 0
    sample = x[:, :: max(1, d // GRAM_BLOCK_COLUMNS)]
    near = torch.sort(_difference_distances(sample), dim=1).values[:, : k // 2 + 1]
    return int(torch.argmin(near.sum(dim=1)))


def _centred_gram(x: torch.Tensor, ref: int) -> torch.Tensor:
    """``[K, K]`` float64 C Cᵀ, C = x − x[ref] (in float64: exact for float32 input)."""
    k = x.shape[0]
    bounds = _row_group_bounds(k)

    def block(part: torch.Tensor, buf: torch.Tensor, acc: torch.Tensor) -> None:
        buf.copy_(part)  # exact in float64; then the (exact for float32) centring in place
        buf -= buf[ref].clone()  # (a mixed-dtype torch.sub kept ~0.3 GB of temporaries)
        for s, e in itertools.pairwise(bounds):  # tiles on and above the diagonal only
            acc[s:e, s:].addmm_(buf[s:e], buf[s:].T)

    upper = _blockwise_sum(x, block, (k, k), k).triu()
    return upper + upper.triu(1).T


def _row_group_bounds(k: int) -> list[int]:
    """Row boundaries of the groups whose upper-triangular tiles of ``C Cᵀ`` are computed."""
    groups = max(1, min(_GRAM_ROW_GROUPS, k // 16))
    return [round(i * k / groups) for i in range(groups + 1)]


def pairwise_squared_distances(updates: torch.Tensor) -> torch.Tensor:
    """``[K, K]`` float64 ‖Δw_i − Δw_j‖², exact to ~1e-12 relative (Blanchard et al. 2017, §4).

    1. A reference row r: a central update (least distance to its ⌊K/2⌋ nearest), chosen
       exactly on a few thousand evenly spaced columns.
    2. Per column block of :data:`GRAM_BLOCK_COLUMNS`: C = block − block[r] in float64
       (exact for float32 input), and the Gram matrix G = C Cᵀ accumulated in float64
       (only the tiles on and above the diagonal). d_ij = G_ii + G_jj − 2 G_ij, clamped at 0.
       Distances do not change under translation, so no component common to all updates
       (nor an outlying update, which is not chosen as r) enters G. G's error is a few
       float64 ulps of ‖c_i‖² + ‖c_j‖² — ~1e-16 relative when i and j are about as far
       apart as they are from r.
    3. Pairs with d_ij < :data:`_REFINE_RATIO` · (‖c_i‖² + ‖c_j‖²) — near-duplicates far
       from r, where step 2 could be off by more than ~1e-12 of d_ij — are recomputed from
       differences (exact to float64 rounding), with every other pair among their rows.

    So every d_ij is within ~1e-12 (typically 1e-15) of the float64 value Σ_d (Δw_id −
    Δw_jd)², whatever the updates' offset, scale or outliers; identical rows give 0.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.

    Returns:
        ``[K, K]`` float64, symmetric, non-negative, zero diagonal.
    """
    _check_updates(updates)
    x = updates.detach()
    gram = _centred_gram(x, _reference_row(x))
    sq = gram.diagonal()
    scale = sq[:, None] + sq[None, :]
    dist = (scale - 2.0 * gram).clamp_min_(0.0)
    dist.fill_diagonal_(0.0)
    risky = torch.triu(dist < _REFINE_RATIO * scale, diagonal=1)
    if bool(risky.any()):
        rows = torch.unique(torch.cat(torch.nonzero(risky, as_tuple=True)))
        dist[rows[:, None], rows[None, :]] = _difference_distances(x, rows)
    return dist


def _check_krum(k: int, num_byzantine: int) -> None:
    if isinstance(num_byzantine, bool) or not isinstance(num_byzantine, int) or num_byzantine < 0:
        raise ValueError(f"num_byzantine must be an integer ≥ 0, got {num_byzantine!r}")
    need = 2 * num_byzantine + 2
    if k <= need:
        raise AggregationError(
            f"Krum needs more than 2f+2 = {need} updates, got {k}; "
            "lower num_byzantine or raise participation"
        )


def _scores_from_distances(dist: torch.Tensor, num_byzantine: int) -> torch.Tensor:
    """Sum of each row's K − f − 2 smallest off-diagonal entries."""
    k = dist.shape[0]
    others = dist.clone()
    others.fill_diagonal_(math.inf)
    return torch.sort(others, dim=1).values[:, : k - num_byzantine - 2].sum(dim=1)


def krum_scores(updates: torch.Tensor, *, num_byzantine: int) -> torch.Tensor:
    """Krum score of every update (Blanchard et al. 2017, §4).

    s_i = Σ_{j ∈ N_i} ‖Δw_i − Δw_j‖², N_i = the K − f − 2 updates nearest to Δw_i (itself
    excluded). Requires K > 2f + 2.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        num_byzantine: f ≥ 0, the number of Byzantine updates tolerated.

    Returns:
        ``[K]`` float64.

    Raises:
        AggregationError: if K ≤ 2f + 2.
    """
    k, _ = _check_updates(updates)
    _check_krum(k, num_byzantine)
    return _scores_from_distances(pairwise_squared_distances(updates), num_byzantine)


def multi_krum(updates: torch.Tensor, *, num_byzantine: int, num_selected: int) -> KrumResult:
    """Multi-Krum (Blanchard et al. 2017, §4): mean of the m lowest-score updates.

    m = 1 is Krum (the single lowest-score update, returned as a copy). Ties in the score
    are broken by the lowest row index, so the choice is deterministic. Unweighted.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        num_byzantine: f ≥ 0; requires K > 2f + 2.
        num_selected: m, 1 ≤ m ≤ K − f (Blanchard et al. use m = K − f).

    Returns:
        :class:`KrumResult` with the ``[D]`` aggregate, the selected rows and all scores.

    Raises:
        AggregationError: if K ≤ 2f + 2 or m > K − f.
        ValueError: if f < 0 or m < 1.
    """
    k, _ = _check_updates(updates)
    _check_krum(k, num_byzantine)
    if isinstance(num_selected, bool) or not isinstance(num_selected, int) or num_selected < 1:
        raise ValueError(f"num_selected must be an integer ≥ 1, got {num_selected!r}")
    if num_selected > k - num_byzantine:
        raise AggregationError(
            f"Multi-Krum num_selected={num_selected} exceeds K − f = {k - num_byzantine} "
            f"(K={k}, num_byzantine={num_byzantine}); lower num_selected"
        )
    scores = _scores_from_distances(pairwise_squared_distances(updates), num_byzantine)
    selected = torch.sort(scores, stable=True).indices[:num_selected]
    if num_selected == 1:
        aggregate = updates[int(selected[0])].clone()
    else:
        # One pass over the rows (as fast as mean(0)); gathering m rows first is 6–25× slower.
        mask = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        mask[selected] = 1.0 / num_selected
        aggregate = mask @ updates
    return KrumResult(aggregate, selected, scores)


def krum(updates: torch.Tensor, *, num_byzantine: int) -> KrumResult:
    """Krum (Blanchard et al. 2017): the update with the lowest score; see :func:`multi_krum`."""
    return multi_krum(updates, num_byzantine=num_byzantine, num_selected=1)


# --------------------------------------------------------------------------- registry


class TrimmedMeanParams(BaseModel):
    """Parameters of the ``trimmed_mean`` aggregator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trim_fraction: float = Field(
        0.1, ge=0.0, lt=0.5, description="β: fraction of values dropped at each end"
    )


class KrumParams(BaseModel):
    """Parameters of the ``krum`` aggregator (Multi-Krum when ``num_selected`` > 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_byzantine: int = Field(1, ge=0, description="f: Byzantine updates tolerated (K > 2f+2)")
    num_selected: int = Field(1, ge=1, description="m: updates averaged; 1 = Krum, ≤ K − f")


@AGGREGATORS.register("trimmed_mean", params=TrimmedMeanParams)
def build_trimmed_mean(params: TrimmedMeanParams) -> Aggregator:
    """Coordinate-wise β-trimmed mean (Yin et al. 2018); ignores the weights.

    Effective weights: each row's average share of the kept order statistics
    (:func:`trimmed_mean_aggregate`).
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return trimmed_mean_aggregate(updates, trim_fraction=params.trim_fraction)

    return aggregate


@AGGREGATORS.register("median", params=NoParams)
def build_median(_: NoParams) -> Aggregator:
    """Coordinate-wise median, midpoint for even K (Yin et al. 2018); ignores the weights.

    Effective weights: each row's average share of the middle order statistic(s)
    (:func:`coordinate_median_aggregate`).
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return coordinate_median_aggregate(updates)

    return aggregate


def _check_krum_config(params: KrumParams, ctx: CheckContext) -> None:
    """Krum needs K > 2f + 2 updates per round (Blanchard et al. 2017): check it up front."""
    k = ctx.clients_per_round
    if k is None:  # a random cohort size: the per-round check refuses small rounds
        return
    f = params.num_byzantine
    if not k > 2 * f + 2:
        ctx.fail(
            "num_byzantine",
            f"Krum needs more than 2f+2 = {2 * f + 2} updates per round but only {k} clients "
            "take part; lower num_byzantine or raise federation.num_clients/participation",
        )
    if params.num_selected > k - f:
        ctx.fail(
            "num_selected",
            f"Multi-Krum can select at most K − f = {k - f} of the {k} updates per round",
        )


@AGGREGATORS.register("krum", params=KrumParams, check=_check_krum_config)
def build_krum(params: KrumParams) -> Aggregator:
    """Krum / Multi-Krum (Blanchard et al. 2017); ignores the weights.

    Effective weights: 1/m on each of the m selected rows, 0 elsewhere.
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        res = multi_krum(
            updates, num_byzantine=params.num_byzantine, num_selected=params.num_selected
        )
        eff = torch.zeros(updates.shape[0], dtype=torch.float64)
        eff[res.selected] = 1.0 / res.selected.numel()
        return Aggregate(res.aggregate, eff)

    return aggregate


class RobustAvgParams(BaseModel):
    """Parameters of the ``robust_avg`` aggregator (003 §2.2.5; defaults C = 1.0, β = 0.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip: float = Field(1.0, gt=0.0, description="C: each update's L2 norm is clipped to C")
    trim_fraction: float = Field(
        0.1, ge=0.0, lt=0.5, description="β: fraction of values dropped at each end"
    )
    eps: float = Field(1e-12, ge=0.0, description="ε of the clipping factor C / (‖Δ‖ + ε)")


@AGGREGATORS.register("robust_avg", params=RobustAvgParams)
def build_robust_avg(params: RobustAvgParams) -> Aggregator:
    """003 RobustAvg: norm-clipped, weighted coordinate-wise trimmed mean (:func:`robust_avg`).

    Uses the weights it is given (normalised); effective weights: each row's share of the
    kept weight, averaged over the coordinates.
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return robust_avg(
            updates, weights, clip=params.clip, trim_fraction=params.trim_fraction,
            eps=params.eps,
        )  # fmt: skip

    return aggregate
