"""Per-coordinate order statistics of a ``[K, D]`` stack, and each row's kept share.

The engine behind :mod:`geofl.server.robust.trimmed` and :mod:`geofl.server.robust.median`
(Yin et al. 2018, §3). Speed (K = 100 × D = 1e6–1.1e7 float32, 2 threads;
``benchmarks/bench_robust_aggregation.py``): the coordinate-wise rules need every column's
order statistics. ``torch.sort`` over dim 0 ran at ~120×, ``torch.median``/``kthvalue``/
``topk`` at 50–90× the time of ``updates.mean(0)`` (also on a transposed contiguous copy).
numpy's SIMD sort (x86-simd-sort, numpy ≥ 2) of a transposed block is ~10× faster than
``torch.sort``, so on CPU for float32/float64 the columns go in blocks of
:data:`SORT_BLOCK_ELEMENTS`: copy the block transposed into a per-thread buffer, sort its
rows, average the needed order statistics in float64; with ``torch.get_num_threads()``
threads (numpy releases the GIL). That runs at ~4–6× mean(0) (the transposing copy alone is
~2×). The effective weights come from the same pass, while the block is in cache: the sorted
values give each column's kept range [lo_d, hi_d]; every row counts the columns where lo_d ≤
value ≤ hi_d (two comparisons and an int32 count: +30–50 %, 5.9× / 5.7× mean(0) for trimmed
mean / median with weights on a loaded machine); constant columns (a parameter no client
changed) give 1/K to every row at no cost, and the other columns whose boundary tie group
straddles the kept/trimmed boundary are corrected exactly — rare in float updates, but when
every column has such ties (values rounded to 9 levels) the pass takes ~4× as long. Other
devices and dtypes go through float64 CPU copies of column chunks (exact, so ties survive; a
GPU tensor is copied to the host chunk by chunk).
"""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from geofl.server.robust._common import _PARALLEL_MIN_ELEMENTS, _count_rows, _NumpyArray, _uniform

__all__ = ["SORT_BLOCK_ELEMENTS"]

#: Elements of one transposed ``[columns, K]`` block sorted at a time by one thread (2 MB of
#: float32: stays in L2/L3 while it is sorted and reduced).
SORT_BLOCK_ELEMENTS = 1 << 19
#: Elements of one float64 CPU chunk when other devices/dtypes are converted (128 MB).
_CONVERT_CHUNK_ELEMENTS = 1 << 24


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
