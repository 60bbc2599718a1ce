"""What travels between server and clients in one round.

The server sends the global flat parameters plus :class:`ClientDirectives` (per-client
settings and named payload tensors, e.g. SCAFFOLD's server control variate); the client
returns a :class:`ClientUpdate` — the update Δw as one flat float32 vector, any further
named tensors its algorithm uploads (e.g. SCAFFOLD's control-variate delta) and its
:class:`UpdateMeta`. All are plain data so that the same client step runs in-process
(simulation), in a worker process or inside a Flower ClientApp on another machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = [
    "LR_DIRECTIVE",
    "NOISE_SCALE_COORDS",
    "ClientDirectives",
    "ClientUpdate",
    "UpdateMeta",
    "noise_scale",
    "payload_bytes",
]

#: Key of the round's client learning rate η_l in :attr:`ClientDirectives.extra`, sent when
#: the run schedules η_l over rounds (``train.lr_schedule``, 001 §6.1.2).
LR_DIRECTIVE = "lr"


@dataclass(frozen=True)
class ClientDirectives:
    """Per-client instructions for one round.

    Attributes:
        round: 1-based round index the update is produced for.
        client_id: The client's id.
        extra: Scalar settings for plug-ins (e.g. a per-client clip bound ``clip_bound``).
        payload: Named ``[D]`` tensors broadcast with the model (e.g. ``{"control": c}``);
            read-only for the client.
    """

    round: int
    client_id: int
    extra: Mapping[str, Any] = field(default_factory=dict)
    payload: Mapping[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class UpdateMeta:
    """Metadata carried by an update.

    Attributes:
        client_id: Producer.
        num_samples: n_k, local training-set size (FedAvg weight).
        round: Round the update was produced in, i.e. the version of the global model it
            started from (staleness = current − this).
        label_histogram: ``[C]`` label counts, when the protocol shares them, else None.
        train_loss: Mean training loss over the local steps.
        train_metrics: The task's primary metric over the local training batches, by name
            (running, as in a training-accuracy curve): ``{"accuracy": 0.83}`` for
            classification, empty when the trainer measured nothing. Read the
            classification value as :attr:`train_accuracy`.
        steps: Local optimisation steps taken (τ_k).
        bytes_sent: Payload size on the wire: Δw plus every extra uploaded tensor.
        scalars: Algorithm-specific scalars the server needs (e.g. FedNova's ``a_norm``,
            ‖a_k‖₁ of its local-step weights).
        spatial_alpha: The client's spatial factor α_k ∈ [0.5, 1.5] (001 Eq. 10–11),
            computed on the client from its own data by the ``spatial_alpha`` release step;
            None when the method does not use spatial weighting.
    """

    client_id: int
    num_samples: int
    round: int
    label_histogram: np.ndarray | None = None
    train_loss: float = float("nan")
    train_metrics: Mapping[str, float] = field(default_factory=dict)
    steps: int = 0
    bytes_sent: int = 0
    scalars: Mapping[str, float] = field(default_factory=dict)
    spatial_alpha: float | None = None

    @property
    def train_accuracy(self) -> float:
        """Running training accuracy (classification), NaN if the task does not report it."""
        return float(self.train_metrics.get("accuracy", float("nan")))


@dataclass(frozen=True)
class ClientUpdate:
    """An update Δw = w_local − w_global (``[D]`` float32) and its metadata.

    Attributes:
        delta: ``[D]`` float32, what the server receives.
        meta: Metadata the server receives with it.
        local_log: What the client's release steps did (e.g. ``{"l2_clip": {"norm": 3.1}}``
            or a risk level). It stays on the client: the simulation collects it for
            analysis, the server tier never reads it.
        tensors: Further named ``[D]`` tensors uploaded with Δw (e.g.
            ``{"control_delta": Δc_k}`` for SCAFFOLD).
        local_state: New values of the *trainer's* per-client state (e.g. DP-SGD's
            adaptive clipping statistic), which the client step moves into the client's
            state and never uploads.
    """

    delta: torch.Tensor
    meta: UpdateMeta
    local_log: dict[str, Any] = field(default_factory=dict)
    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict)
    local_state: dict[str, torch.Tensor] = field(default_factory=dict)


def payload_bytes(delta: torch.Tensor, tensors: Mapping[str, torch.Tensor] = {}) -> int:
    """Bytes of Δw and every extra uploaded tensor, as sent (dense, native dtype)."""
    return delta.numel() * delta.element_size() + sum(
        t.numel() * t.element_size() for t in tensors.values()
    )


#: At most this many coordinates (an evenly strided subset) enter :func:`noise_scale`.
NOISE_SCALE_COORDS = 1 << 15

#: Consistency constant of the MAD for a Gaussian: 1.4826·MAD estimates σ.
_MAD_TO_SIGMA = 1.4826


def noise_scale(deltas: torch.Tensor, *, max_coords: int = NOISE_SCALE_COORDS) -> torch.Tensor:
    """Robust per-coordinate spread of each released update: σ̂_k = 1.4826·MAD(Δw̃_k).

    The server-side estimate of an update's perturbation intensity σ (000 Eq. 20's
    behaviour vector). Gaussian noise N(0, s²) added to every coordinate sets the bulk of
    the coordinate distribution, while a trained update's signal is concentrated in a
    minority of large coordinates; the median absolute deviation about the median ignores
    those, so σ̂ ≈ s once the noise exceeds the bulk of the signal, and σ̂ ≈ the signal's
    bulk spread without noise. Unlike ‖Δw̃‖/√D (the root mean square), σ̂ is not a
    function of the norm: a sparse update and pure noise of the same norm differ by orders
    of magnitude (``tests/core/test_noise_scale.py``). Removing the median first makes it
    blind to a common offset of all coordinates.

    Cost is bounded by estimating from an evenly strided subset of at most ``max_coords``
    coordinates (every ⌈D / max_coords⌉-th), which crosses every layer of the flat vector.

    Args:
        deltas: ``[K, D]`` released updates (or ``[D]`` for one).
        max_coords: Coordinate budget of the estimate.

    Returns:
        ``[K]`` float64 σ̂ (``[]`` for a ``[D]`` input); 0 for an empty update.
    """
    x = deltas if deltas.dim() == 2 else deltas.reshape(1, -1)
    if x.shape[1] == 0:
        out = np.zeros(x.shape[0], dtype=np.float64)
    else:
        stride = max(1, -(-x.shape[1] // max(1, max_coords)))
        sub = x[:, ::stride].detach().cpu().numpy().astype(np.float64)
        mid = (sub.shape[1] - 1) // 2  # lower median (introselect: O(n), unlike a sort)
        med = np.partition(sub, mid, axis=1)[:, mid : mid + 1]
        out = _MAD_TO_SIGMA * np.partition(np.abs(sub - med), mid, axis=1)[:, mid]
    t = torch.from_numpy(out)
    return t if deltas.dim() == 2 else t[0]
