"""Merge run directories of one experiment into one (``geofl merge``).

Seeds of one experiment often run as separate processes — one torch thread per process on
a small machine, one machine per seed, or a method added later — each into its own run
directory. Merging them gives the run directory one ``geofl run`` of every method × seed
would have written: ``summary.json`` (mean ± sd over all seeds, the paired tests against
``compare_to``) and the report come from the merged seeds by the same code.

What may differ between the inputs: ``seeds``; which ``methods`` they ran (a method in
several inputs must be configured identically); ``paper`` values (one key, one value);
``compare_to`` (equal where set); ``name`` and ``description`` (the first input's are
kept); and what a resume may change (:func:`~geofl.engine.records.header.resume_identity`).
Everything else must be equal, and the first difference is named. A (method, seed) pair
in two inputs is refused, as is an input whose run still holds its lock.

Methods keep the order in which they first appear over the inputs (as given), seeds are
sorted. Written: ``config.yaml`` (the merged config, validated, so ``geofl run OUT/config.yaml
--out OUT --resume`` continues seeds that had not finished), ``run.json`` (the merge's own
``provenance`` and, under ``merged_from``, each input's path, ``created`` and
``provenance``), every seed directory copied (never linked: a resumed seed appends to its
``rounds.jsonl``), and ``summary.json``. Everything is built in a temporary directory next
to OUT and renamed into place, so an error leaves nothing behind. Run-level extras of the
inputs (``analysis/``, tracking exports, reports) are not carried over.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from geofl.config.load import config_from_raw
from geofl.config.schema import ExperimentConfig
from geofl.engine.records.header import resume_identity, write_header
from geofl.engine.records.provenance import Provenance
from geofl.errors import ConfigError, RunDirError, RunDirLockedError
from geofl.io import write_json_atomic
from geofl.records import TaskInfo
from geofl.rundir import lock_run_dir, seed_dir

__all__ = ["FREE_KEYS", "RunSource", "first_difference", "merge_runs"]

#: Top-level config keys that may differ between merged runs (see the module docstring).
FREE_KEYS = frozenset({"name", "description", "seeds", "methods", "paper", "compare_to"})


@dataclass(frozen=True)
class RunSource:
    """One input run directory.

    Attributes:
        path: The run directory.
        config: Its ``config.yaml`` (the resolved config).
        info: Its ``run.json``.
    """

    path: Path
    config: dict[str, Any]
    info: dict[str, Any]

    @property
    def pairs(self) -> list[tuple[str, int]]:
        """The (method, seed) pairs this run was configured to run."""
        return [(m["name"], int(s)) for m in self.config["methods"] for s in self.config["seeds"]]


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The dotted path of the first place ``a`` and ``b`` differ (``"(top level)"`` for the
    roots themselves), or None when equal. Mappings are compared key by key in sorted order,
    lists element by element."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                return sub
            found = first_difference(a[key], b[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if a == b else (path or "(top level)")


def read_source(path: Path) -> RunSource:
    """``path``'s ``config.yaml`` and ``run.json``.

    Raises:
        RunDirError: ``path`` is not a run directory, or one of the files is damaged.
    """
    path = Path(path)
    cfg_path, info_path = path / "config.yaml", path / "run.json"
    if not (cfg_path.is_file() and info_path.is_file()):
        raise RunDirError(
            f"{path} is not a run directory (no config.yaml and run.json); pass directories "
            "written by geofl run"
        )
    try:
        config = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise RunDirError(
            f"{path}: config.yaml or run.json is damaged ({type(err).__name__})"
        ) from None
    if not (isinstance(config, dict) and isinstance(info, dict)):
        raise RunDirError(f"{path}: config.yaml and run.json must each hold a mapping")
    return RunSource(path, config, info)


def _identity(config: Mapping[str, Any]) -> Any:
    """What must be equal between merged runs."""
    return {k: v for k, v in resume_identity(dict(config)).items() if k not in FREE_KEYS}


def _union(
    sources: Sequence[RunSource],
    key: str,
    entries: Callable[[RunSource], Iterable[tuple[str, Any]]],
) -> dict[str, Any]:
    """Name → entry over every input, in order of first appearance; one name with two
    different entries is refused."""
    out: dict[str, tuple[Any, Path]] = {}
    for src in sources:
        for name, entry in entries(src):
            if name in out and out[name][0] != entry:
                where = first_difference(out[name][0], entry) or "(value)"
                raise ConfigError(
                    f"{key}.{name}",
                    f"differs between {out[name][1]} and {src.path} (at {where}); merge only "
                    "runs where a shared entry is identical",
                )
            out.setdefault(name, (entry, src.path))
    return {name: entry for name, (entry, _) in out.items()}


def merged_config(sources: Sequence[RunSource]) -> dict[str, Any]:
    """The config of the merged run (raw; validated by the caller).

    Raises:
        ConfigError: the inputs differ outside :data:`FREE_KEYS`, a method or paper entry
            differs between two inputs, or their ``compare_to`` disagree.
        RunDirError: a (method, seed) pair is in two inputs.
    """
    first = sources[0]
    for src in sources[1:]:
        where = first_difference(_identity(first.config), _identity(src.config))
        if where is not None:
            raise ConfigError(
                where,
                f"differs between {first.path} and {src.path}; merge only runs of one "
                "experiment (the same config apart from seeds and methods)",
            )
    owner: dict[tuple[str, int], Path] = {}
    for src in sources:
        for pair in src.pairs:
            if pair in owner:
                raise RunDirError(
                    f"{pair[0]} seed {pair[1]} is in both {owner[pair]} and {src.path}; "
                    "merge each (method, seed) once"
                )
            owner[pair] = src.path
    methods = _union(sources, "methods", lambda s: [(m["name"], m) for m in s.config["methods"]])
    paper = _union(sources, "paper", lambda s: list((s.config.get("paper") or {}).items()))
    baselines = {s.config["compare_to"] for s in sources if s.config.get("compare_to")}
    if len(baselines) > 1:
        raise ConfigError("compare_to", f"the inputs compare to {sorted(baselines)}; use one")
    seeds = sorted({int(s) for src in sources for s in src.config["seeds"]})
    out = {**first.config, "seeds": seeds, "methods": list(methods.values()), "paper": paper}
    out.pop("compare_to", None)
    if baselines:
        out["compare_to"] = baselines.pop()
    return out


@contextlib.contextmanager
def _locked(sources: Sequence[RunSource]) -> Iterator[None]:
    """Hold every input's lock: none is being written while it is copied."""
    with contextlib.ExitStack() as stack:
        for src in sources:
            try:
                stack.enter_context(lock_run_dir(src.path))
            except RunDirLockedError:
                raise RunDirError(
                    f"{src.path} is still being written by a run; merge it when that run "
                    "has finished or stopped"
                ) from None
        yield


def _task(sources: Sequence[RunSource]) -> TaskInfo:
    """The inputs' task (``run.json``), which must be one."""
    tasks = [TaskInfo.from_json(s.info.get("task")) for s in sources]
    if any(t != tasks[0] for t in tasks[1:]):
        raise ConfigError("task", "the inputs learn different tasks; merge runs of one task")
    return tasks[0]


def _write(tmp: Path, sources: Sequence[RunSource], cfg: ExperimentConfig, task: TaskInfo) -> None:
    """Header, seed directories and ``merged_from`` into ``tmp``."""
    write_header(cfg, tmp, task, Provenance.from_cli(None, None))
    for src in sources:
        for method, seed in src.pairs:
            found = seed_dir(src.path, method, seed)
            if found.is_dir():
                shutil.copytree(found, seed_dir(tmp, method, seed))
    info = json.loads((tmp / "run.json").read_text(encoding="utf-8"))
    info["merged_from"] = [
        {
            "run_dir": str(s.path.resolve()),
            "created": s.info.get("created"),
            "provenance": s.info.get("provenance"),
        }
        for s in sources
    ]
    write_json_atomic(tmp / "run.json", info)


def merge_runs(inputs: Sequence[Path], out: Path) -> ExperimentConfig:
    """Merge the run directories ``inputs`` into the new run directory ``out``.

    Args:
        inputs: Two or more run directories of one experiment.
        out: Where the merged run goes; must not exist, or be an empty directory.

    Returns:
        The merged run's config. ``summary.json`` is written; the report is the caller's.

    Raises:
        ConfigError: the runs are not of one experiment (the field is named).
        RunDirError: too few inputs, an input is not a finished-or-stopped run directory,
            a (method, seed) pair is in two inputs, or ``out`` is taken.
    """
    from geofl.report import write_summary

    out = Path(out)
    if len(inputs) < 2:
        raise RunDirError("merge needs two or more run directories")
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise RunDirError(f"{out} already exists; choose a new --out for the merged run")
    sources = [read_source(p) for p in inputs]
    if len({s.path.resolve() for s in sources}) < len(sources):
        raise RunDirError("a run directory is given twice; merge each run once")
    cfg = config_from_raw(merged_config(sources))
    task = _task(sources)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.merge-", dir=out.parent))
    try:
        with _locked(sources):
            _write(tmp, sources, cfg, task)
        write_summary(tmp)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cfg
