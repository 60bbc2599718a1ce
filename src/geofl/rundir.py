"""Run-directory layout and atomic JSON I/O.

::

    RUN_DIR/
      config.yaml                      resolved experiment config
      run.json                         name, methods, seeds, version, paper values
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

from pathlib import Path

__all__ = ["seed_dir"]


def seed_dir(run_dir: Path, method: str, seed: int) -> Path:
    """``RUN_DIR/methods/<method>/seed-<seed>``."""
    return Path(run_dir) / "methods" / method / f"seed-{seed}"
