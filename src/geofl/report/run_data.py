"""Read a run directory into typed records (:func:`load_run`).

The engine writes one directory per run (:mod:`geofl.rundir`): ``run.json``, ``config.yaml``
and ``methods/<method>/seed-<seed>/`` with ``rounds.jsonl``, ``partition.json`` and, once
the seed finished, ``final.json``. A seed without ``final.json`` is unfinished.

The rolling-std window is the run's ``eval.rolling_window`` (``config.yaml``), else
:data:`ROLLING_WINDOW`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from geofl.errors import RunDirError
from geofl.records import RoundRecord, TaskInfo

__all__ = ["ROLLING_WINDOW", "RunData", "Runs", "SeedRun", "load_run", "num", "read_json"]

#: Default window of the rolling std of test accuracy (000 Fig. 6), if the config sets none.
ROLLING_WINDOW = 10


@dataclass(frozen=True)
class SeedRun:
    """What exists on disk for one (method, seed).

    Attributes:
        seed: The seed.
        rounds: Records of ``rounds.jsonl`` in file order (empty if the file is missing).
        partition: Content of ``partition.json``, or None if missing.
        final: Content of ``final.json``, or None if the run is unfinished.
    """

    seed: int
    rounds: list[RoundRecord] = field(default_factory=list)
    partition: dict[str, Any] | None = None
    final: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        """True when ``final.json`` exists."""
        return self.final is not None

    def series(self, split: str, key: str = "accuracy") -> tuple[np.ndarray, np.ndarray]:
        """``(rounds, values)`` of one metric over the evaluated rounds (NaN where null).

        Args:
            split: ``"val"``, ``"test"``, or a top-level scalar of the round record
                (``"train_loss"``, ``"bytes_up"``, ``"train_<metric>"`` such as
                ``"train_accuracy"``; then ``key`` is ignored).
            key: Metric name inside the split's :class:`~geofl.tasks.base.SplitMetrics`.
        """
        xs = np.array([r.round for r in self.rounds], dtype=np.float64)
        if split in ("train_loss", "bytes_up"):
            ys = [num(getattr(r, split)) for r in self.rounds]
        elif split.startswith("train_"):
            ys = [num(r.train_metrics.get(split.removeprefix("train_"))) for r in self.rounds]
        else:
            splits = [getattr(r, split) for r in self.rounds]
            ys = [math.nan if m is None else num(m.values.get(key)) for m in splits]
        return xs, np.array(ys, dtype=np.float64)


#: ``method -> seed -> SeedRun`` (:attr:`RunData.methods`, or a subset of it).
Runs = Mapping[str, Mapping[int, "SeedRun"]]


@dataclass(frozen=True)
class RunData:
    """A loaded run directory.

    Attributes:
        run_dir: The directory.
        info: Content of ``run.json``.
        methods: ``method -> seed -> SeedRun``, methods in ``run.json`` order, seeds in
            ``run.json`` order (directories found on disk but not listed come after).
        config: Content of ``config.yaml`` (the resolved experiment config), ``{}`` if the
            file is missing or not a mapping.
    """

    run_dir: Path
    info: dict[str, Any]
    methods: dict[str, dict[int, SeedRun]]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Run name from ``run.json`` (the directory name if absent)."""
        return str(self.info.get("name") or self.run_dir.name)

    @property
    def seeds(self) -> list[int]:
        """Seeds listed in ``run.json``."""
        return [int(s) for s in self.info.get("seeds") or []]

    @property
    def single_seed(self) -> bool:
        """True when no method has more than one seed: there is no spread to show."""
        return all(len(seeds) <= 1 for seeds in self.methods.values())

    @property
    def task(self) -> TaskInfo:
        """The run's task (``run.json["task"]``; classification for older runs)."""
        return TaskInfo.from_json(self.info.get("task"))

    @property
    def rolling_window(self) -> int:
        """``eval.rolling_window`` of the config, else :data:`ROLLING_WINDOW`."""
        window = (self.config.get("eval") or {}).get("rolling_window")
        if isinstance(window, int) and not isinstance(window, bool) and window >= 1:
            return window
        return ROLLING_WINDOW

    def label(self, method: str) -> str:
        """Display name of ``method`` (``run.json["labels"]``), else the method name."""
        labels = self.info.get("labels")
        label = labels.get(method) if isinstance(labels, dict) else None
        return str(label) if label else method

    def display_names(self) -> dict[str, str]:
        """``method -> label`` (:meth:`label`), made unique by appending the method name to
        labels that several methods share."""
        labels = {m: self.label(m) for m in self.methods}
        counts: dict[str, int] = {}
        for label in labels.values():
            counts[label] = counts.get(label, 0) + 1
        return {m: (f"{lb} ({m})" if counts[lb] > 1 else lb) for m, lb in labels.items()}

    def labelled(self) -> dict[str, dict[int, SeedRun]]:
        """:attr:`methods` keyed by display name (for figure legends), in method order."""
        names = self.display_names()
        return {names[m]: seeds for m, seeds in self.methods.items()}

    def method_config(self, method: str) -> dict[str, Any]:
        """The ``methods`` entry of the config named ``method`` (``{}`` if not found)."""
        for entry in self.config.get("methods") or []:
            if isinstance(entry, dict) and entry.get("name") == method:
                return entry
        return {}


def num(x: Any) -> float:
    """``float(x)``, with None (JSON null) and non-numbers mapped to NaN."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return math.nan
    return float(x)


def read_json(path: Path) -> Any:
    """Parse a JSON file of the run directory.

    Raises:
        RunDirError: The file is not valid JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: invalid JSON ({exc}); re-run or delete the file") from exc


def _read_rounds(path: Path) -> list[RoundRecord]:
    if not path.is_file():
        return []
    lines = [ln for ln in path.read_bytes().splitlines() if ln.strip()]
    out: list[RoundRecord] = []
    for i, line in enumerate(lines):
        try:  # decoded line by line, so a stray non-UTF-8 byte is named by its line
            out.append(RoundRecord.from_json(json.loads(line.decode("utf-8"))))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if i == len(lines) - 1:  # a run still writing may leave a truncated last line
                break
            raise RunDirError(
                f"{path}:{i + 1}: invalid JSON line ({exc}); the file is corrupt, re-run"
            ) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise RunDirError(
                f"{path}:{i + 1}: not a round record ({type(exc).__name__}: {exc}); re-run"
            ) from exc
    return out


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        raise RunDirError(
            f"{path}: invalid YAML ({where}{what}); restore it or re-run the experiment to "
            "rewrite it"
        ) from exc
    return config if isinstance(config, dict) else {}


def _seed_dirs(method_dir: Path) -> list[int]:
    if not method_dir.is_dir():
        return []
    seeds = []
    for p in method_dir.glob("seed-*"):
        suffix = p.name.removeprefix("seed-")
        if p.is_dir() and suffix.lstrip("-").isdigit():
            seeds.append(int(suffix))
    return sorted(seeds)


def load_run(run_dir: Path) -> RunData:
    """Read ``run.json`` and every ``methods/<method>/seed-<seed>/`` that exists.

    Args:
        run_dir: The run directory.

    Raises:
        RunDirError: ``run_dir`` or its ``run.json`` is missing, or a JSON (or
            ``config.yaml``) file is corrupt.
    """
    run_dir = Path(run_dir)
    info_path = run_dir / "run.json"
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} not found; pass the directory of a run")
    if not info_path.is_file():
        raise RunDirError(
            f"{info_path} not found; pass a run directory written by the engine (has run.json)"
        )
    info = read_json(info_path)
    if not isinstance(info, dict):
        raise RunDirError(f"{info_path}: expected a JSON object; re-run to regenerate it")
    methods_root = run_dir / "methods"
    names = [str(m) for m in info.get("methods") or []]
    if methods_root.is_dir():
        names += sorted(
            p.name for p in methods_root.iterdir() if p.is_dir() and p.name not in names
        )
    listed = [int(s) for s in info.get("seeds") or []]
    methods: dict[str, dict[int, SeedRun]] = {}
    for name in names:
        found = _seed_dirs(methods_root / name)
        seeds = listed + [s for s in found if s not in listed]
        runs: dict[int, SeedRun] = {}
        for seed in seeds:
            d = methods_root / name / f"seed-{seed}"
            part, final = d / "partition.json", d / "final.json"
            runs[seed] = SeedRun(
                seed=seed,
                rounds=_read_rounds(d / "rounds.jsonl"),
                partition=read_json(part) if part.is_file() else None,
                final=read_json(final) if final.is_file() else None,
            )
        methods[name] = runs
    return RunData(
        run_dir=run_dir, info=info, methods=methods, config=_read_config(run_dir / "config.yaml")
    )
