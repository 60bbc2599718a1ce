"""Column-blocked passes over a ``[K, D]`` update stack: several reductions, one memory read.

A robust server step needs more than one reduction of the same stack — CGF (004 Eq. 6) the
dots ⟨Δw_j, r̄⟩ *and* the norms ‖Δw_j‖; HRA (004 Eq. 9) the weighted mean *and* the
survivors' mean. As whole-tensor ops each one streams the whole stack from memory (4.4 GB at
K = 100, D = 1.1e7), so the server step costs a multiple of one weighted mean. Here the
columns are cut into blocks of about :data:`BLOCK_BYTES` (K rows × C columns): every
reduction of a block reads it from cache, and the stack is read from memory once per pass.

Threads: the columns are split into one contiguous range per torch thread (boundaries on
multiples of 256 columns), each range runs on a worker thread whose torch ops are
single-threaded (``torch.set_num_threads(1)`` around the pass, restored after): no nested
parallel regions, no fork–join per block, and the ops release the GIL. Each worker writes
per-block partial results (float32) that are summed in float64 at the end, so the result
does not depend on the thread count beyond float32 rounding inside a block. Tensors on
another device use the whole-tensor ops.

Fused kernels: a float32 stack on the CPU of at least :data:`FUSED_MIN_BYTES` (one that
streams from memory on any CPU) goes through the compiled kernels of
:mod:`geofl.server.kernels` instead of torch's per-block calls: one loop per block does what
several torch calls do, so each pass reads the stack once at close to memory speed
(``benchmarks/bench_dual_shield.py``). Their results are independent of the thread count
(the dots and norms per block, blocks aligned to :data:`FUSED_COLUMNS`; the combinations
column by column); they differ from the torch path's in float32 rounding. Smaller stacks
keep the torch path, whose results (and every published run's bits) are unchanged; there
both cost a few milliseconds per round.

Memory: no pass allocates a ``[D]``-sized temporary (on Linux, a buffer that large comes
fresh from the kernel, and its page faults cost more than a streamed read of it);
:func:`linear_combinations` writes into caller-provided rows and runs a caller's
``epilogue`` on each finished chunk of columns while it is still in cache (the server step
fuses its ``[D]`` work there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import torch

__all__ = [
    "BLOCK_BYTES",
    "EPILOGUE_COLUMNS",
    "FUSED_COLUMNS",
    "FUSED_MIN_BYTES",
    "block_columns",
    "dots_and_norms",
    "linear_combinations",
    "map_ranges",
    "squared_norm",
]

#: Bytes of one ``[K, C]`` column block: about a core's L2 cache (1–2 MiB); larger blocks
#: stream longer row segments, smaller ones re-read from a nearer cache.
BLOCK_BYTES = 1 << 21
#: Fewest columns per worker before another thread is worth starting.
MIN_COLUMNS_PER_WORKER = 1 << 15
#: Columns of one chunk handed to a :func:`linear_combinations` epilogue (256 KiB per
#: float32 row: in cache, and few enough calls that Python's overhead stays small).
EPILOGUE_COLUMNS = 1 << 16
#: Stacks of at least this many bytes (float32, CPU, rows contiguous) use the compiled
#: kernels of :mod:`geofl.server.kernels`: past the last-level cache of any CPU.
FUSED_MIN_BYTES = 1 << 26
#: Columns per block of the compiled kernels: the eight row segments and the
#: output segments a block touches stay in a core's L2 cache.
FUSED_COLUMNS = 1 << 14
#: Column ranges of the worker threads start on multiples of this (whole cache lines and
#: vector registers).
ALIGN = 256

T = TypeVar("T")


def block_columns(rows: int, itemsize: int) -> int:
    """C, the columns of one block of ``rows`` rows: about :data:`BLOCK_BYTES`, ≥ 256."""
    return max(256, BLOCK_BYTES // max(1, rows * itemsize) // 256 * 256)


def map_ranges(
    d: int,
    work: Callable[[int, int], T],
    *,
    align: int | None = None,
    grain: int | None = None,
) -> list[T]:
    """``work(lo, hi)`` on contiguous column ranges covering ``[0, d)``, one per thread.

    Runs on ``torch.get_num_threads()`` worker threads (fewer for small ``d``: at least
    ``grain`` columns each, default :data:`MIN_COLUMNS_PER_WORKER`) with single-threaded
    torch ops; the thread count is restored afterwards. Inner range bounds are multiples of
    ``align`` (default :data:`ALIGN`).
    """
    align = ALIGN if align is None else align
    threads = torch.get_num_threads()
    n = max(1, min(threads, d // (MIN_COLUMNS_PER_WORKER if grain is None else grain)))
    if n == 1:
        return [work(0, d)]
    bounds = [0, *(d * i // n // align * align for i in range(1, n)), d]
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(work, bounds[:-1], bounds[1:]))
    finally:
        torch.set_num_threads(threads)


def fused(updates: torch.Tensor) -> bool:
    """True if ``updates`` goes through the compiled kernels (see the module docstring)."""
    return (
        updates.device.type == "cpu"
        and updates.dtype == torch.float32
        and updates.ndim == 2
        and updates.is_contiguous()
        and updates.numel() * 4 >= FUSED_MIN_BYTES
    )


def squared_norm(vector: torch.Tensor) -> float:
    """‖v‖² of a ``[D]`` vector, squares summed in float64 chunk by chunk on the worker
    threads (no ``[D]`` float64 copy, unlike ``vector_norm(v, dtype=float64)``)."""

    def work(lo: int, hi: int) -> float:
        total = 0.0
        for a in range(lo, hi, EPILOGUE_COLUMNS):
            chunk = vector[a : min(a + EPILOGUE_COLUMNS, hi)].to(torch.float64)
            total += float(torch.dot(chunk, chunk))
        return total

    return sum(map_ranges(vector.numel(), work))


def dots_and_norms(
    updates: torch.Tensor, ref: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``([K] ⟨Δw_j, r⟩, [K] ‖Δw_j‖², ‖r‖²)`` in float64 from one read of ``updates``.

    Per block: one matrix–vector product and one row-norm reduction (float32, the block in
    cache), accumulated over blocks in float64. No copy of the stack is made.

    Args:
        updates: ``[K, D]`` float32 (or float64), rows contiguous.
        ref: ``[D]`` in the same dtype.
    """
    k, d = updates.shape
    if updates.device.type != "cpu":
        sq = torch.linalg.vector_norm(updates, dim=1).to(torch.float64).square()
        return (updates @ ref).to(torch.float64), sq, squared_norm(ref)
    if fused(updates) and ref.dtype == torch.float32:
        return _fused_dots_and_norms(updates, ref.contiguous())
    cols = block_columns(k, updates.element_size())

    def work(lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = -(-(hi - lo) // cols)
        dots = torch.empty((n, k), dtype=updates.dtype)
        norms = torch.empty((n, k), dtype=updates.dtype)
        for i, a in enumerate(range(lo, hi, cols)):
            b = min(a + cols, hi)
            block = updates[:, a:b]
            torch.mv(block, ref[a:b], out=dots[i])
            torch.linalg.vector_norm(block, dim=1, out=norms[i])
        return dots.to(torch.float64).sum(0), norms.to(torch.float64).square_().sum(0)

    parts = map_ranges(d, work)
    dots = sum(p[0] for p in parts[1:]) + parts[0][0]
    return dots, sum(p[1] for p in parts[1:]) + parts[0][1], squared_norm(ref)


def _fused_dots_and_norms(
    updates: torch.Tensor, ref: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """:func:`dots_and_norms` by :func:`geofl.server.kernels.block_dots_and_squares`: the
    threads take whole blocks, and the float64 block partials are summed in block order."""
    from geofl.server.kernels import block_dots_and_squares

    k, d = updates.shape
    cols = FUSED_COLUMNS
    blocks = -(-d // cols)
    dots = np.empty((blocks, k))
    squares = np.empty((blocks, k))
    ref_squares = np.empty(blocks)
    x, r = updates.numpy(), ref.numpy()

    def work(first: int, last: int) -> None:
        block_dots_and_squares(x, r, first, last, cols, dots, squares, ref_squares)

    map_ranges(blocks, work, align=1, grain=1)
    totals = torch.from_numpy(dots.sum(axis=0)), torch.from_numpy(squares.sum(axis=0))
    return *totals, float(ref_squares.sum())


def linear_combinations(
    coeffs: torch.Tensor,
    updates: torch.Tensor,
    out: Sequence[torch.Tensor] | None = None,
    epilogue: Callable[[int, int], None] | None = None,
) -> list[torch.Tensor]:
    """M ``[D]`` rows, coeffs ``[M, K]`` × updates ``[K, D]``, from one read of ``updates``.

    Per block: M vector–matrix products (the first reads the block from memory, the others
    from cache), written straight into the output rows. Small M (the server needs 2).

    Args:
        coeffs: ``[M, K]``.
        updates: ``[K, D]``.
        out: M contiguous ``[D]`` tensors in the updates' dtype to write into (default:
            new ones).
        epilogue: Called as ``epilogue(lo, hi)`` once the output columns ``[lo, hi)`` are
            written, on chunks of about :data:`EPILOGUE_COLUMNS` that cover ``[0, D)``
            (disjoint, possibly from several threads at once; not on another device's
            tensors, where it is called once with ``(0, D)``).

    Returns:
        The M output rows.
    """
    m = coeffs.shape[0]
    k, d = updates.shape
    coeffs = coeffs.to(updates.dtype)
    rows = list(out) if out is not None else [torch.empty(d, dtype=updates.dtype) for _ in range(m)]
    if updates.device.type != "cpu":
        for row, c in zip(rows, coeffs, strict=True):
            row.copy_(c @ updates)
        if epilogue is not None:
            epilogue(0, d)
        return rows
    if fused(updates):
        return _fused_linear_combinations(coeffs, updates, rows, epilogue)
    cols = block_columns(k, updates.element_size())
    chunk = max(cols, EPILOGUE_COLUMNS // cols * cols)

    def work(lo: int, hi: int) -> None:
        for c0 in range(lo, hi, chunk):
            c1 = min(c0 + chunk, hi)
            for a in range(c0, c1, cols):
                b = min(a + cols, c1)
                block_t = updates[:, a:b].T
                for row, c in zip(rows, coeffs, strict=True):
                    torch.mv(block_t, c, out=row[a:b])
            if epilogue is not None:
                epilogue(c0, c1)

    map_ranges(d, work)
    return rows


def _fused_linear_combinations(
    coeffs: torch.Tensor,
    updates: torch.Tensor,
    rows: list[torch.Tensor],
    epilogue: Callable[[int, int], None] | None,
) -> list[torch.Tensor]:
    """:func:`linear_combinations` by :func:`geofl.server.kernels.combine_rows`, chunk by
    chunk of :data:`EPILOGUE_COLUMNS` columns, each followed by the epilogue. Rows whose
    coefficients are all zero are not read."""
    from geofl.server.kernels import combine_row_pair, combine_rows

    d = updates.shape[1]
    c, x = coeffs.contiguous().numpy(), updates.numpy()
    read = torch.nonzero((coeffs != 0).any(dim=0)).flatten().numpy()  # rows to read
    out = tuple(row.numpy() for row in rows)
    cols = FUSED_COLUMNS

    def work(lo: int, hi: int) -> None:
        for c0 in range(lo, hi, EPILOGUE_COLUMNS):
            c1 = min(c0 + EPILOGUE_COLUMNS, hi)
            if len(out) == 2:
                combine_row_pair(c, read, x, c0, c1, cols, out[0], out[1])
            else:
                combine_rows(c, read, x, c0, c1, cols, out)
            if epilogue is not None:
                epilogue(c0, c1)

    map_ranges(d, work)
    return rows
