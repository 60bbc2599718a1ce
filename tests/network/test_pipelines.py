"""Uplink pipelines (003 §2.1.2(3), §3.1.3): choice at the thresholds, chunk framing,
error feedback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from geofl.network.chunking import FRAME_HEADER_BYTES, encode_frames, reassemble
from geofl.network.payload import PayloadError
from geofl.network.pipelines import (
    Pipeline,
    PipelineParams,
    choose_pipeline,
    decode_update,
    encode_update,
    encode_with_feedback,
)

P = PipelineParams()


@pytest.mark.parametrize(
    ("nqi", "expected"),
    [
        (0.0, None),
        (0.3499, None),
        (0.35, Pipeline.COMPRESSED),
        (0.5499, Pipeline.COMPRESSED),
        (0.55, Pipeline.CHUNKED),
        (0.7499, Pipeline.CHUNKED),
        (0.75, Pipeline.FALLBACK),
        (1.0, Pipeline.FALLBACK),
        (float("nan"), None),
    ],
)
def test_choice_at_threshold_boundaries(nqi: float, expected: Pipeline | None) -> None:
    assert choose_pipeline(nqi) is expected


def test_thresholds_out_of_order_rejected() -> None:
    with pytest.raises(ValueError, match="ascending"):
        choose_pipeline(0.5, 0.35, 0.75, 0.55)


@pytest.mark.parametrize("k", [0.0, 1.01, -1.0])
def test_bad_k_rejected_at_config(k: float) -> None:
    with pytest.raises(ValidationError, match="k_frac"):
        PipelineParams(k_frac=k)


def test_each_pipeline_round_trips_and_counts_encoded_bytes() -> None:
    d = 200_000
    x = torch.randn(d, generator=torch.Generator().manual_seed(0))
    sizes = {}
    for pipe in Pipeline:
        rng = np.random.default_rng(0)
        enc = encode_update(x, pipe, P, round_idx=4, timestamp=12.5, rng=rng)
        assert enc.nbytes == sum(len(f) for f in enc.frames)
        dec = decode_update(list(enc.frames), d)
        torch.testing.assert_close(dec.values, enc.recon)
        sizes[pipe] = enc.nbytes
    assert len(encode_update(x, Pipeline.CHUNKED, P).frames) == 4  # ⌈200k / 65,536⌉
    # 4-bit top-10 %: 0.1 · (½ B code + ≈ 1 B varint gap) ≈ 0.15 B/param; 8-bit dense ≈ 1 B
    assert sizes[Pipeline.COMPRESSED] < 0.16 * d < sizes[Pipeline.FALLBACK] < 1.03 * d
    assert sizes[Pipeline.CHUNKED] == sizes[Pipeline.FALLBACK] - 12 + 4 * FRAME_HEADER_BYTES
    assert sizes[Pipeline.PAQ] == sizes[Pipeline.FALLBACK]  # same 8-bit dense format


def test_chunk_reassembly_detects_missing_and_keeps_tags() -> None:
    x = torch.arange(10, dtype=torch.float32)
    frames, recon = encode_frames(x, round_idx=7, timestamp=3.25, frame_values=3, chunk=2)
    assert len(frames) == 4
    full = reassemble(frames[::-1], 10)  # any order
    assert full.complete and (full.round, full.timestamp, full.count) == (7, 3.25, 4)
    torch.testing.assert_close(full.values, recon)
    part = reassemble([frames[0], frames[3]], 10)
    assert part.missing == (1, 2) and not part.complete
    assert part.values[3:9].eq(0).all() and torch.equal(part.values[:3], recon[:3])
    other, _ = encode_frames(x, round_idx=8, timestamp=3.25, frame_values=3, chunk=2)
    for bad in ([frames[0], other[1]], [frames[0], frames[0]], [], [frames[0][:30]]):
        with pytest.raises(PayloadError):
            reassemble(bad, 10)
    with pytest.raises(PayloadError):
        reassemble(frames, 11)


def test_error_feedback_sends_what_compression_dropped() -> None:
    """Σ_t recon_t + e_T = Σ_t Δw_t exactly; without feedback the dropped mass is lost."""
    gen = torch.Generator().manual_seed(1)
    deltas = [torch.randn(5000, generator=gen) for _ in range(6)]
    residual, sent = None, torch.zeros(5000)
    for t, d in enumerate(deltas):
        enc, residual = encode_with_feedback(d, residual, Pipeline.COMPRESSED, P, round_idx=t)
        sent += enc.recon
    assert residual is not None
    torch.testing.assert_close(sent + residual, sum(deltas), atol=1e-4, rtol=0)
    no_fb = PipelineParams(error_feedback=False)
    plain = sum(encode_with_feedback(d, None, Pipeline.COMPRESSED, no_fb)[0].recon for d in deltas)
    total = sum(deltas)
    assert isinstance(plain, torch.Tensor) and isinstance(total, torch.Tensor)
    assert float((sent - total).norm()) < float((plain - total).norm())


def test_decode_update_rejects_garbage() -> None:
    for frames in ([], [b""], [b"\x09abc"], [b"\x01" * 5, b"\x01"]):
        with pytest.raises(PayloadError):
            decode_update(frames, 10)


def test_corrupt_frames_raise_payload_error_only() -> None:
    x = torch.randn(500, generator=torch.Generator().manual_seed(5))
    frames, _ = encode_frames(x, round_idx=1, timestamp=0.0, frame_values=200, chunk=64)
    rng = torch.Generator().manual_seed(6)
    for _ in range(300):
        j = int(torch.randint(len(frames), (1,), generator=rng))
        bad = bytearray(frames[j])
        pos = int(torch.randint(len(bad), (1,), generator=rng))
        bad[pos] ^= 1 << int(torch.randint(8, (1,), generator=rng))
        mutated = [*frames[:j], bytes(bad), *frames[j + 1 :]]
        try:
            out = reassemble(mutated, 500)
        except PayloadError:
            continue
        assert out.values.shape == (500,) and bool(torch.isfinite(out.values).all())
