"""The per-round checkpoint and what resume may trust.

After every round the run appends the round's record to ``rounds.jsonl`` and then writes
``checkpoint.pt`` atomically: the global model, best-so-far, the strategy's state, the
client-state store's state (algorithm tensors, staged rows and every client's privacy
ledger), wall time, and the exact JSON line of every round record so far. Resume trusts
only the checkpoint:

* ``rounds.jsonl`` must reproduce the checkpoint's lines 1..r byte for byte; a deleted,
  edited or garbled line is reported with file and line, and the run refuses to resume
  unless asked to rebuild the log from the checkpoint (which restores every record);
* lines after round r belong to a round that was not checkpointed (a kill between the
  append and the checkpoint) and are dropped — that round reruns identically;
* privacy ledgers come from the checkpoint, never from logs;
* a seed directory without ``checkpoint.pt`` starts over only when at most round 1 was
  logged (:func:`require_checkpoint`).
"""

from __future__ import annotations

import logging
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from geofl.errors import RunDirError
from geofl.io import atomic_write, write_text_atomic

__all__ = [
    "CHECKPOINT_FORMAT",
    "load_checkpoint",
    "require_checkpoint",
    "restore_round_log",
    "save_checkpoint",
]

log = logging.getLogger("geofl")

#: Layout version (1: params/best/wall; 2: + strategy and client state; 3: + round lines).
CHECKPOINT_FORMAT = 3


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (``fsync``-ed before the rename)."""
    atomic_write(path, lambda fh: torch.save({"format": CHECKPOINT_FORMAT, **state}, fh))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint; a damaged one is a one-line :class:`RunDirError`.

    Raises:
        RunDirError: naming the file when it is empty, truncated or not a checkpoint.
    """
    hint = "delete that seed directory to rerun it, or start a new run with another --out"
    try:
        ckpt = torch.load(path, weights_only=False)
    except (
        OSError,
        EOFError,
        RuntimeError,
        ValueError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
    ) as err:
        raise RunDirError(f"{path} is damaged ({type(err).__name__}); {hint}") from None
    if not isinstance(ckpt, dict) or not {"round", "params", "best"} <= set(ckpt):
        raise RunDirError(f"{path} is not a geofl checkpoint; {hint}")
    return ckpt


def require_checkpoint(seed_dir: Path) -> int:
    """How many rounds ``seed_dir``'s ``rounds.jsonl`` logs, for a seed resumed without
    ``checkpoint.pt``; refuses two or more.

    At most one logged round is a kill before the first checkpoint (round 1 reruns
    identically, as any round not checkpointed does). Two or more mean the checkpoint
    existed and was deleted: rerunning the seed silently would hide that.

    Raises:
        RunDirError: ``rounds.jsonl`` holds two or more rounds.
    """
    rounds = Path(seed_dir) / "rounds.jsonl"
    try:
        logged = len(rounds.read_bytes().splitlines())
    except FileNotFoundError:
        return 0
    if logged >= 2:
        raise RunDirError(
            f"{Path(seed_dir) / 'checkpoint.pt'} is missing but {rounds} holds {logged} "
            f"rounds: this seed cannot be resumed; restore checkpoint.pt, or delete "
            f"{seed_dir} to rerun the seed from round 1"
        )
    return logged


def restore_round_log(
    path: Path, lines: list[str], *, checkpoint: Path, rebuild: bool = False
) -> None:
    """Make ``rounds.jsonl`` hold exactly the checkpoint's record ``lines``.

    Args:
        path: ``rounds.jsonl``.
        lines: The JSON lines the checkpoint holds for rounds 1..r.
        checkpoint: The checkpoint's path (for messages).
        rebuild: Rewrite a damaged log from the checkpoint instead of refusing.

    Raises:
        RunDirError: naming ``path:line`` when a line within rounds 1..r is missing or
            differs, unless ``rebuild``.
    """
    try:
        have = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        have = []
    for i, want in enumerate(lines):
        got = have[i] if i < len(have) else None
        if got == want:
            continue
        what = "is missing" if got is None else "differs from the checkpoint (edited or garbled)"
        if not rebuild:
            raise RunDirError(
                f"{path}:{i + 1}: round {i + 1}'s record {what}; restore the file, or resume "
                f"with --rebuild-log to rewrite the log from {checkpoint}"
            )
        log.warning("%s:%d: %s; rewritten from %s", path, i + 1, what, checkpoint)
        break
    if len(have) > len(lines):
        log.info("%s: dropping %d line(s) of an unfinished round", path, len(have) - len(lines))
    if have[: len(lines)] != lines or len(have) != len(lines):
        write_text_atomic(path, "".join(f"{line}\n" for line in lines), sync=True)
