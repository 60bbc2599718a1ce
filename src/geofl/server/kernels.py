"""Compiled column kernels for large float32 ``[K, D]`` update stacks (numba, no GIL).

:mod:`geofl.server.columns` calls these on stacks of at least
:data:`~geofl.server.columns.FUSED_MIN_BYTES`, where a round's cost is the memory traffic of
the stack (4.4 GB at K = 100, D = 1.1e7). Per block of columns they do in one loop what
torch does in several calls, each of which streams the block again:

* :func:`block_dots_and_squares` — CGF's ⟨Δw_j, r⟩, ‖Δw_j‖² and ‖r‖² (004 Eq. 6) from one
  read of each row segment, eight rows at a time so that the reference segment is loaded
  once per eight rows (the last group repeats the last row, so every row takes the same
  operations: equal rows get equal bits wherever they stand);
* :func:`combine_rows` — M linear combinations of the rows (004 Eq. 9's weighted mean and
  the survivors' mean; FedAvg's weighted mean), eight rows at a time into output segments
  that stay in cache, so each output element is loaded and stored once per eight rows
  instead of once per row; :func:`combine_row_pair` does two outputs (the server's case)
  in one loop over the rows. Rows whose coefficients are all zero (updates CGF dropped)
  are not read.

Arithmetic and reproducibility:

* The combinations are compiled without fast-math: every output column is the same
  sequence of float32 IEEE operations (o + ((((c₀x₀ + c₁x₁) + c₂x₂) + …) + c₇x₇) per group
  of eight of the rows read, in row order; then o + cⱼxⱼ per remaining row), vectorised
  across columns only. The result therefore does not depend on the thread count, the
  column ranges, the block size, or the CPU's vector width.
* :func:`block_dots_and_squares` sums within a block in float32 with re-association (the
  reductions are vectorised), and returns one float64 partial per (block, row); the caller
  sums the blocks in order. Blocks start at multiples of the block size whatever the thread
  ranges are, so the result does not depend on the thread count; it may differ in the last
  float32 bits between CPUs of different vector widths (as torch's own kernels do).
* Non-finite values propagate as in IEEE arithmetic (no ``nnan``/``ninf`` assumptions).

Compilation is lazy: the first call on a machine compiles a kernel (≈ 0.6–1.8 s each here),
later processes load it from numba's disk cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["block_dots_and_squares", "combine_row_pair", "combine_rows"]

_REDUCE = {"reassoc", "contract"}


@njit(nogil=True, cache=True, fastmath=_REDUCE)
def block_dots_and_squares(
    x: np.ndarray,
    r: np.ndarray,
    first: int,
    last: int,
    cols: int,
    dots: np.ndarray,
    squares: np.ndarray,
    ref_squares: np.ndarray,
) -> None:
    """Per block b in ``[first, last)`` (columns ``[b·cols, (b+1)·cols)`` ∩ ``[0, D)``):
    ``dots[b, j] = ⟨x_j, r⟩``, ``squares[b, j] = ‖x_j‖²`` and ``ref_squares[b] = ‖r‖²``
    over the block.

    Args:
        x: ``[K, D]`` float32, C-contiguous.
        r: ``[D]`` float32.
        first: First block index.
        last: One past the last block index.
        cols: Columns per block.
        dots: ``[n_blocks, K]`` float64, written at rows ``[first, last)``.
        squares: ``[n_blocks, K]`` float64, likewise.
        ref_squares: ``[n_blocks]`` float64, likewise.
    """
    k, d = x.shape
    top = k - 1
    for b in range(first, last):
        a = b * cols
        e = min(a + cols, d)
        rb = r[a:e]
        rq = np.float32(0.0)
        for c in range(e - a):
            rq += rb[c] * rb[c]
        ref_squares[b] = rq
        for j in range(0, k, 8):
            # the last group repeats row K-1: every row takes the same operations
            rows = (
                j,
                min(j + 1, top),
                min(j + 2, top),
                min(j + 3, top),
                min(j + 4, top),
                min(j + 5, top),
                min(j + 6, top),
                min(j + 7, top),
            )
            s, q = _dots_and_squares(_group(x, rows, a, e), rb)
            for i in range(8):
                dots[b, rows[i]] = s[i]
                squares[b, rows[i]] = q[i]


@njit(nogil=True, cache=True, fastmath=_REDUCE)
def _dots_and_squares(
    v: tuple[np.ndarray, ...], r: np.ndarray
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(⟨v_i, r⟩, ‖v_i‖²)`` of eight ``[n]`` float32 segments, in float32, reading each
    element of ``r`` once for all eight."""
    x0, x1, x2, x3, x4, x5, x6, x7 = v
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = np.float32(0.0)
    q0 = q1 = q2 = q3 = q4 = q5 = q6 = q7 = np.float32(0.0)
    for c in range(r.shape[0]):
        rv = r[c]
        v0, v1, v2, v3 = x0[c], x1[c], x2[c], x3[c]
        v4, v5, v6, v7 = x4[c], x5[c], x6[c], x7[c]
        s0 += v0 * rv
        s1 += v1 * rv
        s2 += v2 * rv
        s3 += v3 * rv
        s4 += v4 * rv
        s5 += v5 * rv
        s6 += v6 * rv
        s7 += v7 * rv
        q0 += v0 * v0
        q1 += v1 * v1
        q2 += v2 * v2
        q3 += v3 * v3
        q4 += v4 * v4
        q5 += v5 * v5
        q6 += v6 * v6
        q7 += v7 * v7
    return (s0, s1, s2, s3, s4, s5, s6, s7), (q0, q1, q2, q3, q4, q5, q6, q7)


@njit(nogil=True, cache=True)
def _group(x: np.ndarray, rows: Any, a: int, e: int) -> tuple[np.ndarray, ...]:
    """The segments ``x[rows[i], a:e]`` of eight rows (``rows``: 8 indices, an array or a
    tuple)."""
    return (
        x[rows[0], a:e],
        x[rows[1], a:e],
        x[rows[2], a:e],
        x[rows[3], a:e],
        x[rows[4], a:e],
        x[rows[5], a:e],
        x[rows[6], a:e],
        x[rows[7], a:e],
    )


@njit(nogil=True, cache=True)
def _add_group(o: np.ndarray, c: np.ndarray, v: tuple[np.ndarray, ...]) -> None:
    """``o += ((((c₀v₀ + c₁v₁) + …) + c₇v₇)`` on ``[n]`` float32 segments."""
    c0, c1, c2, c3, c4, c5, c6, c7 = c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
    x0, x1, x2, x3, x4, x5, x6, x7 = v
    for t in range(o.shape[0]):
        o[t] += (
            c0 * x0[t]
            + c1 * x1[t]
            + c2 * x2[t]
            + c3 * x3[t]
            + c4 * x4[t]
            + c5 * x5[t]
            + c6 * x6[t]
            + c7 * x7[t]
        )


@njit(nogil=True, cache=True)
def _add_group_twice(
    o: np.ndarray, c: np.ndarray, p: np.ndarray, d: np.ndarray, v: tuple[np.ndarray, ...]
) -> None:
    """:func:`_add_group` into ``o`` with ``c`` and into ``p`` with ``d``, reading each
    element of ``v`` once."""
    c0, c1, c2, c3, c4, c5, c6, c7 = c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
    d0, d1, d2, d3, d4, d5, d6, d7 = d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
    x0, x1, x2, x3, x4, x5, x6, x7 = v
    for t in range(o.shape[0]):
        y0, y1, y2, y3 = x0[t], x1[t], x2[t], x3[t]
        y4, y5, y6, y7 = x4[t], x5[t], x6[t], x7[t]
        o[t] += c0 * y0 + c1 * y1 + c2 * y2 + c3 * y3 + c4 * y4 + c5 * y5 + c6 * y6 + c7 * y7
        p[t] += d0 * y0 + d1 * y1 + d2 * y2 + d3 * y3 + d4 * y4 + d5 * y5 + d6 * y6 + d7 * y7


@njit(nogil=True, cache=True)
def _add_one_row(w: float, x: np.ndarray, o: np.ndarray) -> None:
    """``o += w · x`` on ``[n]`` float32 segments."""
    for t in range(o.shape[0]):
        o[t] += w * x[t]


@njit(nogil=True, cache=True)
def combine_rows(
    coeffs: np.ndarray,
    rows: np.ndarray,
    x: np.ndarray,
    lo: int,
    hi: int,
    cols: int,
    out: tuple[np.ndarray, ...],
) -> None:
    """``out[i][lo:hi] = Σ_{j ∈ rows} coeffs[i, j] · x[j, lo:hi]`` for every output i.

    Only the listed rows are read (the caller leaves out rows whose coefficients are all
    zero: updates CGF dropped). They are added in groups of eight in the listed order (the
    remainder one row at a time); see the module docstring for the exact operation order,
    which is the same for any number of outputs.

    Args:
        coeffs: ``[M, K]`` float32.
        rows: ``[n]`` int64 row indices, increasing.
        x: ``[K, D]`` float32, C-contiguous.
        lo: First column.
        hi: One past the last column.
        cols: Columns per block (the output segments a block updates stay in cache).
        out: M ``[D]`` float32 rows, written at columns ``[lo, hi)``.
    """
    m = coeffs.shape[0]
    n8 = rows.shape[0] // 8 * 8
    for a in range(lo, hi, cols):
        e = min(a + cols, hi)
        for i in range(m):
            out[i][a:e] = 0.0
        for g in range(0, n8, 8):
            v = _group(x, rows[g : g + 8], a, e)
            for i in range(m):
                _add_group(out[i][a:e], coeffs[i, rows[g : g + 8]], v)
        for j in rows[n8:]:
            for i in range(m):
                _add_one_row(coeffs[i, j], x[j, a:e], out[i][a:e])


@njit(nogil=True, cache=True)
def combine_row_pair(
    coeffs: np.ndarray,
    rows: np.ndarray,
    x: np.ndarray,
    lo: int,
    hi: int,
    cols: int,
    out0: np.ndarray,
    out1: np.ndarray,
) -> None:
    """:func:`combine_rows` for two outputs (``coeffs`` ``[2, K]``), reading each element
    of a group of rows once for both: the same bits as :func:`combine_rows`."""
    n8 = rows.shape[0] // 8 * 8
    for a in range(lo, hi, cols):
        e = min(a + cols, hi)
        out0[a:e] = 0.0
        out1[a:e] = 0.0
        for g in range(0, n8, 8):
            group = rows[g : g + 8]
            v = _group(x, group, a, e)
            _add_group_twice(out0[a:e], coeffs[0, group], out1[a:e], coeffs[1, group], v)
        for j in rows[n8:]:
            _add_one_row(coeffs[0, j], x[j, a:e], out0[a:e])
            _add_one_row(coeffs[1, j], x[j, a:e], out1[a:e])
