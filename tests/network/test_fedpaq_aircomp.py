"""FedPAQ's unbiased stochastic quantiser and the digital AirComp-FL approximation, by hand:
code frequencies and variance of stochastic rounding (Reisizadeh et al. 2020, Assumption 1),
σ_e = a / (n √(SNR · g_th)) of the over-the-air sum, Exp(1) fading and its truncation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geofl.network.aircomp import AirCompParams, channel_gain, noise_std, superpose
from geofl.network.payload import decode_dense
from geofl.network.pipelines import Pipeline, PipelineParams, decode_update, encode_update
from geofl.network.quantize import dequantise, quantise

X = np.array([0.0, 0.25, 1.0], np.float32)  # chunk of 3, 4-bit: lo 0, scale 1/15


def test_stochastic_rounding_is_unbiased_with_the_stated_variance() -> None:
    rng = np.random.default_rng(7)
    n = 40_000
    recon = np.stack([dequantise(quantise(X, 4, 3, rng)) for _ in range(n)])
    # 0.25 / (1/15) = 3.75: code 4 with probability 0.75, code 3 with 0.25
    assert abs(float(np.mean(recon[:, 1] > 0.25)) - 0.75) < 0.01  # binomial σ ≈ 0.0022
    np.testing.assert_allclose(recon.mean(axis=0), X, atol=4 * (1 / 15) * 0.5 / math.sqrt(n))
    var = (1 / 15) ** 2 * 0.75 * 0.25  # scale² · f (1 − f)
    assert recon[:, 1].var() == pytest.approx(var, rel=0.03)
    assert recon[:, 0].var() == 0 and recon[:, 2].var() == 0  # grid points are exact
    assert float(np.abs(recon - X).max()) < 1 / 15  # |x − x̂| < scale


def test_nearest_rounding_is_unchanged_without_a_generator() -> None:
    q = quantise(X, 4, 3)
    assert q.codes.tolist() == [0, 4, 15]  # 3.75 rounds to 4


def test_paq_pipeline_needs_a_generator_and_is_reproducible() -> None:
    x = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    p = PipelineParams()
    with pytest.raises(ValueError, match="generator"):
        encode_update(x, Pipeline.PAQ, p)
    a = encode_update(x, Pipeline.PAQ, p, rng=np.random.default_rng(3))
    b = encode_update(x, Pipeline.PAQ, p, rng=np.random.default_rng(3))
    c = encode_update(x, Pipeline.PAQ, p, rng=np.random.default_rng(4))
    assert a.frames == b.frames and a.frames != c.frames
    torch.testing.assert_close(decode_update(list(a.frames), 5000).values, a.recon)
    torch.testing.assert_close(decode_dense(a.frames[0], 5000), a.recon)
    assert a.nbytes == 12 + 8 * 10 + 5000  # header, lo/scale of ⌈5000/512⌉ chunks, 8-bit codes


def test_aircomp_noise_std_by_hand() -> None:
    p = AirCompParams(snr_db=10.0, g_th=0.1)  # SNR · g_th = 10 · 0.1 = 1
    assert noise_std(2.0, 4, p) == pytest.approx(0.5)  # 2 / (4 · 1)
    assert noise_std(2.0, 4, AirCompParams(snr_db=30.0, g_th=0.1)) == pytest.approx(0.05)


def test_superpose_adds_one_noise_vector_at_the_stated_std() -> None:
    d = 200_000
    deltas = torch.zeros(4, d)
    deltas[:, :2] = torch.tensor([[2.0 * math.sqrt(d / 2)] * 2] * 4)  # every row RMS 2
    before = deltas.clone()
    sup = superpose(deltas, AirCompParams(snr_db=10.0, g_th=0.1), seed=1, round_idx=3)
    assert sup.superposed == 4 and sup.amplitude == pytest.approx(2.0, rel=1e-5)
    assert sup.noise_std == pytest.approx(0.5, rel=1e-5)
    e = deltas - before
    assert torch.equal(e[0], e[3])  # one receiver noise, carried by any weighted mean
    assert float(e[0].std()) == pytest.approx(0.5, rel=0.01)  # σ / √(2D) ≈ 0.16 %
    again = before.clone()
    superpose(again, AirCompParams(snr_db=10.0, g_th=0.1), seed=1, round_idx=3)
    assert torch.equal(again, deltas)  # seeded by (seed, round)


def test_rayleigh_gains_and_truncation_share() -> None:
    g = np.array([channel_gain(0, 1, k) for k in range(20_000)])
    assert g.mean() == pytest.approx(1.0, abs=0.03)  # Exp(1)
    assert float(np.mean(g < 0.1)) == pytest.approx(1 - math.exp(-0.1), abs=0.006)
    assert channel_gain(0, 1, 5) == channel_gain(0, 1, 5) != channel_gain(0, 2, 5)
