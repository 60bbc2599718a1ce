"""Durable file I/O: the one atomic-write helper, JSON and JSON Lines.

Every file geofl writes goes through :func:`atomic_write`: the bytes go to a temporary file
in the same directory (unique per process), are flushed and ``fsync``-ed when asked, then
``os.replace`` puts them in place. Readers never see a half-written file, and a failure
(a full disk, an interrupt) removes the temporary file and leaves the old one untouched.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = [
    "append_jsonl",
    "append_text_line",
    "atomic_write",
    "dumps_line",
    "read_jsonl",
    "to_jsonable",
    "write_json_atomic",
    "write_text_atomic",
]


def atomic_write(path: Path, write: Callable[[IO[bytes]], object], *, sync: bool = True) -> Path:
    """Create or replace ``path`` with what ``write(fh)`` writes to a binary file handle.

    Args:
        path: Destination; its parent directory is created if needed.
        write: Called once with an open binary file handle.
        sync: ``fsync`` the data before the rename (durable across a power loss).

    Returns:
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str, *, sync: bool = False) -> Path:
    """Create or replace ``path`` with UTF-8 ``text`` (see :func:`atomic_write`)."""
    data = text.encode("utf-8")
    return atomic_write(path, lambda fh: fh.write(data), sync=sync)


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


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write ``data`` as indented strict JSON (NaN/Inf as null) via :func:`atomic_write`."""
    text = json.dumps(to_jsonable(data), indent=2, allow_nan=False) + "\n"
    return write_text_atomic(path, text)


def dumps_line(record: Any) -> str:
    """One strict-JSON line (no trailing newline) for a JSON Lines file."""
    return json.dumps(to_jsonable(record), allow_nan=False)


def append_jsonl(path: Path, record: Any) -> None:
    """Append one JSON line and ``fsync`` it."""
    append_text_line(path, dumps_line(record))


def append_text_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline to ``path`` and ``fsync`` it."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
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
