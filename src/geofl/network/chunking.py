"""Scheduled chunking with staleness tags (003 §2.1.2(3) pipeline b, Tables 8–9).

The dense update is cut into frames of ``frame_values`` consecutive parameters; each frame
is quantised on its own (b-bit per chunk, 8 by default) and carries a 40-byte header::

    <BBHIIIIIIId> id=2, bits, 0, round, index, count, start, n, D, chunk, timestamp

``round`` (the local round index) and ``timestamp`` are the *staleness tags* the paper's
LEO/GEO aggregation reads (§2.2, Eq. 8). Frames are independently decodable, so the
scheduler may spread them over transmission windows and the receiver can tell exactly
which parameter ranges are missing when some do not arrive (:func:`reassemble`).

Tagged frames (the driver → LEO hop, 003 Table 4 "chunking + staleness tag write" at the
driver) cut an already encoded payload — e.g. the top-k 4-bit one — into byte ranges of at
most ``frame_bytes``, each with a 32-byte header::

    <BBHIIIIId> id=5, 0, 0, round, index, count, offset, total, timestamp

A sparse payload is not decodable in parts, so :func:`join_tagged` needs every frame; the
tags (the update's round t' and creation time) ride in every frame.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from geofl.network.payload import (
    CHUNK_ID,
    TAGGED_ID,
    PayloadError,
    quantised_body,
    quantised_body_rows,
    read_body,
    rows_with_head,
)

__all__ = [
    "FRAME_HEADER_BYTES",
    "TAG_HEADER_BYTES",
    "Reassembly",
    "Tagged",
    "encode_frame_rows",
    "encode_frames",
    "join_tagged",
    "reassemble",
    "tag_frames",
]

_FRAME = struct.Struct("<BBHIIIIIIId")
#: Bytes of a frame header.
FRAME_HEADER_BYTES = _FRAME.size
_TAG = struct.Struct("<BBHIIIIId")
#: Bytes of a tagged frame's header.
TAG_HEADER_BYTES = _TAG.size


@dataclass(frozen=True)
class Reassembly:
    """What the receiver rebuilt from the frames of one update.

    Attributes:
        values: ``[D]`` float32; zeros in the ranges of missing frames.
        missing: Indices of frames that did not arrive (empty when complete).
        count: Frames the update was cut into.
        round: Staleness tag: the sender's round index.
        timestamp: Staleness tag: the sender's clock when it encoded the update (s).
    """

    values: torch.Tensor
    missing: tuple[int, ...]
    count: int
    round: int
    timestamp: float

    @property
    def complete(self) -> bool:
        """Whether every frame arrived."""
        return not self.missing


def encode_frames(
    delta: torch.Tensor,
    *,
    round_idx: int,
    timestamp: float,
    frame_values: int = 65536,
    bits: int = 8,
    chunk: int = 512,
) -> tuple[list[bytes], torch.Tensor]:
    """Frames of ``delta [D]`` and the receiver's reconstruction when all arrive.

    Args:
        delta: ``[D]`` update.
        round_idx: Staleness tag (local round index).
        timestamp: Staleness tag (seconds on the sender's clock).
        frame_values: Parameters per frame.
        bits: Code width (8: light quantisation; 4 also allowed).
        chunk: Values per quantisation chunk inside a frame.
    """
    if frame_values < 1:
        raise ValueError(f"frame_values: {frame_values}; use at least 1 parameter per frame")
    x = delta.detach().to(torch.float32).contiguous().numpy()
    dim = x.size
    count = max(1, -(-dim // frame_values))
    frames, recon = [], np.empty(dim, np.float32)
    for i in range(count):
        start = i * frame_values
        n = min(frame_values, dim - start)
        body, recon[start : start + n] = quantised_body(x[start : start + n], bits, chunk)
        head = _FRAME.pack(CHUNK_ID, bits, 0, round_idx, i, count, start, n, dim, chunk, timestamp)
        frames.append(head + body)
    return frames, torch.from_numpy(recon)


def encode_frame_rows(
    deltas: torch.Tensor,
    *,
    round_idx: int,
    timestamp: float,
    frame_values: int = 65536,
    bits: int = 8,
    chunk: int = 512,
) -> tuple[list[list[bytes]], torch.Tensor]:
    """:func:`encode_frames` of every row of ``deltas [K, D]``: each row's frames and the
    reconstructions ``[K, D]``, row i bit-equal to ``encode_frames(deltas[i], …)``.

    One pass per frame position over all rows (a frame's header is the same for every
    row: the tags are the round's), not one per row and frame.
    """
    if frame_values < 1:
        raise ValueError(f"frame_values: {frame_values}; use at least 1 parameter per frame")
    x = deltas.detach().to(torch.float32).contiguous().numpy()
    rows, dim = x.shape
    count = max(1, -(-dim // frame_values))
    frames: list[list[bytes]] = [[] for _ in range(rows)]
    recon = np.empty((rows, dim), np.float32)
    for i in range(count):
        start = i * frame_values
        n = min(frame_values, dim - start)
        body, recon[:, start : start + n] = quantised_body_rows(
            x[:, start : start + n], bits, chunk
        )
        head = _FRAME.pack(CHUNK_ID, bits, 0, round_idx, i, count, start, n, dim, chunk, timestamp)
        for mine, frame in zip(frames, rows_with_head(head, body), strict=True):
            mine.append(frame)
    return frames, torch.from_numpy(recon)


@dataclass(frozen=True)
class _Frame:
    round: int
    count: int
    timestamp: float
    index: int
    start: int
    values: np.ndarray


def _read_frame(frame: bytes, dim: int) -> _Frame:
    buf = memoryview(frame)
    if len(buf) < _FRAME.size:
        raise PayloadError(f"frame of {len(buf)} B is shorter than its header")
    pid, bits, reserved, rnd, idx, count, start, n, d, chunk, ts = _FRAME.unpack_from(buf)
    if pid != CHUNK_ID or reserved or d != dim or not np.isfinite(ts):
        raise PayloadError(f"frame header (id {pid}, D {d}) does not fit D = {dim}")
    if not (idx < count and start + n <= dim and n >= 1):
        raise PayloadError(f"frame {idx}/{count} covers [{start}, {start + n}) outside D = {dim}")
    return _Frame(rnd, count, ts, idx, start, read_body(buf[_FRAME.size :], n, bits, chunk))


def reassemble(frames: Sequence[bytes], dim: int) -> Reassembly:
    """Rebuild one update from the frames that arrived (any order, no duplicates).

    Raises:
        PayloadError: A malformed frame, frames of different updates, a duplicate index,
            overlapping ranges, or no frame at all.
    """
    if not frames:
        raise PayloadError("no frame arrived")
    out = np.zeros(dim, np.float32)
    covered = np.zeros(dim, bool)
    tags: set[tuple[int, int, float]] = set()
    seen: set[int] = set()
    for frame in frames:
        f = _read_frame(frame, dim)
        tags.add((f.round, f.count, f.timestamp))
        span = slice(f.start, f.start + f.values.size)
        if f.index in seen or covered[span].any():
            raise PayloadError(f"frame {f.index} arrived twice or overlaps another frame")
        seen.add(f.index)
        out[span], covered[span] = f.values, True
    if len(tags) != 1:
        raise PayloadError("frames of different updates (round, count or timestamp differ)")
    rnd, count, timestamp = tags.pop()
    missing = tuple(sorted(set(range(count)) - seen))
    if not missing and not covered.all():
        raise PayloadError("all frames arrived but they do not cover D")
    return Reassembly(torch.from_numpy(out), missing, count, rnd, timestamp)


@dataclass(frozen=True)
class Tagged:
    """A payload rebuilt from its tagged frames, with its staleness tags.

    Attributes:
        payload: The bytes that were framed.
        round: Staleness tag: the round the content was produced from (t').
        timestamp: Staleness tag: the sender's clock when it encoded the content (s).
    """

    payload: bytes
    round: int
    timestamp: float


def tag_frames(
    payload: bytes, *, round_idx: int, timestamp: float, frame_bytes: int = 65536
) -> list[bytes]:
    """``payload`` cut into ⌈len / frame_bytes⌉ frames (at least one), each with the tags.

    Args:
        payload: Encoded bytes (any pipeline's payload).
        round_idx: Staleness tag (u32).
        timestamp: Staleness tag (seconds, finite).
        frame_bytes: Payload bytes per frame.
    """
    if frame_bytes < 1:
        raise ValueError(f"frame_bytes: {frame_bytes}; use at least 1 byte per frame")
    total = len(payload)
    count = max(1, -(-total // frame_bytes))
    return [
        _TAG.pack(TAGGED_ID, 0, 0, round_idx, i, count, i * frame_bytes, total, timestamp)
        + payload[i * frame_bytes : (i + 1) * frame_bytes]
        for i in range(count)
    ]


def join_tagged(frames: Sequence[bytes]) -> Tagged:
    """Inverse of :func:`tag_frames` (frames in any order; every one must be there).

    Raises:
        PayloadError: A malformed header, frames of different payloads, a duplicate, a
            gap, or a missing frame.
    """
    if not frames:
        raise PayloadError("no tagged frame arrived")
    parts: dict[int, tuple[int, bytes]] = {}
    tags: set[tuple[int, int, int, float]] = set()
    for frame in frames:
        if len(frame) < _TAG.size:
            raise PayloadError(f"tagged frame of {len(frame)} B is shorter than its header")
        pid, r1, r2, rnd, idx, count, offset, total, ts = _TAG.unpack_from(frame)
        body = frame[_TAG.size :]
        if pid != TAGGED_ID or r1 or r2 or not np.isfinite(ts) or idx >= count:
            raise PayloadError(f"tagged frame header (id {pid}, frame {idx}/{count}) is malformed")
        if idx in parts or offset + len(body) > total:
            raise PayloadError(f"tagged frame {idx} arrived twice or runs past {total} B")
        parts[idx] = (offset, body)
        tags.add((rnd, count, total, ts))
    if len(tags) != 1:
        raise PayloadError("tagged frames of different payloads (round, count or size differ)")
    rnd, count, total, ts = tags.pop()
    if len(parts) != count:
        raise PayloadError(f"{count - len(parts)} of {count} tagged frames missing")
    ordered = [parts[i] for i in range(count)]
    starts = np.cumsum([0] + [len(b) for _, b in ordered[:-1]])
    if any(off != int(s) for (off, _), s in zip(ordered, starts, strict=True)):
        raise PayloadError("tagged frames overlap or leave a gap")
    payload = b"".join(b for _, b in ordered)
    if len(payload) != total:
        raise PayloadError(f"tagged frames hold {len(payload)} B, the header says {total} B")
    return Tagged(payload, rnd, ts)
