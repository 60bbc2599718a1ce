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

__all__ = ["LR_DIRECTIVE", "ClientDirectives", "ClientUpdate", "UpdateMeta", "payload_bytes"]

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
