"""What ``final.json`` reports beyond the last round's metrics: whether the run diverged
(or stalled: every update refused to the end), and ε per client from each client's own
privacy ledger."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from geofl.client.state import ClientStateStore
from geofl.config.schema import ExperimentConfig
from geofl.io import write_json_atomic
from geofl.privacy.accounting import (
    ACCOUNTANTS,
    DP_EVENTS_FILE,
    dp_event_from_spec,
    dp_events_json,
    epsilon_summary,
)
from geofl.records import RejectionReason, RoundRecord, RoundStatus

__all__ = ["DIVERGENCE_FACTOR", "divergence", "privacy_summary", "stalled"]


def privacy_summary(
    cfg: ExperimentConfig, store: ClientStateStore, num_clients: int, out_dir: Path
) -> dict[str, Any] | None:
    """ε per client from each client's own ledger (what clients would report), and where
    their noise came from (``randomness``: seeded or secure, :mod:`geofl.rng`); each
    client's event list also goes to ``dp_events.json`` for offline recomputation."""
    acc_cfg = cfg.privacy.accountant
    accountant = ACCOUNTANTS.build(acc_cfg.name, acc_cfg.params)
    zs: set[float] = set()
    ledgers: dict[str, list[dict[str, Any]]] = {}
    mechanisms: set[str] = set()
    for k in range(num_clients):
        specs = [dict(spec) for spec in store.events(k)]
        for spec in specs:
            accountant.record(k, dp_event_from_spec(spec))
            zs.add(float(spec["noise_multiplier"]))
            mechanisms.add(str(spec.get("mechanism")))
        if specs:
            ledgers[str(k)] = specs
    if not zs:
        return None
    write_json_atomic(out_dir / DP_EVENTS_FILE, dp_events_json(ledgers, cfg.privacy))
    summary = epsilon_summary(
        accountant,
        delta=cfg.privacy.delta,
        noise_multipliers=sorted(zs),
        kind=acc_cfg.name,
        record_level=mechanisms == {"poisson_gaussian"},
    )
    summary["randomness"] = cfg.privacy.randomness or "seeded"  # absent: the simulator's
    return summary


#: Test loss above this many times the first evaluated round's counts as divergence.
DIVERGENCE_FACTOR = 10.0


def divergence(records: Sequence[RoundRecord]) -> str | None:
    """Why a run diverged, or None: a non-finite training or test loss in any round, a
    final test loss above :data:`DIVERGENCE_FACTOR` × the first evaluated one, or a run
    whose every update was refused from some round to the end (:func:`stalled`).

    Args:
        records: The run's round records in order.
    """
    return _loss_divergence(records) or stalled(records)


def _loss_divergence(records: Sequence[RoundRecord]) -> str | None:
    """The loss rules of :func:`divergence`."""
    first: float | None = None
    for rec in records:
        if rec.train_loss is not None and not math.isfinite(rec.train_loss):
            return f"round {rec.round}: training loss is not finite"
        if rec.test is None:
            continue
        loss = rec.test.values.get("loss", math.nan)
        if not math.isfinite(loss):
            return f"round {rec.round}: test loss is not finite"
        first = loss if first is None else first
    evaluated = [r.test for r in records if r.test is not None]
    if first is not None and evaluated:
        final = evaluated[-1].values["loss"]
        if final > DIVERGENCE_FACTOR * first:
            return (
                f"final test loss {final:.3g} exceeds {DIVERGENCE_FACTOR:g}× the first "
                f"evaluated round's {first:.3g}"
            )
    return None


def stalled(records: Sequence[RoundRecord]) -> str | None:
    """Why the model made no progress to the end of the run, or None.

    A round whose every arriving update validation refused (NaN/Inf from clients whose
    training blew up, e.g. ``train.lr=1e6``) leaves the model unchanged, and so does every
    later round that trains from it: the losses of such a run stay finite (there are none
    to report, or the last model's), so only the refusals show it. The run stalled when
    such a round is followed, to the end, by no round that aggregated an update.

    Args:
        records: The run's round records in order.

    Returns:
        ``"from round r on no update was aggregated: … (n; client k: detail)"``, or None.
    """
    since: RoundRecord | None = None
    for rec in records:
        if rec.status is RoundStatus.AGGREGATED:
            since = None
        elif since is None and _refused_all(rec):
            since = rec
    if since is None:
        return None
    bad = [r for r in since.rejected if r.reason is RejectionReason.MALFORMED]
    return (
        f"from round {since.round} on no update was aggregated: every update that arrived "
        f"in round {since.round} was malformed ({len(bad)}; client {bad[0].client}: "
        f"{bad[0].detail})"
    )


def _refused_all(rec: RoundRecord) -> bool:
    """Whether updates arrived in ``rec`` and validation refused every one (the others
    were lost or declined)."""
    return rec.status is RoundStatus.NO_UPDATES and any(
        r.reason is RejectionReason.MALFORMED for r in rec.rejected
    )
