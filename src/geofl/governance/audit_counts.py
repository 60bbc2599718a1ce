"""Audit of how far a governed run got, as its files state it, against the chain (000 §4.7).

The per-round checks compare what the files say about each round with the chain's records
of that round. A *consistent rollback* (the last rounds dropped from the chain log and its
head, ``rounds.jsonl``, ``governance.jsonl`` and ``checkpoint.pt`` alike) leaves a valid
prefix of the chain, which is what a run killed earlier leaves, and passes them all. The
files that say how far the run got expose it:

* ``final.json``, written once when the run ends: ``rounds`` is the planned count
  (``config.yaml``'s ``federation.rounds``), ``early_stopping.stopped_at`` the round an
  early stop (which ``config.yaml`` must set) ended the run at, ``communication.rounds``
  the rounds completed: ``stopped_at`` of them after an early stop, else all planned
  ones. The chain must commit exactly rounds 1 to that count, and the round
  ``target.round`` names.
* ``summary.json``: a seed it lists as done must have its ``final.json`` (deleting it
  would make a rolled-back run look killed); the round it names for the seed reaching the
  target must be committed.
* ``config.yaml``, whose planned count the chain vouches for (it must match the committed
  rule document, :mod:`geofl.governance.audit_files`): a run without ``final.json``
  (killed, or still running) may have committed fewer rounds than planned, never more.

What no file of the directory can expose (a rollback that also deletes ``final.json`` and
``summary.json``, or a chain rebuilt whole by someone holding the directory) takes a head
anchored elsewhere (:mod:`geofl.governance.audit_head`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from geofl.governance.audit_chain import ChainRecords, Finding, LedgerRun
from geofl.governance.audit_read import CONFIG_FILE, FINAL_FILE, SUMMARY_FILE, _read, _why

__all__ = ["audit_counts"]


@dataclass(frozen=True)
class _Plan:
    """What ``config.yaml`` says about the run's length.

    Attributes:
        rounds: ``federation.rounds`` (``None`` if it is not a count).
        early_stopping: Whether ``eval.early_stopping`` is set.
    """

    rounds: int | None
    early_stopping: bool


def _get(doc: Any, *path: str) -> Any:
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def _count(value: Any) -> int | None:
    """``value`` if it is a round count (a non-negative int, not a bool)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _plan(run_dir: Path) -> _Plan | None:
    """``config.yaml``'s plan; ``None`` if missing or damaged (the rule check says so)."""
    raw = _read(run_dir / CONFIG_FILE)
    try:
        cfg = yaml.safe_load(raw.decode("utf-8")) if raw is not None else None
    except (ValueError, yaml.YAMLError):
        return None
    if not isinstance(cfg, dict):
        return None
    early = _get(cfg, "eval", "early_stopping") is not None
    return _Plan(_count(_get(cfg, "federation", "rounds")), early)


def _committed(chain: ChainRecords) -> tuple[int, int]:
    """How many rounds the chain commits, and the last of them (0 if none)."""
    last = chain.last_round
    return len(chain.aggregations), 0 if last is None else last.round_id


def _against_chain(completed: int, how: str, chain: ChainRecords) -> Iterator[Finding]:
    """The chain must commit rounds 1 to ``completed``, no more, no fewer."""
    n, last = _committed(chain)
    if n == completed and last == completed:
        return
    if last < completed:
        state = "rolled back or truncated"
    elif last > completed:
        state = "rounds were added after the run ended"
    else:
        state = "rounds are missing in between"
    what = (
        f"the run completed {completed} rounds ({how}), the chain commits {n} (last: round {last})"
    )
    yield Finding(FINAL_FILE, f"{what}: {state}")


def _stop_round(
    final: dict[str, Any], planned: int, plan: _Plan | None
) -> tuple[int | None, list[Finding]]:
    """The round an early stop ended the run at by ``final.json`` (``None``: no early
    stop), and what is wrong with it."""
    stopped = _get(final, "early_stopping", "stopped_at")
    if stopped is None:
        return None, []
    if _count(stopped) is None or not 1 <= stopped <= planned:
        what = f"early_stopping.stopped_at {stopped!r} is not one of the {planned} planned rounds"
        return None, [Finding(FINAL_FILE, what)]
    if plan is not None and not plan.early_stopping:
        what = (
            f"says an early stop ended the run at round {stopped}, but {CONFIG_FILE} sets no "
            "eval.early_stopping"
        )
        return stopped, [Finding(FINAL_FILE, what)]
    return stopped, []


def _planned(final: dict[str, Any], plan: _Plan | None) -> tuple[int | None, list[Finding]]:
    """The planned count (``config.yaml``'s, else ``final.json``'s), and whether
    ``final.json`` states the same."""
    stated = final.get("rounds")
    planned = plan.rounds if plan is not None and plan.rounds is not None else _count(stated)
    if _count(stated) is None:
        return planned, [Finding(FINAL_FILE, f"rounds {stated!r} is not a round count")]
    if stated != planned:
        return planned, [Finding(FINAL_FILE, f"plans {stated} rounds, {CONFIG_FILE} {planned}")]
    return planned, []


def _completed(final: dict[str, Any], ended: int, how: str) -> tuple[int, list[Finding]]:
    """The rounds ``final.json`` says were completed (``communication.rounds``; older
    files have none: ``ended``), and whether that is where the run ended."""
    comm = _get(final, "communication", "rounds")
    if comm is None or comm == ended:
        return ended, []
    what = f"communication.rounds {comm!r} differs from the {ended} rounds the run ran ({how})"
    completed = _count(comm)
    return ended if completed is None else completed, [Finding(FINAL_FILE, what)]


def _check_final(
    final: dict[str, Any], plan: _Plan | None, chain: ChainRecords
) -> Iterator[Finding]:
    """``final.json``'s planned, stopping and completed counts, and its target round.

    Each count is checked against the one it derives from, and the chain against the
    completed count, so that one edited number is one finding.
    """
    planned, found = _planned(final, plan)
    yield from found
    if planned is None:
        return
    stopped, found = _stop_round(final, planned, plan)
    yield from found
    ended = planned if stopped is None else stopped
    how = f"{planned} planned, " + (
        "no early stop" if stopped is None else f"stopped early at round {stopped}"
    )
    completed, found = _completed(final, ended, how)
    yield from found
    yield from _against_chain(completed, how, chain)
    target = _count(_get(final, "target", "round"))
    if target is not None and target not in chain.by_round:
        what = f"target reached at round {target}, which is not committed on chain"
        yield Finding(FINAL_FILE, what)


def _load_json(raw: bytes) -> tuple[Any, str | None]:
    """A JSON document, or ``None`` and why it cannot be read."""
    try:
        return json.loads(raw), None
    except ValueError as err:  # UnicodeDecodeError is one
        return None, _why(err)


def _check_summary(
    run: LedgerRun, raw: bytes, has_final: bool, plan: _Plan | None, chain: ChainRecords
) -> Iterator[Finding]:
    """``summary.json``'s word on whether the run finished, and its target round."""
    doc, why = _load_json(raw)
    if why is not None:
        yield Finding(SUMMARY_FILE, f"damaged ({why}); whether {run.name} finished is unknown")
        return
    entry = _get(doc, "methods", run.method)
    done = _get(entry, "seeds_done")
    if not isinstance(done, list):
        yield Finding(SUMMARY_FILE, f"no list of finished seeds for method {run.method}")
        return
    if run.seed in done and not has_final:
        n, _ = _committed(chain)
        planned = "?" if plan is None or plan.rounds is None else plan.rounds
        yield Finding(
            SUMMARY_FILE,
            f"lists {run.name} as done, but {FINAL_FILE} is missing; the chain commits {n} "
            f"of the {planned} rounds {CONFIG_FILE} plans",
        )
    target = _count(_get(entry, "target", "per_seed", str(run.seed)))
    if target is not None and target not in chain.by_round:
        what = f"{run.name} reached the target at round {target}, which is not committed on chain"
        yield Finding(SUMMARY_FILE, what)


def _check_unfinished(plan: _Plan | None, chain: ChainRecords) -> Iterator[Finding]:
    """A run without ``final.json`` may have committed fewer rounds than planned, not more."""
    n, last = _committed(chain)
    if plan is not None and plan.rounds is not None and last > plan.rounds:
        what = f"plans {plan.rounds} rounds, the chain commits {n} (last: round {last})"
        yield Finding(CONFIG_FILE, what)


def audit_counts(run: LedgerRun, chain: ChainRecords, run_dir: Path) -> list[Finding]:
    """The round counts ``final.json``, ``summary.json`` and ``config.yaml`` state,
    against the rounds the chain commits.

    A ``final.json`` that is not JSON (or has no ``best_val``) is reported by
    :func:`~geofl.governance.audit_files.audit_files`, not again here.

    Raises:
        RunDirError: if one of them exists but cannot be read.
    """
    plan = _plan(Path(run_dir))
    raw_final = _read(run.seed_dir / FINAL_FILE)
    out: list[Finding] = []
    if raw_final is None:
        out += _check_unfinished(plan, chain)
    else:
        final, _ = _load_json(raw_final)
        if isinstance(final, dict):
            out += _check_final(final, plan, chain)
    raw_summary = _read(Path(run_dir) / SUMMARY_FILE)
    if raw_summary is not None:
        out += _check_summary(run, raw_summary, raw_final is not None, plan, chain)
    return out
