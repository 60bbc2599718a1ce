"""Engine events and their subscribers (metrics, progress, later the governance ledger).

Subscribers observe; they never change the optimisation. The engine calls them at run
start, after every round and at run end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from geofl.registry import Registry

__all__ = [
    "SUBSCRIBERS",
    "LogSubscriber",
    "ParticipationGate",
    "ProgressSubscriber",
    "RunInfo",
    "Subscriber",
]

log = logging.getLogger("geofl")


@dataclass(frozen=True)
class RunInfo:
    """Identity of one (method, seed) run."""

    method: str
    seed: int
    rounds: int
    start_round: int
    num_clients: int
    out_dir: Path
    num_params: int = 0


class Subscriber(Protocol):
    """Receives engine events."""

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: dict[str, Any]) -> None: ...

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


@runtime_checkable
class ParticipationGate(Protocol):
    """A subscriber that may bar clients from rounds (the governance permission gate).

    This is the one feedback path from subscribers into training: before sampling a
    round's participants the engine asks every subscriber that has ``allows`` (000 §3.5.3:
    suspended and removed nodes sit out). Without such a subscriber nothing changes.
    """

    def allows(self, client: int, round_idx: int) -> bool: ...


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

    def on_round_end(self, info: RunInfo, record: dict[str, Any]) -> None:
        test = record.get("test")
        if test is not None:
            log.debug(
                "%s seed=%d round %d: test acc %.4f",
                info.method,
                info.seed,
                record["round"],
                test["accuracy"],
            )

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        log.info(
            "%s seed=%d done in %.1fs: final test acc %.4f",
            info.method,
            info.seed,
            time.perf_counter() - self._t0,
            final["final"]["test"]["accuracy"],
        )


class ProgressSubscriber:
    """A rich progress display: one bar per run with rounds, current test accuracy, ETA."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress or make_progress()
        self._tasks: dict[tuple[str, int], TaskID] = {}

    def on_run_start(self, info: RunInfo) -> None:
        self._tasks[(info.method, info.seed)] = self.progress.add_task(
            f"{info.method} seed={info.seed}",
            total=info.rounds,
            completed=info.start_round - 1,
            metric="",
        )

    def on_round_end(self, info: RunInfo, record: dict[str, Any]) -> None:
        test = record.get("test")
        metric = f"test acc {100 * test['accuracy']:.2f}%" if test else None
        task = self._tasks[(info.method, info.seed)]
        if metric:
            self.progress.update(task, advance=1, metric=metric)
        else:
            self.progress.update(task, advance=1)

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        self.progress.update(self._tasks[(info.method, info.seed)], completed=info.rounds)


def make_progress() -> Progress:
    """The progress layout used by ``geofl run``."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rounds"),
        TextColumn("{task.fields[metric]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )


@SUBSCRIBERS.register("log")
def build_log(_: object) -> Subscriber:
    """Log a line at the start and end of every run."""
    return LogSubscriber()
