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

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["append_jsonl", "read_jsonl", "seed_dir", "to_jsonable", "write_json_atomic"]


def seed_dir(run_dir: Path, method: str, seed: int) -> Path:
    """``RUN_DIR/methods/<method>/seed-<seed>``."""
    return Path(run_dir) / "methods" / method / f"seed-{seed}"


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/torch scalars and arrays to JSON types; NaN/Inf become null."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return to_jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON via a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(to_jsonable(data), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def append_jsonl(path: Path, record: Any) -> None:
    """Append one JSON line and flush it to disk."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(to_jsonable(record), allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All complete records of a JSONL file (a torn last line is ignored)."""
    if not Path(path).exists():
        return []
    out: list[dict[str, Any]] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out
