"""The three uplink pipelines and their choice by NQI (003 §2.1.2(3), §3.1.3, Tables 8–9).

* ``compressed`` (a, "proximity + 4-bit + top-k"): top-k (k = 10 %) of Δw, 4-bit codes
  packed two per byte, sparse index coding (:func:`~geofl.network.payload.encode_sparse`);
* ``chunked`` (b, "scheduler + chunking + tags"): the dense update, 8-bit, in independently
  decodable frames with staleness tags (:mod:`geofl.network.chunking`);
* ``fallback`` (c, "fallback skipper + light quantisation"): dense 8-bit codes in one
  payload; its *skipper* is the decision not to send (NQI below τ_NQI, or a redundant
  update) and to coalesce the held-back update into the next one.

Choice (003 §3.1.3): NQI < τ_NQI = 0.35 → skip (buffer, coalesce later); [0.35, 0.55) →
compressed; [0.55, 0.75) → chunked; ≥ 0.75 → "full/low compression", which is the light
quantisation of pipeline c. Table 9's comment ("very low NQI") places the fallback pipeline
at the other end; §3.1.3 gives numbers, so its mapping is the default — the thresholds are
configurable. Every payload is real bytes; its cost on the wire is ``len``.

Not the paper's own pipelines, but its Table 5–7 baselines over the same links:

* ``raw``: Δw as float32 (FedAvg's upload), the reference for byte and energy reductions;
* ``paq``: FedPAQ's upload (Reisizadeh et al., AISTATS 2020, Alg. 1: x_{k+1} = x_k +
  (1/r) Σ Q(x_{k,τ}^{(i)} − x_k)): the dense b-bit codec with unbiased *stochastic*
  rounding (their Assumption 1), drawn from the caller's generator; FedPAQ has no error
  feedback, so a preset turns it off.

Error feedback (optional): the client keeps ``e`` and sends ``C(Δw + e)``, then sets
``e ← Δw + e − Ĉ(Δw + e)`` with Ĉ the receiver's reconstruction, so what compression
drops is sent later instead of lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.network.chunking import (
    FRAME_HEADER_BYTES,
    encode_frame_rows,
    encode_frames,
    reassemble,
)
from geofl.network.payload import (
    CHUNK_ID,
    PayloadError,
    decode_payload,
    encode_dense,
    encode_dense_rows,
    encode_raw,
    encode_raw_rows,
    encode_sparse,
    encode_sparse_rows,
)

__all__ = [
    "DecodedUpdate",
    "EncodedUpdate",
    "Pipeline",
    "PipelineParams",
    "choose_pipeline",
    "decode_update",
    "encode_rows",
    "encode_update",
    "encode_with_feedback",
]


class Pipeline(StrEnum):
    """An uplink pipeline of 003 Fig. 3."""

    COMPRESSED = "compressed"
    CHUNKED = "chunked"
    FALLBACK = "fallback"
    #: Not one of the paper's: Δw as raw float32 (FedAvg's upload) over the same links,
    #: the reference for byte and energy reductions (Tables 6–7).
    RAW = "raw"
    #: Not one of the paper's: FedPAQ's unbiased stochastically quantised dense upload.
    PAQ = "paq"


class PipelineParams(BaseModel):
    """Parameters of the three pipelines (003 Table 4: k = 10 %, 4-bit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k_frac: float = Field(0.1, gt=0.0, le=1.0, description="top-k kept fraction, in (0, 1]")
    sparse_bits: Literal[4, 8] = Field(4, description="code width of pipeline a")
    chunked_bits: Literal[4, 8] = Field(8, description="code width of pipeline b")
    fallback_bits: Literal[4, 8] = Field(8, description="code width of pipeline c")
    paq_bits: Literal[4, 8] = Field(8, description="code width of FedPAQ's stochastic codec")
    quant_chunk: int = Field(512, ge=1, description="values per quantisation chunk")
    frame_values: int = Field(65536, ge=1, description="parameters per chunked-pipeline frame")
    error_feedback: bool = Field(True, description="keep the compression residual on the client")


@dataclass(frozen=True)
class EncodedUpdate:
    """An update as it leaves the client.

    Attributes:
        pipeline: Which pipeline encoded it.
        frames: The payloads (one, or the chunked pipeline's frames).
        recon: ``[D]`` float32 the receiver reconstructs when every frame arrives (kept
            on the client for error feedback; never sent).
    """

    pipeline: Pipeline
    frames: tuple[bytes, ...]
    recon: torch.Tensor

    @property
    def nbytes(self) -> int:
        """Bytes on the wire (before envelopes): Σ len(frame)."""
        return sum(len(f) for f in self.frames)


@dataclass(frozen=True)
class DecodedUpdate:
    """What the receiver decoded: ``values [D]`` and the frames that did not arrive."""

    values: torch.Tensor
    missing: tuple[int, ...] = ()
    round: int | None = None


def choose_pipeline(
    nqi: float, tau: float = 0.35, t_chunked: float = 0.55, t_fallback: float = 0.75
) -> Pipeline | None:
    """The pipeline for an update at link quality ``nqi``, or None to skip (003 §3.1.3).

    Args:
        nqi: The tractor's NQI this round (Eq. 10).
        tau: τ_NQI; below it nothing is sent.
        t_chunked: From here on, the chunked pipeline.
        t_fallback: From here on, the light-quantisation pipeline.
    """
    if not tau <= t_chunked <= t_fallback:
        raise ValueError(f"thresholds {tau}, {t_chunked}, {t_fallback} are not ascending")
    if not nqi >= tau:  # NaN skips too
        return None
    if nqi < t_chunked:
        return Pipeline.COMPRESSED
    return Pipeline.CHUNKED if nqi < t_fallback else Pipeline.FALLBACK


def encode_update(
    delta: torch.Tensor,
    pipeline: Pipeline,
    params: PipelineParams,
    *,
    round_idx: int = 0,
    timestamp: float = 0.0,
    rng: np.random.Generator | None = None,
) -> EncodedUpdate:
    """Encode ``delta [D]`` with ``pipeline`` into real bytes (``rng``: the stochastic
    rounding of ``paq``, required there)."""
    if pipeline is Pipeline.COMPRESSED:
        payload, recon = encode_sparse(delta, params.k_frac, params.sparse_bits, params.quant_chunk)
        return EncodedUpdate(pipeline, (payload,), recon)
    if pipeline is Pipeline.CHUNKED:
        frames, recon = encode_frames(
            delta,
            round_idx=round_idx,
            timestamp=timestamp,
            frame_values=params.frame_values,
            bits=params.chunked_bits,
            chunk=params.quant_chunk,
        )
        return EncodedUpdate(pipeline, tuple(frames), recon)
    if pipeline is Pipeline.RAW:
        payload, recon = encode_raw(delta)
        return EncodedUpdate(pipeline, (payload,), recon)
    if pipeline is Pipeline.PAQ:
        if rng is None:
            raise ValueError("the paq pipeline quantises stochastically; pass a generator")
        payload, recon = encode_dense(delta, params.paq_bits, params.quant_chunk, rng)
        return EncodedUpdate(pipeline, (payload,), recon)
    payload, recon = encode_dense(delta, params.fallback_bits, params.quant_chunk)
    return EncodedUpdate(pipeline, (payload,), recon)


def encode_rows(
    targets: torch.Tensor,
    pipeline: Pipeline,
    params: PipelineParams,
    *,
    round_idx: int = 0,
    timestamp: float = 0.0,
    rngs: Sequence[np.random.Generator] | None = None,
) -> tuple[list[tuple[bytes, ...]], torch.Tensor]:
    """:func:`encode_update` of every row of ``targets [K, D]`` with one pipeline (the
    cohort uplink): each row's frames and the reconstructions ``[K, D]``, row i bit-equal
    to ``encode_update(targets[i], …, rng=rngs[i])``. ``rngs``: ``paq``'s generators, one
    per row (required there)."""
    if pipeline is Pipeline.COMPRESSED:
        payloads, recon = encode_sparse_rows(
            targets, params.k_frac, params.sparse_bits, params.quant_chunk
        )
        return [(p,) for p in payloads], recon
    if pipeline is Pipeline.CHUNKED:
        frames, recon = encode_frame_rows(
            targets,
            round_idx=round_idx,
            timestamp=timestamp,
            frame_values=params.frame_values,
            bits=params.chunked_bits,
            chunk=params.quant_chunk,
        )
        return [tuple(f) for f in frames], recon
    if pipeline is Pipeline.RAW:
        payloads, recon = encode_raw_rows(targets)
    elif pipeline is Pipeline.PAQ:
        if rngs is None or len(rngs) != targets.shape[0]:
            raise ValueError("the paq pipeline quantises stochastically; pass one generator a row")
        payloads, recon = encode_dense_rows(targets, params.paq_bits, params.quant_chunk, rngs)
    else:
        payloads, recon = encode_dense_rows(targets, params.fallback_bits, params.quant_chunk)
    return [(p,) for p in payloads], recon


def encode_with_feedback(
    delta: torch.Tensor,
    residual: torch.Tensor | None,
    pipeline: Pipeline,
    params: PipelineParams,
    *,
    round_idx: int = 0,
    timestamp: float = 0.0,
    rng: np.random.Generator | None = None,
) -> tuple[EncodedUpdate, torch.Tensor | None]:
    """Encode ``Δw + e`` and return the new residual ``e'`` (None without feedback)."""
    feedback = params.error_feedback
    target = delta if residual is None or not feedback else delta + residual
    enc = encode_update(target, pipeline, params, round_idx=round_idx, timestamp=timestamp, rng=rng)
    if not feedback:
        return enc, None
    return enc, target - enc.recon


def decode_update(frames: Sequence[bytes], dim: int) -> DecodedUpdate:
    """Decode what arrived of one update.

    Raises:
        PayloadError: Malformed bytes (the caller rejects the update and logs why).
    """
    if not frames:
        raise PayloadError("no payload arrived")
    first = frames[0]
    if first and first[0] == CHUNK_ID and len(first) >= FRAME_HEADER_BYTES:
        re = reassemble(frames, dim)
        return DecodedUpdate(re.values, re.missing, re.round)
    if len(frames) != 1:
        raise PayloadError(f"{len(frames)} payloads for a single-payload pipeline")
    return DecodedUpdate(decode_payload(first, dim))
