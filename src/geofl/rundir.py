"""Run-directory layout and atomic JSON I/O.

::

    RUN_DIR/
      config.yaml                      resolved experiment config
      run.json                         name, methods, seeds, version, paper values,
                                       provenance, input hashes (a resume checks them)
      tracking.json                    where the tracker exports went (tracking on)
      summary.json                     mean ± std over seeds (geofl.report.summary)
      methods/<method>/seed-<seed>/
          rounds.jsonl                 one record per evaluated round
          partition.json               client label histograms
          checkpoint.pt                state after the last completed round (resume)
          best.pt                      global model at the best validation accuracy
          final.json                   final and best-validation metrics
      report/                          index.html and figures
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from geofl.errors import RunDirError, RunDirLockedError

__all__ = ["LOCK_FILE", "lock_run_dir", "seed_dir"]

#: The run directory's lock file (holds the owner's PID while locked).
LOCK_FILE = ".lock"


def seed_dir(run_dir: Path, method: str, seed: int) -> Path:
    """``RUN_DIR/methods/<method>/seed-<seed>``."""
    return Path(run_dir) / "methods" / method / f"seed-{seed}"


@contextlib.contextmanager
def lock_run_dir(run_dir: Path) -> Iterator[Path]:
    """Hold an exclusive lock on ``run_dir`` for the block (one run per directory).

    The lock is an ``flock`` on ``RUN_DIR/.lock``, so the kernel releases it when its process
    dies however it dies: a lock file left by a killed process is stale and is simply taken
    over. The file records the holder's PID for the error message.

    Raises:
        RunDirLockedError: if another live process holds the lock.
    """
    run_dir = Path(run_dir)
    path = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileExistsError, NotADirectoryError):
        raise RunDirError(f"{run_dir} is a file, not a directory; choose another --out") from None
    except OSError as err:
        raise RunDirError(
            f"{run_dir} cannot be written ({err.strerror}); choose a writable --out"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            raise RunDirLockedError(
                f"{run_dir} is in use by process {holder}; wait for that run to finish or "
                "stop it, or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the flock
