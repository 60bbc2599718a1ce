"""Per-chunk b-bit affine quantisation and 4-bit packing of update values (003 §2.1.2(3)).

A vector of n values is cut into chunks of ``chunk`` consecutive values; chunk c keeps its
minimum ``lo_c`` and step ``scale_c = (max_c − lo_c) / (2^b − 1)`` (float32 each), and
every value becomes the code ``q = round((x − lo_c) / scale_c) ∈ {0, …, 2^b − 1}``. The
receiver reconstructs ``x̂ = lo_c + q · scale_c``, so ``|x − x̂| ≤ scale_c / 2`` (up to
float32 rounding): the error bound the tests check. Rounding is to nearest (deterministic,
no generator needed); chunks bound the damage of one outlier to its own chunk. Codes of
b = 4 are packed two per byte (low nibble first), b = 8 one per byte.

Stochastic rounding (given a generator): ``q = ⌊y⌋ + 1[u < y − ⌊y⌋]``, ``u ~ U[0, 1)``,
``y = (x − lo_c) / scale_c``. Then ``E[x̂] = x`` (unbiased) and
``Var[x̂_i] = scale_c² · f_i (1 − f_i) ≤ scale_c² / 4`` with ``f_i = y_i − ⌊y_i⌋``, and
``|x − x̂| < scale_c``: the random quantiser FedPAQ needs (Reisizadeh et al., AISTATS
2020, Assumption 1: unbiased, variance bounded). Same byte format; only the codes differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Quantised",
    "dequantise",
    "dequantise_rows",
    "pack_code_rows",
    "pack_codes",
    "quantise",
    "quantise_rows",
    "unpack_codes",
]

SUPPORTED_BITS = (4, 8)


@dataclass(frozen=True)
class Quantised:
    """Codes and per-chunk affine parameters of a quantised vector.

    Attributes:
        codes: ``[n]`` uint8 codes in ``[0, 2^bits − 1]``.
        lo: ``[C]`` float32 chunk minima, C = ⌈n / chunk⌉.
        scale: ``[C]`` float32 chunk steps (0 for a constant chunk).
        bits: Code width b.
        chunk: Values per chunk.
    """

    codes: np.ndarray
    lo: np.ndarray
    scale: np.ndarray
    bits: int
    chunk: int


def _chunk_starts(n: int, chunk: int) -> np.ndarray:
    return np.arange(0, n, chunk, dtype=np.int64)


def quantise(
    values: np.ndarray, bits: int, chunk: int, rng: np.random.Generator | None = None
) -> Quantised:
    """Quantise ``values [n]`` (float32, finite) to ``bits``-bit codes per chunk.

    Args:
        values: ``[n]`` float32.
        bits: 4 or 8.
        chunk: Values per chunk (≥ 1).
        rng: None: round to nearest; a generator: unbiased stochastic rounding (one
            uniform draw per value).
    """
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits: {bits}; use one of {SUPPORTED_BITS}")
    if chunk < 1:
        raise ValueError(f"chunk: {chunk}; use at least 1 value per chunk")
    x = np.ascontiguousarray(values, dtype=np.float32)
    if x.size == 0:
        empty = np.zeros(0, np.float32)
        return Quantised(np.zeros(0, np.uint8), empty, empty, bits, chunk)
    starts = _chunk_starts(x.size, chunk)
    lo = np.minimum.reduceat(x, starts)
    hi = np.maximum.reduceat(x, starts)
    levels = (1 << bits) - 1
    scale = ((hi.astype(np.float64) - lo) / levels).astype(np.float32)
    inv = np.divide(1.0, scale, out=np.zeros_like(scale), where=scale > 0)
    counts = np.diff(np.append(starts, x.size))
    q = (x - np.repeat(lo, counts)) * np.repeat(inv, counts)
    if rng is None:
        q = np.rint(q)
    else:
        floor = np.floor(q)
        q = floor + (rng.random(x.size, dtype=np.float32) < q - floor)
    codes = np.clip(q, 0, levels).astype(np.uint8)
    return Quantised(codes, lo, scale, bits, chunk)


def quantise_rows(
    values: np.ndarray,
    bits: int,
    chunk: int,
    rngs: Sequence[np.random.Generator] | None = None,
) -> Quantised:
    """:func:`quantise` of every row of ``values [K, n]`` at once (the cohort uplink).

    Row i of the result (codes ``[K, n]``, lo and scale ``[K, C]``) is bit-equal to
    ``quantise(values[i], bits, chunk, rngs[i])``: chunk minima and maxima are exact,
    and every other step is the same element-wise float32 operation in the same order,
    so batching changes no bit — only the Python and dispatch cost, paid once per cohort
    instead of once per tractor.

    Args:
        values: ``[K, n]`` float32, finite.
        bits: 4 or 8.
        chunk: Values per chunk (≥ 1); chunks restart at every row.
        rngs: None: round to nearest; else one generator per row, each drawing its row's
            ``n`` uniforms as :func:`quantise` would.
    """
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits: {bits}; use one of {SUPPORTED_BITS}")
    if chunk < 1:
        raise ValueError(f"chunk: {chunk}; use at least 1 value per chunk")
    x = np.ascontiguousarray(values, dtype=np.float32)
    rows, n = x.shape
    starts = _chunk_starts(n, chunk)
    if rows == 0 or n == 0:
        empty = np.zeros((rows, starts.size), np.float32)
        return Quantised(np.zeros((rows, n), np.uint8), empty, empty.copy(), bits, chunk)
    flat_starts = (np.arange(rows, dtype=np.int64)[:, None] * n + starts).ravel()
    lo = np.minimum.reduceat(x.ravel(), flat_starts).reshape(rows, -1)
    hi = np.maximum.reduceat(x.ravel(), flat_starts).reshape(rows, -1)
    levels = (1 << bits) - 1
    scale = ((hi.astype(np.float64) - lo) / levels).astype(np.float32)
    inv = np.divide(1.0, scale, out=np.zeros_like(scale), where=scale > 0)
    counts = np.diff(np.append(starts, n))
    q = (x - np.repeat(lo, counts, axis=1)) * np.repeat(inv, counts, axis=1)
    if rngs is None:
        q = np.rint(q)
    else:
        floor = np.floor(q)
        u = np.stack([rng.random(n, dtype=np.float32) for rng in rngs])
        q = floor + (u < q - floor)
    codes = np.clip(q, 0, levels).astype(np.uint8)
    return Quantised(codes, lo, scale, bits, chunk)


def dequantise_rows(q: Quantised) -> np.ndarray:
    """``x̂ = lo_c + q · scale_c`` of :func:`quantise_rows` codes, ``[K, n]`` float32 (row i
    bit-equal to :func:`dequantise` of row i)."""
    n = q.codes.shape[1]
    counts = np.diff(np.append(_chunk_starts(n, q.chunk), n))
    lo = np.repeat(q.lo, counts, axis=1)
    out: np.ndarray = lo + q.codes.astype(np.float32) * np.repeat(q.scale, counts, axis=1)
    return out


def pack_code_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """:func:`pack_codes` of every row of ``codes [K, n]``: ``[K, packed_size(n, bits)]``
    uint8 (row i's bytes are ``pack_codes(codes[i], bits)``)."""
    c = codes.astype(np.uint8, copy=False)
    if bits == 8:
        return np.ascontiguousarray(c)
    if c.shape[1] % 2:
        c = np.concatenate([c, np.zeros((c.shape[0], 1), np.uint8)], axis=1)
    packed: np.ndarray = c[:, 0::2] | (c[:, 1::2] << 4)
    return packed


def dequantise(q: Quantised) -> np.ndarray:
    """``x̂ = lo_c + q · scale_c`` as ``[n]`` float32."""
    n = q.codes.size
    counts = np.diff(np.append(_chunk_starts(n, q.chunk), n))
    out: np.ndarray = np.repeat(q.lo, counts) + q.codes.astype(np.float32) * np.repeat(
        q.scale, counts
    )
    return out


def pack_codes(codes: np.ndarray, bits: int) -> bytes:
    """Codes as bytes: two 4-bit codes per byte (low nibble first) or one 8-bit code."""
    if bits == 8:
        return codes.astype(np.uint8, copy=False).tobytes()
    c = codes.astype(np.uint8, copy=False)
    if c.size % 2:
        c = np.append(c, np.uint8(0))
    return (c[0::2] | (c[1::2] << 4)).tobytes()


def packed_size(n: int, bits: int) -> int:
    """Bytes :func:`pack_codes` writes for ``n`` codes."""
    return n if bits == 8 else (n + 1) // 2


def unpack_codes(data: bytes | memoryview, n: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_codes`: ``[n]`` uint8 codes (``data`` must hold exactly them)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size != packed_size(n, bits):
        raise ValueError(f"{raw.size} code bytes for {n} {bits}-bit codes")
    if bits == 8:
        return raw.copy()
    out = np.empty(raw.size * 2, np.uint8)
    out[0::2] = raw & 0x0F
    out[1::2] = raw >> 4
    return out[:n]
