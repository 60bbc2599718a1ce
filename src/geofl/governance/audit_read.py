"""Reading a governed run directory's files for the audit, and wording what differs.

The audit's file names; the bytes of a file (``None`` when it does not exist, an error when
it cannot be read); the JSONL files parsed line by line into good values and damaged lines;
which damaged lines stand where the chain's rounds are missing; and the short forms of
hashes and errors the findings quote. Package-internal: the checks are in
:mod:`geofl.governance.audit_rounds`, :mod:`~geofl.governance.audit_log` and
:mod:`~geofl.governance.audit_files`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geofl.errors import RunDirError
from geofl.records import RoundRecord

ROUNDS_FILE = "rounds.jsonl"
CHECKPOINT_FILE = "checkpoint.pt"
BEST_FILE = "best.pt"
FINAL_FILE = "final.json"
#: In the run directory, as is SUMMARY_FILE (every other file is in the seed directory).
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"


def _read(path: Path) -> bytes | None:
    """The bytes of ``path``; ``None`` if it does not exist.

    Raises:
        RunDirError: if it exists but cannot be read.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RunDirError(f"{path}: cannot be read ({err.strerror or err})") from None


def _lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def _why(err: Exception) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text[:80] + '…' if len(text) > 80 else text}"


def _short(h: str) -> str:
    return h[:10] + "…" if len(h) > 12 else h


def _hex(h: Any) -> str:
    """A log's hash as the chain writes it (``0x``, lower case)."""
    s = str(h).lower()
    return s if s.startswith("0x") else "0x" + s


@dataclass
class _Lines:
    """The parsed lines of a JSONL file: good values by line, damaged lines."""

    good: list[tuple[int, Any]] = field(default_factory=list)
    damaged: dict[int, str] = field(default_factory=dict)


def _read_rounds(data: bytes) -> _Lines:
    out = _Lines()
    for i, raw in enumerate(_lines(data), start=1):
        try:
            out.good.append((i, RoundRecord.from_json(json.loads(raw.decode("utf-8")))))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            out.damaged[i] = _why(err)
    return out


def _read_log(data: bytes) -> _Lines:
    out = _Lines()
    for i, raw in enumerate(_lines(data), start=1):
        try:
            entry = json.loads(raw.decode("utf-8"))
        except ValueError as err:
            out.damaged[i] = _why(err)
            continue
        ok = isinstance(entry, dict) and (
            entry.get("event") == "rule"
            or (isinstance(entry.get("round"), int) and not isinstance(entry["round"], bool))
        )
        if ok:
            out.good.append((i, entry))
        else:
            out.damaged[i] = "neither a rule entry nor a round entry"
    return out


def _align(
    present: Mapping[int, int], order: Sequence[int], damaged: Sequence[int]
) -> tuple[dict[int, int], list[int]]:
    """Which damaged lines stand where the chain's rounds are missing.

    Args:
        present: Line of each round the file holds.
        order: The chain's rounds in chain order.
        damaged: Damaged line numbers.

    Returns:
        (round each explained damaged line stands in for, missing rounds no damaged line
        explains).
    """
    pos = {r: i for i, r in enumerate(order)}
    known = sorted((pos[r], line) for r, line in present.items() if r in pos)
    gaps: dict[tuple[int, float], list[int]] = {}
    for r in order:
        if r in present:
            continue
        before = max((ln for p, ln in known if p < pos[r]), default=0)
        after = min((ln for p, ln in known if p > pos[r]), default=math.inf)
        gaps.setdefault((before, after), []).append(r)
    explained: dict[int, int] = {}
    unexplained: list[int] = []
    for (before, after), rounds in gaps.items():
        lines = [d for d in sorted(damaged) if before < d < after]
        explained.update(zip(lines, rounds, strict=False))
        unexplained += rounds[len(lines) :]
    return explained, sorted(unexplained, key=lambda r: pos[r])
