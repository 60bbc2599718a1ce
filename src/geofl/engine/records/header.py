"""A run directory's header: ``config.yaml`` and ``run.json`` (with provenance), and the
checks that refuse to overwrite a run, resume nothing, or resume another config.

``run.json`` records under ``inputs`` what a resume must find unchanged (:func:`inputs`):
the sha256 of the config's resume identity and of every input file the config names (a
``Path`` field, e.g. ``hierarchy.leo.tle_file``). A resume recomputes them from the run
directory's ``config.yaml`` and the files, and refuses a mismatch in one line naming the
file: a hand-edited ``config.yaml`` or a swapped TLE file would otherwise continue the run
with other inputs than its first rounds had. Dataset files are not hashed (gigabytes);
their decode cache keys on a fingerprint of the source instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from pydantic import BaseModel

from geofl import __version__
from geofl.config.load import dump_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.checkpoint import require_checkpoint
from geofl.engine.records.provenance import Provenance
from geofl.errors import RunDirError
from geofl.io import write_json_atomic, write_text_atomic
from geofl.records import TaskInfo
from geofl.rundir import LOCK_FILE

__all__ = [
    "check_out_dir",
    "config_digest",
    "input_files",
    "inputs",
    "resume_identity",
    "write_header",
]

log = logging.getLogger("geofl")


def resume_identity(cfg: Any) -> Any:
    """What must match to resume: the config less ``data.cache``, ``federation.workers``
    (how the decode cache is held and how many processes train change no result; run
    directories from before the fields lack them) and ``tracking`` (exporting to a
    tracker observes only)."""
    if not isinstance(cfg, dict):
        return cfg
    out = {k: v for k, v in cfg.items() if k != "tracking"}
    for section, key in (("data", "cache"), ("federation", "workers")):
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k != key}
    return out


def config_digest(resolved: Any) -> str:
    """sha256 of the config's :func:`resume_identity` as canonical JSON (sorted keys).

    What a resume must not change, and nothing else: a reformatted ``config.yaml`` or a
    resume with another ``tracking`` or ``federation.workers`` hashes the same.
    """
    text = json.dumps(
        resume_identity(resolved), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def input_files(cfg: BaseModel, prefix: str = "") -> Iterator[tuple[str, Path]]:
    """Every ``Path`` value of the config that names an existing file, with its dotted
    field (``methods.0.hierarchy.leo.tle_file``). Directories (``data.cache_dir``) are
    not inputs."""
    for name in type(cfg).model_fields:
        yield from _files_in(getattr(cfg, name), f"{prefix}{name}")


def _files_in(value: Any, where: str) -> Iterator[tuple[str, Path]]:
    if isinstance(value, BaseModel):
        yield from input_files(value, f"{where}.")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _files_in(item, f"{where}.{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _files_in(item, f"{where}.{key}")
    elif isinstance(value, Path) and value.is_file():
        yield where, value


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def inputs(cfg: ExperimentConfig) -> dict[str, Any]:
    """What ``run.json`` records under ``inputs``: ``config_sha256``
    (:func:`config_digest`) and ``files``, ``{field: {"path", "sha256"}}`` for every
    :func:`input_files` entry."""
    return {
        "config_sha256": config_digest(cfg.model_dump(mode="json")),
        "files": {
            field: {"path": str(path.resolve()), "sha256": _sha256_file(path)}
            for field, path in input_files(cfg)
        },
    }


def check_out_dir(out_dir: Path, cfg: ExperimentConfig, resume: bool) -> None:
    """Refuse to overwrite a run, to resume nothing, to resume a run whose ``run.json`` is
    gone, whose ``config.yaml`` or input files changed or whose seed lost its checkpoint
    (:func:`~geofl.engine.checkpoint.require_checkpoint`), or to resume another config."""
    content = [p for p in out_dir.iterdir() if p.name != LOCK_FILE] if out_dir.is_dir() else []
    if not content:
        if resume:
            raise RunDirError(
                f"{out_dir} holds no run to resume; check --out, or drop --resume to start "
                "a new run there"
            )
        return
    if not resume:
        raise RunDirError(
            f"{out_dir} already holds a run; pass --resume to continue it or choose another --out"
        )
    info = _read_run_json(out_dir / "run.json")
    stored = out_dir / "config.yaml"
    try:
        stored_cfg = yaml.safe_load(stored.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise RunDirError(
            f"{stored} cannot be read ({type(err).__name__}); the run directory is damaged, "
            "start a new run with another --out"
        ) from None
    _check_inputs(out_dir, info, stored_cfg, cfg)
    for sdir in sorted((out_dir / "methods").glob("*/seed-*")):  # before anything is written
        if not (sdir / "final.json").exists() and not (sdir / "checkpoint.pt").exists():
            require_checkpoint(sdir)
    if resume_identity(stored_cfg) != resume_identity(cfg.model_dump(mode="json")):
        raise RunDirError(
            f"{stored} differs from the requested config; resume with the same config "
            f"(geofl run {out_dir}/config.yaml --out {out_dir} --resume)"
        )


def _read_run_json(path: Path) -> dict[str, Any]:
    """``run.json`` of a run to resume; missing or damaged, one line that refuses."""
    if not path.is_file():
        raise RunDirError(
            f"{path} is missing, so the run cannot be resumed (it records how the run "
            "started and the hashes of its inputs); restore it, or start a new run with "
            "another --out"
        )
    hint = "restore it, or start a new run with another --out"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path} is damaged ({type(err).__name__}); {hint}") from None
    if not isinstance(info, dict):
        raise RunDirError(f"{path} is damaged (not a JSON object); {hint}")
    return info


def _check_inputs(out_dir: Path, info: dict[str, Any], stored: Any, cfg: ExperimentConfig) -> None:
    """The stored ``config.yaml`` and the config's input files hash as ``run.json``
    recorded at the start (a run directory from before the hashes: a warning)."""
    run_json, recorded = out_dir / "run.json", info.get("inputs")
    if not isinstance(recorded, dict):
        log.warning(
            "%s records no input hashes (written before geofl recorded them); config.yaml "
            "and input files are not checked on this resume",
            run_json,
        )
        return
    try:
        digest: str | None = config_digest(stored)
    except (TypeError, ValueError):  # YAML values JSON has no form for: edited by hand
        digest = None
    if digest is None or recorded.get("config_sha256") != digest:
        raise RunDirError(
            f"{out_dir / 'config.yaml'} was edited after the run started (its sha256 differs "
            f"from the one in {run_json}); restore it, or start a new run with another --out"
        )
    files = recorded.get("files") or {}
    if not isinstance(files, dict):
        raise RunDirError(
            f"{run_json} is damaged (inputs.files is not a mapping); restore it, or start a "
            "new run with another --out"
        )
    now = dict(input_files(cfg))
    for field, entry in files.items():
        known = entry if isinstance(entry, dict) else {}
        path = now.get(field)
        if path is None or _sha256_file(path) != known.get("sha256"):
            shown = path if path is not None else known.get("path", "the file")
            raise RunDirError(
                f"{field}: {shown} changed since the run started (its sha256 differs from "
                f"the one in {run_json}); restore the file the run started with, or start a "
                "new run with another --out"
            )


def write_header(
    cfg: ExperimentConfig,
    out_dir: Path,
    task: TaskInfo,
    provenance: Provenance,
) -> None:
    """Write ``config.yaml`` and ``run.json``.

    A fresh run records ``provenance``; a resumed one (``run.json`` already there) keeps
    ``created`` and the original ``provenance`` and appends ``provenance`` to ``resumed``.
    Either records :func:`inputs` (on a resume :func:`check_out_dir` found them unchanged).
    """
    write_text_atomic(out_dir / "config.yaml", dump_config(cfg))
    run_json = out_dir / "run.json"
    now = provenance.to_json()
    kept: dict[str, Any] = {"created": now["at"], "provenance": now}
    if run_json.exists():
        try:
            old = json.loads(run_json.read_text(encoding="utf-8"))
            kept = {
                "created": str(old["created"]),
                "provenance": old.get("provenance"),
                "resumed": [*old.get("resumed", []), now],
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise RunDirError(
                f"{run_json} is damaged ({type(err).__name__}); restore it, or start a new "
                "run with another --out"
            ) from None
    write_json_atomic(
        run_json,
        {
            "name": cfg.name,
            "description": cfg.description,
            "methods": [m.name for m in cfg.methods],
            "labels": {m.name: m.label or m.name for m in cfg.methods},
            "seeds": cfg.seeds,
            "geofl_version": __version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "paper": {k: v.model_dump() for k, v in cfg.paper.items()},
            "figures": [f.model_dump() for f in cfg.figures],
            "task": task.to_json(),
            "inputs": inputs(cfg),
            **kept,
        },
    )
