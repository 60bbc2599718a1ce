"""A digital approximation of over-the-air aggregation (AirComp-FL, the 003 Table 5–7 baseline).

003 §3.2 uses AirComp-FL "[27]" through "a digital approximation that preserves its
single-shot aggregation behavior" (its reference list is not in our copy; we follow the
broadband analog aggregation of Zhu, Wang & Huang, IEEE TWC 2020, with truncated channel
inversion). Analog AirComp: every scheduled device k pre-equalises its signal by its
channel h_k and all transmit at once; the server receives the *sum* plus receiver noise.

Model (per round; one real channel use per parameter):

* fading: ``g_k = |h_k|² ~ Exp(1)`` (Rayleigh), drawn from (seed, round, client, "aircomp");
* truncated channel inversion: a device with ``g_k < g_th`` stays silent (its update is
  dropped this round, not buffered); the others send ``p_k s_k`` with ``p_k = √ρ / h_k``;
* power constraint: the update is normalised by a common amplitude ``a = max_k RMS(x_k)``
  over the devices that send, ``s_k = x_k / a`` (mean power ≤ 1 per symbol), and
  ``ρ = P · g_th`` so that ``|p_k|² E|s_k|² ≤ ρ / g_th = P`` for every sending device;
* receiver: ``y = √ρ Σ_k s_k + z``, ``z ~ N(0, σ² I)``, ``SNR = P / σ²`` (transmit SNR);
  the server's estimate of the mean update is ``a·y / (√ρ n) = x̄ + e`` with
  ``e ~ N(0, σ_e² I)``, **σ_e = a / (n √(SNR · g_th))**.

The *digital* part of the approximation: each device's update is first quantised with the
dense b-bit codec (real bytes, counted per hop like every uplink payload; an analog
system has no bytes), decoded at the server, and the superposition is then simulated by
adding the one receiver-noise vector e to every delivered update: for any aggregation
weights summing to 1 the aggregate becomes ``Σ w_k x̂_k + e`` — FedAvg of the decoded
updates plus the channel noise of one analog sum. Real-valued noise per parameter (a
complex channel use would carry two parameters); no NQI, no checkpointer, no satellites.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.rng import numpy_generator

__all__ = ["AirCompParams", "Superposition", "channel_gain", "noise_std", "superpose"]


class AirCompParams(BaseModel):
    """Channel of the digital AirComp-FL approximation (our choices; 003 gives none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    snr_db: float = Field(10.0, ge=-30.0, le=60.0, description="transmit SNR P/σ² in dB")
    g_th: float = Field(
        0.1, gt=0.0, le=10.0, description="truncation: silent when |h|² < g_th (Exp(1) gains)"
    )


@dataclass(frozen=True)
class Superposition:
    """One round's over-the-air sum: ``superposed`` updates, amplitude a, noise std σ_e."""

    superposed: int
    amplitude: float
    noise_std: float


def channel_gain(seed: int, round_idx: int, client: int) -> float:
    """``|h_k|² ~ Exp(1)`` of ``client`` in ``round_idx`` (Rayleigh block fading)."""
    rng = numpy_generator(seed, "round", round_idx, "client", client, "aircomp")
    return float(rng.exponential())


def noise_std(amplitude: float, n: int, params: AirCompParams) -> float:
    """``σ_e = a / (n √(SNR · g_th))``: receiver noise on the estimated mean update."""
    snr = 10.0 ** (params.snr_db / 10.0)
    return amplitude / (n * math.sqrt(snr * params.g_th))


def superpose(
    deltas: torch.Tensor, params: AirCompParams, seed: int, round_idx: int
) -> Superposition:
    """Add one round's receiver noise e to every row of ``deltas [n, D]`` in place.

    Args:
        deltas: ``[n, D]`` decoded updates of the devices that sent (rows share e, so any
            weighted mean with weights summing to 1 carries exactly e).
        params: The channel.
        seed: Run seed; e is drawn from (seed, round, "aircomp", "noise").
        round_idx: The round.
    """
    n = deltas.shape[0]
    if n == 0:
        return Superposition(0, 0.0, 0.0)
    rms = torch.linalg.vector_norm(deltas, dim=1) / math.sqrt(max(deltas.shape[1], 1))
    amp = float(rms.max())
    std = noise_std(amp, n, params)
    rng = numpy_generator(seed, "round", round_idx, "aircomp", "noise")
    e = rng.standard_normal(deltas.shape[1], dtype=np.float32) * np.float32(std)
    deltas += torch.from_numpy(e).to(deltas.dtype)[None, :]
    return Superposition(n, amp, std)
