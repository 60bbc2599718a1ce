"""FedPAQ, AirComp-FL and the 'w/o compression' ablation through the uplink's seam, on
scripted link states: pipeline used, bytes, fading truncation (dropped, not buffered)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from geofl.config.uplink import UplinkConfig
from geofl.engine.uplink.ground import TransmitStatus, Uplink
from geofl.network.aircomp import channel_gain
from geofl.network.pipelines import Pipeline
from geofl.network.rural import LinkStates

GOOD = [-75.0, 60.0, 20.0]  # NQI 0.8 under global normalisation
MID = [-75.0, 30.1, 500.0]  # NQI 0.35 + 0.45·0.5 − 0.20 = 0.375: the compressed band


def _uplink(num_clients: int = 4, **over: Any) -> Uplink:
    raw: dict[str, Any] = {
        "nqi": {"normalisation": "global"},
        "network": {"deadline_s": 1e6},
        "checkpoint": {"tau_cos": 0.0},
        "security": {"enabled": False},
        **over,
    }
    return Uplink(UplinkConfig.model_validate(raw), num_clients=num_clients, seed=0)


def _x(seed: int, d: int = 3000) -> torch.Tensor:
    return torch.randn(d, generator=torch.Generator().manual_seed(seed))


def test_fedpaq_sends_stochastic_dense_codes_unbiased_across_rounds() -> None:
    up = _uplink(fixed_pipeline="paq", pipelines={"error_feedback": False, "quant_chunk": 3000})
    x = _x(0)
    recon = []
    for r in range(1, 201):
        up.begin_round(r, LinkStates(np.array([MID] * 4), np.zeros(4, bool)))
        tx = up.transmit(x, 1)
        assert tx.status is TransmitStatus.DELIVERED and tx.pipeline is Pipeline.PAQ
        assert tx.bytes_by_hop == {"tractor_server": 12 + 8 + 3000}  # no envelopes here
        assert tx.values is not None
        recon.append(tx.values)
    mean = torch.stack(recon).mean(0)
    scale = float(x.max() - x.min()) / 255
    # per value σ ≤ scale/2 per draw: the mean of 200 draws within 4 σ/√200 of x
    assert float((mean - x).abs().max()) < 4 * scale / 2 / np.sqrt(200)
    assert float((recon[0] - recon[1]).abs().max()) > 0  # fresh draws each round


def test_without_compression_the_gate_stays_and_payloads_are_raw() -> None:
    up = _uplink(compress=False)
    up.begin_round(
        1, LinkStates(np.array([MID, GOOD, [-112.0, 0.2, 500.0], GOOD]), np.zeros(4, bool))
    )
    sent = up.transmit(_x(1), 0)
    assert sent.pipeline is Pipeline.RAW and sent.bytes_by_hop["tractor_server"] == 8 + 4 * 3000
    assert up.summary([sent])["pipeline_bytes"] == {"raw": 8 + 4 * 3000}
    assert up.transmit(_x(2), 2).status is TransmitStatus.SKIPPED  # NQI −0.2 < τ


def test_aircomp_truncates_deep_fades_and_drops_them() -> None:
    k = 64
    up = _uplink(k, fixed_pipeline="fallback", aircomp={"snr_db": 10.0, "g_th": 0.1})
    up.begin_round(1, LinkStates(np.array([GOOD] * k), np.zeros(k, bool)))
    faded = [c for c in range(k) if channel_gain(0, 1, c) < 0.1]
    assert faded  # ≈ 9.5 % of 64
    for c in range(k):
        tx = up.transmit(_x(c, 500), c)
        want = TransmitStatus.TRUNCATED if c in faded else TransmitStatus.DELIVERED
        assert tx.status is want
        assert (tx.pipeline, bool(tx.bytes_by_hop)) == (
            (None, False) if c in faded else (Pipeline.FALLBACK, True)
        )
    assert all(up.tractors[c].pending is None for c in faded)  # dropped, as in AirComp
    deltas = torch.stack([_x(c, 500) for c in range(3)])
    up.superpose(deltas)
    summary = up.summary([])
    assert summary["aircomp"]["superposed"] == 3 and summary["aircomp"]["noise_std"] > 0


def test_forward_false_buffers_an_outage_instead_of_forwarding() -> None:
    up = _uplink(network={"deadline_s": 1e6, "forward": False})
    up.begin_round(1, LinkStates(np.array([GOOD] * 4), np.array([True, False, False, False])))
    tx = up.transmit(_x(0), 0)
    assert tx.status is TransmitStatus.OUTAGE and tx.via is None
    assert up.tractors[0].pending is not None  # buffered for a later round


def test_report_reduction_and_energy_relative_to_fedavg() -> None:
    from geofl.report.summary import make_stat
    from geofl.report.uplink import _relative

    ref = {"total": make_stat([40.0, 60.0]), "energy": make_stat([2.0])}
    ours = {"total": make_stat([5.0]), "energy": make_stat([0.5])}
    assert _relative(ours, ref) == ("90.0", "0.25")  # 1 − 5/50, 0.5/2
    assert _relative(ours, None) == ("–", "–")
