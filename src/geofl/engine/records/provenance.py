"""Where a run came from: the command line and the software and machine that ran it.

:class:`Provenance` is what the caller knows (the command line, ``--set``, ``--seeds``);
:func:`environment` is what the process finds out itself (versions, git commit, platform,
CPU count). Both land in ``run.json`` (``provenance`` for the start, one ``resumed`` entry
per resume); neither is part of a run's resume identity, so a resumed run may come from
another command line or another machine.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl import __version__

__all__ = ["Provenance", "environment", "git_state"]

#: Seconds each git call may take before the commit is recorded as unknown.
GIT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Provenance:
    """What the caller of :func:`~geofl.engine.experiment.run_experiment` knows of the run.

    Attributes:
        argv: The command line as given (``sys.argv``); ``None`` for a library call.
        overrides: The ``--set path=value`` assignments, in order.
        seeds: The ``--seeds`` given, or ``None`` when the config's seeds were used.
    """

    argv: tuple[str, ...] | None = None
    overrides: tuple[str, ...] = ()
    seeds: tuple[int, ...] | None = None

    @classmethod
    def from_cli(cls, overrides: list[str] | None, seeds: list[int] | None) -> Provenance:
        """The provenance of this process's command line (``sys.argv``).

        Args:
            overrides: The ``--set`` assignments (``None``: none).
            seeds: The parsed ``--seeds`` (``None``: not given).

        Returns:
            The record, with ``argv`` copied from :data:`sys.argv`.
        """
        return cls(
            argv=tuple(sys.argv),
            overrides=tuple(overrides or ()),
            seeds=None if seeds is None else tuple(seeds),
        )

    def to_json(self) -> dict[str, Any]:
        """The record plus :func:`environment` and the time, as ``run.json`` holds it."""
        return {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": None if self.argv is None else list(self.argv),
            "overrides": list(self.overrides),
            "seeds": None if self.seeds is None else list(self.seeds),
            **environment(),
        }


def environment() -> dict[str, Any]:
    """Versions, git state, platform and CPU count of this process.

    Returns:
        ``geofl_version``, ``git`` (see :func:`git_state`), ``python``, ``torch``, ``numpy``,
        ``platform`` and ``cpu_count`` (``None`` when the OS does not say).
    """
    return {
        "geofl_version": __version__,
        "git": git_state(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


def git_state(package_dir: Path | None = None) -> dict[str, Any] | None:
    """The commit geofl is imported from, when that is a git checkout.

    A checkout counts only when the package lies inside the repository's work tree and not
    under ``site-packages`` (an installed geofl inside someone else's repository is not
    theirs). ``dirty`` means tracked files differ from the commit (untracked files do not
    count).

    Args:
        package_dir: The package directory (default: this ``geofl``'s).

    Returns:
        ``{"commit": sha, "dirty": bool}``, or ``None`` when git is missing, slow, fails or
        the package is not in a checkout — never an error.
    """
    here = (package_dir or Path(__file__).resolve().parent.parent).resolve()
    if "site-packages" in here.parts or "dist-packages" in here.parts:
        return None
    top = _git(here, "rev-parse", "--show-toplevel")
    commit = _git(here, "rev-parse", "HEAD")
    if top is None or commit is None or not here.is_relative_to(Path(top).resolve()):
        return None
    status = _git(here, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _git(cwd: Path, *args: str) -> str | None:
    """``git ARGS`` in ``cwd``: stripped stdout, or ``None`` on any failure or timeout."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
