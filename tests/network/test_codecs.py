"""Quantisation, index coding, payload formats (003 §2.1.2(3), Table 4): bounds, sizes,
round trips, malformed input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofl.network.payload import (
    PayloadError,
    decode_dense,
    decode_payload,
    decode_raw,
    decode_sparse,
    encode_dense,
    encode_raw,
    encode_sparse,
)
from geofl.network.quantize import dequantise, pack_codes, quantise, unpack_codes
from geofl.network.sparse import (
    IndexCoding,
    decode_bitmap,
    decode_varint_gaps,
    encode_bitmap,
    encode_indices,
    encode_varint_gaps,
    topk_count,
    topk_indices,
)


def test_quantise_by_hand() -> None:
    q = quantise(np.array([0.0, 1.5, 3.0, 10.0, 10.0], np.float32), bits=4, chunk=3)
    np.testing.assert_allclose(q.lo, [0.0, 10.0])
    np.testing.assert_allclose(q.scale, [0.2, 0.0])  # (3 − 0) / 15; constant chunk → 0
    assert q.codes.tolist() == [0, 8, 15, 0, 0]  # 1.5 / 0.2 = 7.5 → 8 (round half even: 8)
    np.testing.assert_allclose(dequantise(q), [0.0, 1.6, 3.0, 10.0, 10.0], rtol=1e-6)


@pytest.mark.parametrize("bits", [4, 8])
def test_quantise_error_bound(bits: int) -> None:
    x = torch.randn(10_001, generator=torch.Generator().manual_seed(0)).numpy() * 3
    x[17] = 400.0  # an outlier only widens its own chunk
    q = quantise(x, bits, chunk=256)
    err = np.abs(dequantise(q) - x)
    bound = np.repeat(q.scale, 256)[: x.size] / 2
    assert (err <= bound * (1 + 1e-5) + 1e-6).all()
    assert err[512:].max() < 6 * 3 * 2 / ((1 << bits) - 1)  # far from the outlier's chunk


def test_pack_unpack_nibbles() -> None:
    codes = np.array([1, 15, 0, 7, 9], np.uint8)
    packed = pack_codes(codes, 4)
    assert packed == bytes([0xF1, 0x70, 0x09])
    np.testing.assert_array_equal(unpack_codes(packed, 5, 4), codes)
    with pytest.raises(ValueError, match="code bytes"):
        unpack_codes(packed[:2], 5, 4)


def test_varint_gaps_by_hand_and_round_trip() -> None:
    idx = np.array([0, 1, 130, 130 + 1 + 16384], np.int64)
    data = encode_varint_gaps(idx)  # gaps 0, 0, 128, 16384
    assert data == bytes([0, 0, 0x80, 0x01, 0x80, 0x80, 0x01])
    np.testing.assert_array_equal(decode_varint_gaps(data, 4, 20000), idx)
    rng = np.random.default_rng(1)
    big = np.sort(rng.choice(2**31, 5000, replace=False)).astype(np.int64)
    np.testing.assert_array_equal(decode_varint_gaps(encode_varint_gaps(big), 5000, 2**31), big)
    for bad, k in ((data[:-1], 4), (data, 3), (bytes([0x80] * 6 + [1]), 1)):
        with pytest.raises(ValueError, match="varint"):
            decode_varint_gaps(bad, k, 20000)
    with pytest.raises(ValueError, match="D"):
        decode_varint_gaps(data, 4, 16000)


def test_bitmap_and_choice_of_smaller_code() -> None:
    idx = np.array([3, 9], np.int64)
    assert encode_bitmap(idx, 10) == bytes([0x08, 0x02])
    np.testing.assert_array_equal(decode_bitmap(encode_bitmap(idx, 10), 2, 10), idx)
    with pytest.raises(ValueError, match="past D"):
        decode_bitmap(bytes([0x08, 0x06]), 2, 10)  # bit 10 ≥ D
    dense = np.arange(0, 1000, 2)  # 50 %: bitmap 125 B < varint 500 B
    assert encode_indices(dense, 1000)[0] is IndexCoding.BITMAP
    sparse = np.arange(0, 1000, 10)  # 10 %: varint 100 B < bitmap 125 B
    coding, data = encode_indices(sparse, 1000)
    assert coding is IndexCoding.VARINT and len(data) == 100


@pytest.mark.parametrize("k_frac", [0.0, -0.1, 1.5, float("nan")])
def test_bad_k_rejected(k_frac: float) -> None:
    with pytest.raises(ValueError, match="k_frac"):
        topk_count(100, k_frac)


def test_topk_picks_largest_magnitudes() -> None:
    x = torch.tensor([0.1, -5.0, 0.3, 4.0, -0.2])
    assert topk_indices(x, 2).tolist() == [1, 3]
    assert topk_count(95_000, 0.1) == 9_500 and topk_count(7, 0.1) == 1


def test_sparse_payload_size_is_its_length_and_round_trips() -> None:
    d = 100_000
    x = torch.randn(d, generator=torch.Generator().manual_seed(2))
    payload, recon = encode_sparse(x, 0.1, bits=4, chunk=512)
    k = 10_000
    _, index_bytes = encode_indices(topk_indices(x, k), d)
    expected = 20 + len(index_bytes) + 8 * (-(-k // 512)) + k // 2
    assert len(payload) == expected
    assert len(payload) < 0.05 * 4 * d  # ≥ 20× smaller than float32
    out = decode_sparse(payload, d)
    torch.testing.assert_close(out, recon)
    assert int((out != 0).sum()) <= k and torch.equal(decode_payload(payload, d), out)
    kept = recon != 0
    assert float((out - x)[kept].abs().max()) <= float(x.abs().max()) / 15  # ≤ scale / 2


def test_dense_payload_round_trip_and_bound() -> None:
    x = torch.linspace(-1, 1, 1000)
    payload, recon = encode_dense(x, bits=8, chunk=100)
    assert len(payload) == 12 + 8 * 10 + 1000
    out = decode_dense(payload, 1000)
    torch.testing.assert_close(out, recon)
    assert float((out - x).abs().max()) <= 0.2 / 255 / 2 * 1.001  # chunk range ≈ 0.198


def test_raw_payload_is_float32_bytes() -> None:
    x = torch.randn(100, generator=torch.Generator().manual_seed(4))
    payload, recon = encode_raw(x)
    assert len(payload) == 8 + 400 and torch.equal(recon, x)
    assert torch.equal(decode_payload(payload, 100), x)
    nan = payload[:8] + np.full(100, np.nan, np.float32).tobytes()
    for bad in (payload[:-1], nan, payload[:4] + b"\x65\0\0\0" + payload[8:]):
        with pytest.raises(PayloadError):
            decode_raw(bad, 100)


def test_malformed_payloads_raise_payload_error_only() -> None:
    x = torch.randn(300, generator=torch.Generator().manual_seed(3))
    for payload in (encode_sparse(x, 0.2)[0], encode_dense(x)[0], encode_raw(x)[0]):
        bad_inputs = [payload[:n] for n in range(0, len(payload), 7)] + [payload + b"\0"]
        rng = np.random.default_rng(0)
        for _ in range(200):
            b = bytearray(payload)
            b[int(rng.integers(len(b)))] ^= 1 << int(rng.integers(8))
            bad_inputs.append(bytes(b))
        for bad in bad_inputs:
            try:
                out = decode_payload(bad, 300)
            except PayloadError:
                continue
            assert out.shape == (300,) and bool(torch.isfinite(out).all())  # a value flip
    with pytest.raises(PayloadError, match="D = 301"):
        decode_payload(encode_dense(x)[0], 301)
