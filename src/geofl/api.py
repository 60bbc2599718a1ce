"""The Python API: build or load an experiment, run it, read a typed result.

The same machinery as ``geofl run``, for notebooks and scripts: :func:`load` is
:func:`~geofl.config.load.load_config` (a preset name, a YAML path or a plain mapping, with
the CLI's ``--set`` overrides), :func:`run` is
:func:`~geofl.engine.experiment.run_experiment` with user callbacks as run-event
:class:`~geofl.events.Subscriber` s, and :class:`RunResult` reads a run directory back as
typed records (:class:`~geofl.records.RoundRecord` per round, :class:`FinalMetrics` per
finished (method, seed)). Bad input fails as on the command line: one-line
:class:`~geofl.errors.ConfigError` or :class:`~geofl.errors.RunDirError`.

User-defined plug-ins go into the registries the built-ins use (re-exported here), with
their ``register`` decorators; a config then names them by key like any built-in. See the
guide ``docs/guides/python-api.md``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from geofl.algorithms.base import Algorithm, AlgorithmContext
from geofl.config.load import apply_override, config_from_raw, load_config
from geofl.config.memory import check_memory
from geofl.config.schema import ExperimentConfig
from geofl.errors import ConfigError, RegistryError, RunDirError
from geofl.events import RunInfo, Subscriber
from geofl.plugins import (
    AGGREGATORS,
    ALGORITHMS,
    ATTACKS,
    DATASETS,
    DEFENSES,
    LOCAL_TRAINERS,
    MODELS,
    PARTITIONERS,
    RELEASE_STEPS,
    SAMPLERS,
    SUBSCRIBERS,
    TASKS,
    WEIGHTINGS,
)
from geofl.records import RoundRecord, TaskInfo, metrics_from_json, read_rounds
from geofl.registry import NoParams
from geofl.rundir import seed_dir
from geofl.server.aggregators import Aggregate, Aggregator
from geofl.tasks.base import SplitMetrics

__all__ = [
    "AGGREGATORS",
    "ALGORITHMS",
    "ATTACKS",
    "DATASETS",
    "DEFENSES",
    "LOCAL_TRAINERS",
    "MODELS",
    "PARTITIONERS",
    "RELEASE_STEPS",
    "SAMPLERS",
    "SUBSCRIBERS",
    "TASKS",
    "WEIGHTINGS",
    "Aggregate",
    "Aggregator",
    "Algorithm",
    "AlgorithmContext",
    "ConfigError",
    "ConfigSource",
    "ExperimentConfig",
    "FinalMetrics",
    "NoParams",
    "RegistryError",
    "RoundCallback",
    "RoundRecord",
    "RunDirError",
    "RunInfo",
    "RunResult",
    "SeedResult",
    "Subscriber",
    "load",
    "run",
]

#: What :func:`load` and :func:`run` accept: a preset name, a YAML path, a raw config
#: mapping (what a YAML file holds), or an already validated config.
ConfigSource = str | Path | Mapping[str, Any] | ExperimentConfig

#: A plain function called after every round: ``callback(info, record)``.
RoundCallback = Callable[[RunInfo, RoundRecord], None]


def load(
    source: ConfigSource, overrides: Iterable[str] = (), *, seeds: Sequence[int] | None = None
) -> ExperimentConfig:
    """A fully validated experiment config, as ``geofl run`` would run it.

    Args:
        source: A preset name (``"demo"``), a YAML path, a raw mapping or a validated
            config (re-validated when overrides or seeds are given). A mapping is copied,
            never changed: validation completes its config in place, and a notebook reuses
            its dict across runs.
        overrides: ``--set``-style ``path=value`` assignments (``"federation.rounds=2"``),
            applied in order.
        seeds: Replaces ``seeds`` when given (``--seeds``).

    Raises:
        ConfigError: naming the first invalid field, in one line.
    """
    overrides = list(overrides)
    if isinstance(source, str | Path):
        return load_config(source, overrides, None if seeds is None else list(seeds))
    if isinstance(source, ExperimentConfig):
        if not overrides and seeds is None:
            return source
        raw = source.model_dump(mode="json")
    elif isinstance(source, Mapping):
        raw = copy.deepcopy(dict(source))
    else:
        raise ConfigError(
            "source",
            f"expected a preset name, a YAML path or a mapping, got {type(source).__name__}",
        )
    for assignment in overrides:
        apply_override(raw, assignment)
    if seeds is not None:
        raw["seeds"] = list(seeds)
    cfg = config_from_raw(raw)
    check_memory(cfg)  # as load_config: what this machine can run
    return cfg


def run(
    config: ConfigSource,
    out: str | Path | None = None,
    *,
    overrides: Iterable[str] = (),
    seeds: Sequence[int] | None = None,
    callbacks: Sequence[Subscriber | RoundCallback] = (),
    resume: bool = False,
) -> RunResult:
    """Run every method × seed of an experiment; return its typed result.

    Everything ``geofl run`` writes is written (``config.yaml``, ``rounds.jsonl``,
    ``final.json``, ``summary.json``) but the HTML report (:func:`geofl.report.write_report`
    writes it on request), so ``geofl report`` and :meth:`RunResult.load` read the run later.

    Args:
        config: What :func:`load` accepts.
        out: The run directory (default ``runs/NAME-YYYYmmdd-HHMMSS``, as the CLI).
        overrides, seeds: As :func:`load`.
        callbacks: Run-event subscribers (objects with ``on_run_start``, ``on_round_end``
            and ``on_run_end``), or plain functions ``f(info, record)`` called after every
            round with the typed :class:`~geofl.records.RoundRecord`.
        resume: Continue the interrupted run in ``out``.

    Raises:
        ConfigError: for an invalid config or callback (before anything is written).
        RunDirError: when ``out`` holds another run (or, resuming, none).
    """
    from geofl.engine.experiment import run_experiment

    cfg = load(config, overrides, seeds=seeds)
    subscribers = [_as_subscriber(cb, i) for i, cb in enumerate(callbacks)]
    if out is None:
        if resume:
            raise ConfigError("out", "resume=True needs the run directory as out")
        out = Path("runs") / f"{cfg.name}-{datetime.now():%Y%m%d-%H%M%S}"
    run_dir = run_experiment(cfg, Path(out), resume=resume, subscribers=subscribers)
    return RunResult.load(run_dir)


class _RoundFunction:
    """A plain round callback as a :class:`~geofl.events.Subscriber`."""

    def __init__(self, fn: RoundCallback) -> None:
        self._fn = fn

    def on_run_start(self, info: RunInfo) -> None:
        pass

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        self._fn(info, record)

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        pass


_EVENTS = ("on_run_start", "on_round_end", "on_run_end")


def _as_subscriber(callback: object, index: int) -> Subscriber:
    """A subscriber as is (it may also be an observer or a gate); a function wrapped."""
    if all(callable(getattr(callback, e, None)) for e in _EVENTS):
        return callback  # type: ignore[return-value]  # structurally a Subscriber
    if callable(callback):
        return _RoundFunction(callback)  # f(info, record)
    raise ConfigError(
        f"callbacks.{index}",
        f"{type(callback).__name__} is neither a function f(info, record) nor a subscriber "
        f"with {', '.join(_EVENTS)}",
    )


@dataclass(frozen=True)
class FinalMetrics:
    """A finished (method, seed)'s ``final.json``, typed.

    Attributes:
        test, val: The last round's metrics (None where the split was not evaluated).
        best_val_round: The round whose validation primary metric was best (its model is
            ``best.pt``); None without a validation split.
        best_val_test: That round's test metrics.
        rounds: Rounds the run was configured for.
        wall_s: Training time in seconds.
        diverged: Why the run diverged (a non-finite loss, ...), or None.
        raw: The whole ``final.json`` (privacy, communication, threat, ... by section).
    """

    test: SplitMetrics | None
    val: SplitMetrics | None
    best_val_round: int | None
    best_val_test: SplitMetrics | None
    rounds: int
    wall_s: float
    diverged: str | None
    raw: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FinalMetrics:
        """Read a ``final.json`` object."""
        final = data.get("final") or {}
        best = data.get("best_val") or {}
        return cls(
            test=_metrics(final.get("test")),
            val=_metrics(final.get("val")),
            best_val_round=None if best.get("round") is None else int(best["round"]),
            best_val_test=_metrics(best.get("test")),
            rounds=int(data.get("rounds") or 0),
            wall_s=float(data.get("wall_s") or 0.0),
            diverged=None if data.get("diverged") is None else str(data["diverged"]),
            raw=data,
        )


def _metrics(data: Any) -> SplitMetrics | None:
    return metrics_from_json(data) if isinstance(data, Mapping) else None


@dataclass(frozen=True)
class SeedResult:
    """One (method, seed) run.

    Attributes:
        method, seed: Which run.
        dir: Its directory (``RUN_DIR/methods/<method>/seed-<seed>``).
        rounds: Every round's typed record, in order (``rounds.jsonl``).
        final: Its final metrics; None while it is unfinished (no ``final.json``).
    """

    method: str
    seed: int
    dir: Path
    rounds: tuple[RoundRecord, ...]
    final: FinalMetrics | None

    def series(self, metric: str, split: str = "test") -> list[tuple[int, float]]:
        """``(round, value)`` of one metric over the evaluated rounds (a learning curve).

        Args:
            metric: A metric name of the task (``"accuracy"``, ``"loss"``, ...).
            split: ``"test"`` or ``"val"``.
        """
        out = []
        for rec in self.rounds:
            m = rec.test if split == "test" else rec.val
            if m is not None and metric in m.values:
                out.append((rec.round, m.values[metric]))
        return out


@dataclass(frozen=True)
class RunResult:
    """A run directory, read back typed.

    Attributes:
        run_dir: The run directory.
        name: The experiment's name.
        task: Its task (the primary metric that picks the best model).
        runs: Every (method, seed) in config order: methods, then seeds.
        summary: ``summary.json`` (mean ± std over seeds per method; empty if absent).
    """

    run_dir: Path
    name: str
    task: TaskInfo
    runs: tuple[SeedResult, ...]
    summary: Mapping[str, Any]

    @property
    def methods(self) -> list[str]:
        """The method names, in config order."""
        return list(dict.fromkeys(r.method for r in self.runs))

    def get(self, method: str, seed: int | None = None) -> SeedResult:
        """One (method, seed) run; ``seed`` may be left out when the method has one.

        Raises:
            KeyError: naming the runs there are.
        """
        found = [r for r in self.runs if r.method == method and seed in (None, r.seed)]
        if len(found) != 1:
            have = ", ".join(f"{r.method}/seed-{r.seed}" for r in self.runs)
            raise KeyError(f"no single run {method!r} seed {seed} (runs: {have})")
        return found[0]

    @classmethod
    def load(cls, run_dir: str | Path) -> RunResult:
        """Read an existing run directory (one ``geofl run`` or :func:`run` wrote).

        Raises:
            RunDirError: when ``run_dir`` has no readable ``run.json`` or a damaged record.
        """
        run_dir = Path(run_dir)
        info = _read_json(run_dir / "run.json")
        summary_path = run_dir / "summary.json"
        summary = _read_json(summary_path) if summary_path.is_file() else {}
        methods, seeds = _names(run_dir, info)
        runs = tuple(_seed_result(seed_dir(run_dir, m, s), m, s) for m in methods for s in seeds)
        return cls(
            run_dir=run_dir,
            name=str(info.get("name") or run_dir.name),
            task=TaskInfo.from_json(info.get("task")),
            runs=runs,
            summary=summary,
        )


def _names(run_dir: Path, info: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    """``run.json``'s method names and seeds, checked: they name the seed directories."""
    methods, seeds = info.get("methods"), info.get("seeds")
    if not isinstance(methods, list) or not all(
        isinstance(m, str) and _METHOD_NAME.fullmatch(m) for m in methods
    ):
        raise RunDirError(f"{run_dir / 'run.json'}: methods must be a list of method names")
    if not isinstance(seeds, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in seeds
    ):
        raise RunDirError(f"{run_dir / 'run.json'}: seeds must be a list of integers")
    return methods, seeds


#: A method name as the config schema allows it (so it is one path component).
_METHOD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def _seed_result(sdir: Path, method: str, seed: int) -> SeedResult:
    """One (method, seed) directory; unstarted or unfinished runs read as far as they got."""
    final_path = sdir / "final.json"
    final = None
    if final_path.is_file():
        try:
            final = FinalMetrics.from_json(_read_json(final_path))
        except (AttributeError, TypeError, ValueError, OverflowError) as err:  # a wrong type
            raise RunDirError(f"{final_path}: damaged ({type(err).__name__}: {err})") from None
    return SeedResult(method, seed, sdir, tuple(read_rounds(sdir / "rounds.jsonl")), final)


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a run directory, or a one-line RunDirError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path}: missing; is {path.parent} a geofl run directory?") from None
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path}: unreadable ({err})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a JSON object")
    return data
