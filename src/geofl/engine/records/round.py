"""What a round collected from its clients, and the synchronous round's record.

:class:`Collected` gathers a round's uploads as they arrive (accepted updates; rejections,
with :func:`declined` for a client that sent nothing; the clients' logs and privacy spend;
the uplink's transmissions); :func:`sync_record` turns it and the aggregation into the run's
typed :class:`~geofl.records.RoundRecord`, to which the scheduler adds timings and the
content hashes of :func:`with_hashes`. Both go through :func:`build_record`, the one
record builder: the asynchronous hierarchy collects its tractors' uploads the same way and
calls it with its own fields (GEO participants and weights, the ``hierarchy`` block).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from geofl.engine.clients.runner import LostUpload
from geofl.engine.uplink.ground import Transmission, Uplink
from geofl.errors import BudgetExhaustedError
from geofl.hashing import params_sha256, update_set_sha256
from geofl.records import Rejection, RejectionReason, RoundRecord, RoundStatus
from geofl.server.sampling import Cohort
from geofl.server.strategy import StrategyResult, UpdateBatch
from geofl.server.validate import l2_norms
from geofl.update import ClientUpdate, noise_scale

__all__ = ["Collected", "build_record", "declined", "reported_mean", "sync_record", "with_hashes"]

log = logging.getLogger("geofl")


@dataclass
class Collected:
    """Accepted updates of a round, as they arrived."""

    accepted: list[ClientUpdate] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    client_log: dict[str, Any] = field(default_factory=dict)
    epsilon: dict[str, float] = field(default_factory=dict)
    train_time: float = 0.0
    payload_bytes: int = 0
    transmissions: list[Transmission] = field(default_factory=list)


def declined(res: BudgetExhaustedError | LostUpload, k: int, round_idx: int) -> Rejection:
    """Why client ``k`` sent nothing: its privacy budget is spent (it declines the round) or
    its upload never came back from its runner (lost in transit)."""
    if isinstance(res, BudgetExhaustedError):
        log.warning("round %d: %s; it declines the round", round_idx, res)
        return Rejection(k, RejectionReason.BUDGET_EXHAUSTED, str(res))
    log.warning("round %d: no upload from client %d: %s", round_idx, k, res.detail)
    return Rejection(k, RejectionReason.LOST_IN_TRANSIT, res.detail)


def build_record(
    round_idx: int,
    cohort: Cohort,
    excluded: list[int],
    got: Collected,
    *,
    status: RoundStatus,
    participants: list[int],
    weights: list[float],
    primary: str,
    lr: float | None,
    uplink: Uplink | None,
    bytes_down: int,
    **fields: Any,
) -> RoundRecord:
    """The round's record — the one builder every scheduler uses, so the flat server and
    the 003 hierarchy report the client half of a round (cohort, gate, rejections, the
    clients' training figures, logs, privacy spend, uplink) the same way.

    Args:
        round_idx: The round.
        cohort: The sampler's draw.
        excluded: Sampled clients the permission gate kept out.
        got: What the round collected from the clients it trained
            (:meth:`~geofl.engine.scheduler.SyncScheduler.collect`).
        status: How the round ended.
        participants: The clients whose updates the new model incorporates.
        weights: Each participant's effective weight.
        primary: The task's primary metric (the train metric reported).
        lr: The round's η_l, or None when the run does not schedule it.
        uplink: The 003 uplink, or None.
        bytes_down: Bytes sent to clients this round.
        **fields: The scheduler's own :class:`~geofl.records.RoundRecord` fields
            (aggregation error, update norms, the hierarchy block, content hashes, ...).
    """
    metas = [u.meta for u in got.accepted]
    n = np.array([m.num_samples for m in metas], dtype=np.float64)
    losses = np.array([m.train_loss for m in metas])
    train = np.array([m.train_metrics.get(primary, math.nan) for m in metas])
    return RoundRecord(
        round=round_idx,
        status=status,
        participants=participants,
        weights=weights,
        rejected=got.rejected,
        excluded=excluded,
        cohort=list(cohort.clients),
        sampling={"scheme": cohort.scheme, "rate": cohort.rate},
        train_loss=reported_mean(n, losses),
        train_metrics={primary: reported_mean(n, train)},
        bytes_up=int(sum(m.bytes_sent for m in metas)),
        bytes_down=bytes_down,
        client_log=got.client_log,
        epsilon=got.epsilon,
        lr=lr,
        uplink=None if uplink is None else uplink.summary(got.transmissions),
        **fields,
    )


def sync_record(
    round_idx: int,
    cohort: Cohort,
    excluded: list[int],
    got: Collected,
    batch: UpdateBatch,
    status: RoundStatus,
    result: StrategyResult | None,
    error: str | None,
    *,
    primary: str,
    dim: int,
    lr: float | None,
    uplink: Uplink | None,
) -> RoundRecord:
    """The record of a synchronous round (without content hashes or timings):
    :func:`build_record` with the flat server's aggregation.

    Args:
        round_idx: The round.
        cohort: The sampler's draw.
        excluded: Sampled clients the permission gate kept out.
        got: What the round collected from the clients it trained.
        batch: The accepted updates (``deltas`` ``[K, D]``).
        status: How the round ended.
        result: The strategy's aggregate, or None when there was none.
        error: Why aggregation failed, or None.
        primary: The task's primary metric (the train metric reported).
        dim: D, the model's parameter count (each trained client downloads ``[D]`` float32).
        lr: The round's η_l, or None when the run does not schedule it.
        uplink: The 003 uplink, or None.
    """
    metas = batch.metas
    trained = len(cohort.clients) - len(excluded)
    return build_record(
        round_idx,
        cohort,
        excluded,
        got,
        status=status,
        participants=[m.client_id for m in metas],
        weights=result.weights.tolist() if result is not None else [],
        primary=primary,
        lr=lr,
        uplink=uplink,
        bytes_down=trained * (dim * 4 + got.payload_bytes),
        aggregation_error=error,
        update_norms=l2_norms(batch.deltas).tolist() if metas else [],  # float64: no overflow
        update_noise=noise_scale(batch.deltas).tolist() if metas else [],
        strategy=dict(result.info) if result is not None else {},
    )


def reported_mean(n: np.ndarray, values: np.ndarray) -> float | None:
    """Sample-weighted mean over the clients that reported a value (NaN: not released, as
    DP-SGD's training loss); None when none did."""
    reported = ~np.isnan(values)
    if not reported.any():
        return None
    return float(n[reported] @ values[reported] / n[reported].sum())


def with_hashes(record: RoundRecord, params: torch.Tensor, batch: UpdateBatch) -> RoundRecord:
    """Content hashes for commitments and audits (000 §3.5): the new global model and the
    set of updates it came from."""
    clients = [m.client_id for m in batch.metas]
    return replace(
        record,
        model_sha256=params_sha256(params),
        update_set_sha256=update_set_sha256(clients, batch.deltas),
    )
