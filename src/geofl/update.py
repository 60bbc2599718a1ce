"""What travels between server and clients in one round.

The server sends the global flat parameters plus :class:`ClientDirectives`; the client
returns a :class:`ClientUpdate` — the update Δw as one flat float32 vector and its
:class:`UpdateMeta`. Both are plain data so that the same client step can run in-process
(simulation) or inside a Flower ClientApp on another machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["ClientDirectives", "ClientUpdate", "UpdateMeta"]


@dataclass(frozen=True)
class ClientDirectives:
    """Per-client instructions for one round.

    Attributes:
        round: 1-based round index the update is produced for.
        client_id: The client's id.
        extra: Directive payload for plug-ins (e.g. a per-client clip bound).
    """

    round: int
    client_id: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UpdateMeta:
    """Metadata carried by an update.

    Attributes:
        client_id: Producer.
        num_samples: n_k, local training-set size (FedAvg weight).
        round: Round the update was produced in (staleness = current − this).
        label_histogram: ``[C]`` label counts, when the protocol shares them, else None.
        train_loss: Mean training loss over the local steps.
        train_accuracy: Fraction of local training samples classified correctly while
            training (running, as in a training-accuracy curve).
        steps: Local optimisation steps taken.
        bytes_sent: Payload size on the wire.
    """

    client_id: int
    num_samples: int
    round: int
    label_histogram: np.ndarray | None = None
    train_loss: float = float("nan")
    train_accuracy: float = float("nan")
    steps: int = 0
    bytes_sent: int = 0


@dataclass(frozen=True)
class ClientUpdate:
    """An update Δw = w_local − w_global (``[D]`` float32) and its metadata.

    Attributes:
        delta: ``[D]`` float32, what the server receives.
        meta: Metadata the server receives with it.
        local_log: What the client's release steps did (e.g. ``{"l2_clip": {"norm": 3.1}}``
            or a risk level). It stays on the client: the simulation collects it for
            analysis and accounting, the server tier never reads it.
    """

    delta: torch.Tensor
    meta: UpdateMeta
    local_log: dict[str, Any] = field(default_factory=dict)
