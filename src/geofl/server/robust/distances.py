"""Exact pairwise squared distances of a ``[K, D]`` stack, for Krum (Blanchard et al. 2017).

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from geofl.server.robust._common import _check_updates

__all__ = ["GRAM_BLOCK_COLUMNS", "pairwise_squared_distances"]

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
