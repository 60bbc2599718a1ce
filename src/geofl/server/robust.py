"""Byzantine-robust aggregators over the ``[K, D]`` update tensor (000 §4.5 baselines).

* :func:`trimmed_mean` — coordinate-wise β-trimmed mean (Yin et al. 2018, "Byzantine-robust
  distributed learning: towards optimal statistical rates", §3);
* :func:`coordinate_median` — coordinate-wise median (Yin et al. 2018, §3);
* :func:`krum_scores`, :func:`multi_krum`, :func:`krum` — Krum and Multi-Krum (Blanchard et
  al. 2017, "Machine learning with adversaries: Byzantine tolerant gradient descent", §4).

000 §4.5 compares "Trimmed Mean" and "Krum" with FedAvg and the consistency weighting
(:mod:`geofl.server.consistency`) under Dirichlet α = 0.1, K = 10.

All of them are *unweighted*, as in the cited papers: the ``weights`` an
:class:`~geofl.server.aggregators.Aggregator` receives (data sizes, consistency scores, …) are
ignored. They are pure functions that never modify their inputs, and assume finite updates
(:func:`geofl.server.validate.validate_update` rejects NaN/Inf before aggregation).

Speed (K = 100 × D = 1e6–1.1e7 float32, 2 threads; ``benchmarks/bench_robust_aggregation.py``):
the coordinate-wise rules need every column's order statistics. ``torch.sort`` over dim 0 ran
at ~120×, ``torch.median``/``kthvalue``/``topk`` at 50–90× the time of ``updates.mean(0)``
(also on a transposed contiguous copy). numpy's SIMD sort (x86-simd-sort, numpy ≥ 2) of
a transposed block is ~10× faster than ``torch.sort``, so on CPU for float32/float64 the
columns go in blocks of :data:`SORT_BLOCK_ELEMENTS`: copy the block transposed into a
per-thread buffer, sort its rows, average the needed order statistics in float64; with
``torch.get_num_threads()`` threads (numpy releases the GIL). That runs at ~4–6× mean(0)
(the transposing copy alone is ~2×). Other devices and dtypes use chunked ``torch.sort``.
Krum needs the pairwise squared distances, from the Gram matrix: one ``[K, D] × [D, K]``
matmul in float32 over column blocks of :data:`GRAM_BLOCK_COLUMNS` (views, no copy), each
block's ``[K, K]`` product summed in float64 (~7–9× mean(0); float64 matmul was ~30×,
centring each block first ~15×). Memory beyond the input: a few MB of block buffers plus
the ``[D]`` output.
"""

from __future__ import annotations

import itertools
import math
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
    "SORT_BLOCK_ELEMENTS",
    "KrumParams",
    "KrumResult",
    "TrimmedMeanParams",
    "coordinate_median",
    "krum",
    "krum_scores",
    "multi_krum",
    "pairwise_squared_distances",
    "trim_count",
    "trimmed_mean",
]

#: Elements of one transposed ``[columns, K]`` block sorted at a time by one thread (2 MB of
#: float32: stays in L2/L3 while it is sorted and reduced).
SORT_BLOCK_ELEMENTS = 1 << 19
#: Columns of one Gram-matrix block (a view of the input, never copied for float32/64). At
#: K=100 blocks of 2^15 / 2^17 / 2^19 / 2^20 columns took 13 / 9.0 / 7.3 / 7.1× mean(0).
GRAM_BLOCK_COLUMNS = 1 << 19
#: Below this many elements the column sort runs in the calling thread only.
_PARALLEL_MIN_ELEMENTS = 1 << 20
#: Slack for ``floor(β·K)`` so that e.g. β = 0.29, K = 100 trims 29, not 28 (0.29·100 < 29).
_FLOOR_SLACK = 1e-9

_NumpyArray = npt.NDArray[Any]


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


def _numpy_order_mean(x: _NumpyArray, out: _NumpyArray, lo: int, hi: int, workers: int) -> None:
    """Per column of ``x`` (``[K, D]``): mean of its sorted values at positions ``[lo, hi)``."""
    k, d = x.shape
    cols = max(1, SORT_BLOCK_ELEMENTS // k)

    def run(start: int, stop: int) -> None:
        buf = np.empty((min(cols, stop - start), k), dtype=x.dtype)
        for a in range(start, stop, cols):
            b = min(a + cols, stop)
            rows = buf[: b - a]
            np.copyto(rows, x[:, a:b].T)
            rows.sort(axis=1)
            _reduce_sorted(rows, lo, hi, out[a:b])

    if workers <= 1 or k * d < _PARALLEL_MIN_ELEMENTS:
        run(0, d)
        return
    # A few contiguous spans per thread (balance on a shared machine), each done in blocks.
    n_spans = min(4 * workers, math.ceil(d / cols))
    bounds = [round(i * d / n_spans) for i in range(n_spans + 1)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run, s, e) for s, e in itertools.pairwise(bounds)]
        for fut in futures:
            fut.result()


def _torch_order_mean(updates: torch.Tensor, out: torch.Tensor, lo: int, hi: int) -> None:
    """Fallback of :func:`_numpy_order_mean` for other devices/dtypes: chunked ``torch.sort``."""
    k, d = updates.shape
    cols = max(1, SORT_BLOCK_ELEMENTS // k)
    for a in range(0, d, cols):
        block = torch.sort(updates[:, a : a + cols], dim=0).values[lo:hi]
        out[a : a + cols] = block.to(torch.float64).mean(dim=0)


def _order_statistic_mean(updates: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """``[D]``: per coordinate, the mean of the sorted values at positions ``lo … hi − 1``."""
    _, d = updates.shape
    out = torch.empty(d, dtype=updates.dtype, device=updates.device)
    if updates.device.type == "cpu" and updates.dtype in (torch.float32, torch.float64):
        x = updates.detach().numpy()
        _numpy_order_mean(x, out.numpy(), lo, hi, torch.get_num_threads())
    else:
        _torch_order_mean(updates.detach(), out, lo, hi)
    return out


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
    b = 0 the result is ``updates.mean(0)`` itself.

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
    return _order_statistic_mean(updates, b, k - b)


def coordinate_median(updates: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median (Yin et al. 2018, §3).

    For odd K the middle value; for even K the mean of the two middle values (computed in
    float64, so it neither overflows nor moves when both are equal). ``torch.median`` would
    return the lower one; the midpoint is the usual statistical median and is symmetric
    under negation of the updates.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.

    Returns:
        ``[D]`` in the dtype of ``updates``.
    """
    k, _ = _check_updates(updates)
    if k == 1:
        return updates[0].clone()
    half = k // 2
    lo, hi = (half, half + 1) if k % 2 else (half - 1, half + 1)
    return _order_statistic_mean(updates, lo, hi)


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


def pairwise_squared_distances(updates: torch.Tensor) -> torch.Tensor:
    """``[K, K]`` float64 ‖Δw_i − Δw_j‖² from the Gram matrix G = U Uᵀ.

    d_ij = G_ii + G_jj − 2 G_ij, clamped at 0, with an exact zero diagonal. G is one
    ``[K, D] × [D, K]`` matmul in the input precision (float32 for float32 input) over column
    blocks of :data:`GRAM_BLOCK_COLUMNS`, each block's ``[K, K]`` product summed in float64.
    The relative error of d_ij is about 1e-6 · ‖Δw‖² / d_ij: fine unless updates agree to
    better than ~0.1 %.

    Args:
        updates: ``[K, D]`` floating; not modified (blocks are views).
    """
    k, d = _check_updates(updates)
    compute = torch.float64 if updates.dtype == torch.float64 else torch.float32
    gram = torch.zeros((k, k), dtype=torch.float64, device=updates.device)
    x = updates.detach()
    for a in range(0, d, GRAM_BLOCK_COLUMNS):
        block = x[:, a : a + GRAM_BLOCK_COLUMNS].to(compute)
        gram += torch.mm(block, block.T).to(torch.float64)
    sq = gram.diagonal()
    dist = (sq[:, None] + sq[None, :] - 2.0 * gram).clamp_min_(0.0)
    dist.fill_diagonal_(0.0)
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


def _uniform(k: int) -> torch.Tensor:
    return torch.full((k,), 1.0 / k, dtype=torch.float64)


@AGGREGATORS.register("trimmed_mean", params=TrimmedMeanParams)
def build_trimmed_mean(params: TrimmedMeanParams) -> Aggregator:
    """Coordinate-wise β-trimmed mean (Yin et al. 2018); ignores the weights."""

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        delta = trimmed_mean(updates, trim_fraction=params.trim_fraction)
        return Aggregate(delta, _uniform(updates.shape[0]))

    return aggregate


@AGGREGATORS.register("median", params=NoParams)
def build_median(_: NoParams) -> Aggregator:
    """Coordinate-wise median, midpoint for even K (Yin et al. 2018); ignores the weights."""

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return Aggregate(coordinate_median(updates), _uniform(updates.shape[0]))

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
