"""Byte formats of an encoded update: sparse 4-bit top-k and dense b-bit (003 Tables 8–9).

Every encoder returns the bytes that travel *and* the receiver's reconstruction (so error
feedback needs no second decode); every decoder validates lengths, codes and parameters
and raises :class:`PayloadError` with the reason, never anything else. All integers are
little-endian.

Sparse (pipeline a, "proximity + 4-bit + top-k")::

    <BBBBIIII> id=1, bits, index coding, 0, D, k, chunk, index bytes
    index bytes (delta-varint or bitmap, geofl.network.sparse)
    lo [C] f32 ‖ scale [C] f32 ‖ packed codes of the k kept values (in index order)

Dense (pipeline c, "fallback skipper + light quantisation", 8-bit by default)::

    <BBHII> id=3, bits, 0, D, chunk
    lo [C] f32 ‖ scale [C] f32 ‖ packed codes of all D values

Raw (no compression: FedAvg's dense float32 upload, the baseline over the same links)::

    <BBHI> id=4, 0, 0, D ‖ D float32

Chunked frames (pipeline b) and staleness-tagged frames of any payload (id 5, the
driver → LEO hop) are in :mod:`geofl.network.chunking`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import torch

from geofl.network.quantize import (
    SUPPORTED_BITS,
    Quantised,
    dequantise,
    dequantise_rows,
    pack_code_rows,
    pack_codes,
    packed_size,
    quantise,
    quantise_rows,
    unpack_codes,
)
from geofl.network.sparse import (
    IndexCoding,
    decode_bitmap,
    decode_varint_gaps,
    encode_index_rows,
    encode_indices,
    topk_count,
    topk_indices,
    topk_rows,
)

__all__ = [
    "DENSE_ID",
    "RAW_ID",
    "SPARSE_ID",
    "TAGGED_ID",
    "PayloadError",
    "decode_dense",
    "decode_payload",
    "decode_raw",
    "decode_sparse",
    "encode_dense",
    "encode_dense_rows",
    "encode_raw",
    "encode_raw_rows",
    "encode_sparse",
    "encode_sparse_rows",
]

SPARSE_ID, CHUNK_ID, DENSE_ID, RAW_ID, TAGGED_ID = 1, 2, 3, 4, 5
_SPARSE = struct.Struct("<BBBBIIII")
_DENSE = struct.Struct("<BBHII")
_RAW = struct.Struct("<BBHI")
_MAX_U32 = 2**32 - 1


class PayloadError(ValueError):
    """An encoded update is malformed; the message says which part."""


def quantised_body(
    values: np.ndarray, bits: int, chunk: int, rng: np.random.Generator | None = None
) -> tuple[bytes, np.ndarray]:
    """``lo ‖ scale ‖ packed codes`` of ``values`` and their reconstruction ``[n]``
    (stochastic rounding when ``rng`` is given, :func:`~geofl.network.quantize.quantise`)."""
    q = quantise(values, bits, chunk, rng)
    body = q.lo.tobytes() + q.scale.tobytes() + pack_codes(q.codes, bits)
    return body, dequantise(q)


def quantised_body_rows(
    values: np.ndarray,
    bits: int,
    chunk: int,
    rngs: Sequence[np.random.Generator] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantised_body` of every row of ``values [K, n]``: the bodies as one
    ``[K, body_size(n, bits, chunk)]`` uint8 array (row i's bytes are row i's body, built
    in one pass, no per-row concatenation) and the reconstructions ``[K, n]``."""
    q = quantise_rows(values, bits, chunk, rngs)
    parts = [q.lo.view(np.uint8), q.scale.view(np.uint8), pack_code_rows(q.codes, bits)]
    return np.concatenate(parts, axis=1), dequantise_rows(q)


def rows_with_head(head: bytes, body: np.ndarray) -> list[bytes]:
    """One ``bytes`` per row of ``head ‖ body[i]``, each built once from one buffer."""
    whole = np.concatenate([np.tile(np.frombuffer(head, np.uint8), (body.shape[0], 1)), body], 1)
    width = whole.shape[1]
    blob = whole.tobytes()
    return [blob[i * width : (i + 1) * width] for i in range(whole.shape[0])]


def body_size(n: int, bits: int, chunk: int) -> int:
    """Bytes of :func:`quantised_body` for ``n`` values."""
    return 8 * (-(-n // chunk)) + packed_size(n, bits)


def read_body(buf: memoryview, n: int, bits: int, chunk: int) -> np.ndarray:
    """Inverse of :func:`quantised_body`; ``buf`` must hold exactly one body."""
    if bits not in SUPPORTED_BITS or chunk < 1:
        raise PayloadError(f"bits {bits} / chunk {chunk} unsupported")
    if len(buf) != body_size(n, bits, chunk):
        raise PayloadError(f"body of {len(buf)} B, want {body_size(n, bits, chunk)} B")
    c = -(-n // chunk)
    lo = np.frombuffer(buf[: 4 * c], np.float32)
    scale = np.frombuffer(buf[4 * c : 8 * c], np.float32)
    if not (np.isfinite(lo).all() and np.isfinite(scale).all() and (scale >= 0).all()):
        raise PayloadError("non-finite or negative quantisation parameters")
    try:
        codes = unpack_codes(buf[8 * c :], n, bits)
    except ValueError as exc:
        raise PayloadError(str(exc)) from None
    if bits == 4 and n % 2 and codes.size and buf[-1] >> 4:
        raise PayloadError("padding nibble set")
    values = dequantise(Quantised(codes, lo, scale, bits, chunk))
    if not np.isfinite(values).all():
        raise PayloadError("reconstruction overflows float32")
    return values


def _as_numpy(delta: torch.Tensor) -> np.ndarray:
    return delta.detach().to(torch.float32).contiguous().numpy()


def encode_sparse(
    delta: torch.Tensor, k_frac: float = 0.1, bits: int = 4, chunk: int = 512
) -> tuple[bytes, torch.Tensor]:
    """Top-k (k = ⌈k_frac·D⌉) + b-bit quantisation + index coding (pipeline a).

    Args:
        delta: ``[D]`` update.
        k_frac: Kept fraction in (0, 1] (003 Table 4: 10 %).
        bits: Code width of the kept values (4 in the paper).
        chunk: Kept values per quantisation chunk.

    Returns:
        The payload and the receiver's reconstruction ``[D]`` float32.
    """
    dim = delta.numel()
    k = topk_count(dim, k_frac)
    idx = topk_indices(delta.detach().to(torch.float32), k)
    x = _as_numpy(delta)
    coding, index_bytes = encode_indices(idx, dim)
    body, recon_vals = quantised_body(x[idx], bits, chunk)
    head = _SPARSE.pack(SPARSE_ID, bits, int(coding), 0, dim, k, chunk, len(index_bytes))
    recon = np.zeros(dim, np.float32)
    recon[idx] = recon_vals
    return head + index_bytes + body, torch.from_numpy(recon)


def encode_sparse_rows(
    deltas: torch.Tensor, k_frac: float = 0.1, bits: int = 4, chunk: int = 512
) -> tuple[list[bytes], torch.Tensor]:
    """:func:`encode_sparse` of every row of ``deltas [K, D]`` (the cohort uplink): row i's
    payload and reconstruction are bit-equal to ``encode_sparse(deltas[i], …)`` — the same
    top-k rule (:func:`~geofl.network.sparse.topk_rows`), index code and row quantiser."""
    x = _as_numpy(deltas)
    rows, dim = x.shape
    k = topk_count(dim, k_frac)
    idx = topk_rows(np.abs(x), k)
    codes = encode_index_rows(idx, dim)
    body, recon_vals = quantised_body_rows(np.take_along_axis(x, idx, axis=1), bits, chunk)
    recon = np.zeros((rows, dim), np.float32)
    np.put_along_axis(recon, idx, recon_vals, axis=1)
    width = body.shape[1]
    blob = memoryview(body.tobytes())
    payloads = [
        b"".join(
            (
                _SPARSE.pack(SPARSE_ID, bits, int(coding), 0, dim, k, chunk, len(index_bytes)),
                index_bytes,
                blob[i * width : (i + 1) * width],
            )
        )
        for i, (coding, index_bytes) in enumerate(codes)
    ]
    return payloads, torch.from_numpy(recon)


def decode_sparse(payload: bytes, dim: int) -> torch.Tensor:
    """``[dim]`` float32 update from a sparse payload (zeros off the kept indices)."""
    buf = memoryview(payload)
    if len(buf) < _SPARSE.size:
        raise PayloadError(f"sparse payload of {len(buf)} B is shorter than its header")
    pid, bits, coding, reserved, d, k, chunk, n_index = _SPARSE.unpack_from(buf)
    if pid != SPARSE_ID or reserved or d != dim or not 0 <= k <= dim:
        raise PayloadError(f"sparse header (id {pid}, D {d}, k {k}) does not fit D = {dim}")
    end = _SPARSE.size + n_index
    if end > len(buf):
        raise PayloadError("index section runs past the payload")
    try:
        if coding == IndexCoding.VARINT:
            idx = decode_varint_gaps(buf[_SPARSE.size : end], k, dim)
        elif coding == IndexCoding.BITMAP:
            idx = decode_bitmap(buf[_SPARSE.size : end], k, dim)
        else:
            raise PayloadError(f"unknown index coding {coding}")
    except PayloadError:
        raise
    except ValueError as exc:
        raise PayloadError(f"index section: {exc}") from None
    out = np.zeros(dim, np.float32)
    out[idx] = read_body(buf[end:], k, bits, chunk)
    return torch.from_numpy(out)


def encode_dense(
    delta: torch.Tensor,
    bits: int = 8,
    chunk: int = 512,
    rng: np.random.Generator | None = None,
) -> tuple[bytes, torch.Tensor]:
    """Dense b-bit quantisation of all D values (pipeline c's light quantisation; with
    ``rng``, unbiased stochastic rounding: FedPAQ's upload)."""
    dim = delta.numel()
    body, recon = quantised_body(_as_numpy(delta), bits, chunk, rng)
    return _DENSE.pack(DENSE_ID, bits, 0, dim, chunk) + body, torch.from_numpy(recon)


def encode_dense_rows(
    deltas: torch.Tensor,
    bits: int = 8,
    chunk: int = 512,
    rngs: Sequence[np.random.Generator] | None = None,
) -> tuple[list[bytes], torch.Tensor]:
    """:func:`encode_dense` of every row of ``deltas [K, D]`` (``rngs``: one generator per
    row for stochastic rounding); row i bit-equal to ``encode_dense(deltas[i], …)``."""
    x = _as_numpy(deltas)
    body, recon = quantised_body_rows(x, bits, chunk, rngs)
    head = _DENSE.pack(DENSE_ID, bits, 0, x.shape[1], chunk)
    return rows_with_head(head, body), torch.from_numpy(recon)


def decode_dense(payload: bytes, dim: int) -> torch.Tensor:
    """``[dim]`` float32 update from a dense payload."""
    buf = memoryview(payload)
    if len(buf) < _DENSE.size:
        raise PayloadError(f"dense payload of {len(buf)} B is shorter than its header")
    pid, bits, reserved, d, chunk = _DENSE.unpack_from(buf)
    if pid != DENSE_ID or reserved or d != dim:
        raise PayloadError(f"dense header (id {pid}, D {d}) does not fit D = {dim}")
    return torch.from_numpy(read_body(buf[_DENSE.size :], dim, bits, chunk))


def encode_raw(delta: torch.Tensor) -> tuple[bytes, torch.Tensor]:
    """Δw as float32 bytes (no compression), the reference the pipelines are compared to."""
    x = _as_numpy(delta)
    return _RAW.pack(RAW_ID, 0, 0, x.size) + x.tobytes(), torch.from_numpy(x.copy())


def encode_raw_rows(deltas: torch.Tensor) -> tuple[list[bytes], torch.Tensor]:
    """:func:`encode_raw` of every row of ``deltas [K, D]``."""
    x = _as_numpy(deltas)
    body = x.view(np.uint8).reshape(x.shape[0], -1)
    return rows_with_head(_RAW.pack(RAW_ID, 0, 0, x.shape[1]), body), torch.from_numpy(x.copy())


def decode_raw(payload: bytes, dim: int) -> torch.Tensor:
    """``[dim]`` float32 update from a raw payload (non-finite values refused)."""
    buf = memoryview(payload)
    if len(buf) != _RAW.size + 4 * dim:
        raise PayloadError(f"raw payload of {len(buf)} B, want {_RAW.size + 4 * dim} B")
    pid, reserved, reserved2, d = _RAW.unpack_from(buf)
    if pid != RAW_ID or reserved or reserved2 or d != dim:
        raise PayloadError(f"raw header (id {pid}, D {d}) does not fit D = {dim}")
    values = np.frombuffer(buf[_RAW.size :], np.float32).copy()
    if not np.isfinite(values).all():
        raise PayloadError("non-finite values")
    return torch.from_numpy(values)


def decode_payload(payload: bytes, dim: int) -> torch.Tensor:
    """Decode a sparse, dense or raw payload by its first byte (the pipeline id)."""
    if not payload:
        raise PayloadError("empty payload")
    decoders = {SPARSE_ID: decode_sparse, DENSE_ID: decode_dense, RAW_ID: decode_raw}
    decoder = decoders.get(payload[0])
    if decoder is None:
        raise PayloadError(f"unknown payload id {payload[0]}")
    return decoder(payload, dim)
