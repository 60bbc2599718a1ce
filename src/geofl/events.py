"""Run events and their subscribers (logging, progress display, the governance ledger).

Subscribers observe; they never change the optimisation. The engine calls them at run
start, after every round and at run end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from geofl.records import RoundRecord
from geofl.registry import Registry

__all__ = [
    "SUBSCRIBERS",
    "ExperimentObserver",
    "LogSubscriber",
    "ParticipationGate",
    "PreflightCheck",
    "RunInfo",
    "Subscriber",
]

log = logging.getLogger("geofl")


@dataclass(frozen=True)
class RunInfo:
    """Identity of one (method, seed) run.

    Attributes:
        primary_metric: The task's metric that picks the best model (``"accuracy"`` for
            classification); displays show it.
    """

    method: str
    seed: int
    rounds: int
    start_round: int
    num_clients: int
    out_dir: Path
    num_params: int = 0
    primary_metric: str = "accuracy"


def metric_text(name: str, value: float) -> str:
    """A metric for a one-line display: ``acc 83.21%`` for accuracy, else ``rmse 0.1234``."""
    if name == "accuracy":
        return f"acc {100 * value:.2f}%"
    return f"{name} {value:.4g}"


class Subscriber(Protocol):
    """Receives engine events."""

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None: ...

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


@runtime_checkable
class ParticipationGate(Protocol):
    """A subscriber that may bar clients from rounds (the governance permission gate).

    This is the one feedback path from subscribers into training: before sampling a
    round's participants the engine asks every subscriber that has ``allows`` (000 §3.5.3:
    suspended and removed nodes sit out). Without such a subscriber nothing changes.
    """

    def allows(self, client: int, round_idx: int) -> bool: ...


@runtime_checkable
class ExperimentObserver(Protocol):
    """A subscriber that also wants to know when the whole experiment is done: every
    (method, seed) run finished and ``summary.json`` written (the tracking export closes
    its run-level records then)."""

    def on_experiment_end(self, run_dir: Path) -> None: ...


@runtime_checkable
class PreflightCheck(Protocol):
    """A subscriber that checks, once the run directory exists and before round 1, that it
    can do its work (a tracker's store takes writes); if not it raises a one-line
    :class:`~geofl.errors.GeoflError`, before any round is spent."""

    def preflight(self, run_dir: Path) -> None: ...


#: Subscriber registry: ``log``, ...
SUBSCRIBERS: Registry[Subscriber] = Registry("subscriber")


class LogSubscriber:
    """Logs one line per evaluated round and per finished run (``logging``, logger geofl)."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def on_run_start(self, info: RunInfo) -> None:
        self._t0 = time.perf_counter()
        log.info(
            "%s seed=%d: %d clients, rounds %d..%d",
            info.method,
            info.seed,
            info.num_clients,
            info.start_round,
            info.rounds,
        )

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if record.test is not None:
            log.debug(
                "%s seed=%d round %d: test %s",
                info.method,
                info.seed,
                record.round,
                metric_text(info.primary_metric, record.test[info.primary_metric]),
            )

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        value = (final["final"]["test"] or {}).get(info.primary_metric)
        log.info(
            "%s seed=%d done in %.1fs: final test %s",
            info.method,
            info.seed,
            time.perf_counter() - self._t0,
            metric_text(info.primary_metric, float("nan") if value is None else value),
        )


@SUBSCRIBERS.register("log")
def build_log(_: object) -> Subscriber:
    """Log a line at the start and end of every run."""
    return LogSubscriber()
