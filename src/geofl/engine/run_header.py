"""A run directory's header: ``config.yaml`` and ``run.json`` (with provenance), and the
checks that refuse to overwrite a run, resume nothing, or resume another config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from geofl import __version__
from geofl.config.load import dump_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.provenance import Provenance
from geofl.errors import RunDirError
from geofl.io import write_json_atomic, write_text_atomic
from geofl.records import TaskInfo
from geofl.rundir import LOCK_FILE

__all__ = ["check_out_dir", "resume_identity", "write_header"]


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


def check_out_dir(out_dir: Path, resolved: dict[str, Any], resume: bool) -> None:
    """Refuse to overwrite a run, to resume nothing, or to resume another config."""
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
    stored = out_dir / "config.yaml"
    try:
        same = resume_identity(yaml.safe_load(stored.read_text(encoding="utf-8"))) == (
            resume_identity(resolved)
        )
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise RunDirError(
            f"{stored} cannot be read ({type(err).__name__}); the run directory is damaged, "
            "start a new run with another --out"
        ) from None
    if not same:
        raise RunDirError(
            f"{stored} differs from the requested config; resume with the same config "
            f"(geofl run {out_dir}/config.yaml --out {out_dir} --resume)"
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
            **kept,
        },
    )
