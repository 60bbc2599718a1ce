"""Audit of a governed run directory against its chain (000 §3.5.1 audit node, §4.7).

Everything here reads. The stored ledger is replayed read-only (which already checks every
block and transaction hash); the chain's events are then the reference every file of the
run directory is compared with:

* ``rounds.jsonl``: every round committed on chain has exactly one record, in the chain's
  order, and every record a commitment; model and update-set hashes match it.
* ``governance.jsonl``: the rule entry, and per round the aggregation commitment, the
  committee election and the permission proposals (their approvers and whether they took
  effect) match the chain's events, transaction hashes included; every event on chain has
  its entry and every entry its event; the permission levels each round reports are the
  ones the chain's permission changes produce.
* ``governance.rule.json`` and ``config.yaml`` match the committed rule.
* ``checkpoint.pt`` exists and holds the model committed for the last round;
  ``best.pt`` exists and holds the model committed for the best-validation round
  (``final.json``); a file holding another round's committed model is reported as swapped
  or stale.
* The round counts ``final.json``, ``summary.json`` and ``config.yaml`` state match the
  rounds committed, so that a run whose last rounds were dropped from all of the above
  alike (a consistent rollback) does not pass as a shorter run.
* Optionally, the chain ends at a head anchored elsewhere (``--expect-head``): the one
  check that holds against someone who rewrote the whole directory.

A difference is a :class:`Finding` naming the file (and line) and, where it concerns one,
the round. A file that exists but cannot be read at all (permissions, a directory in its
place) raises :class:`~geofl.errors.RunDirError` instead: that is no evidence either way.

This module holds the entry points; the parts live beside it, one concept each:

* :mod:`~geofl.governance.audit_chain`: the run and chain types (:class:`LedgerRun`,
  :class:`Finding`, :class:`ChainRecords`), finding and reopening a run's ledger.
* :mod:`~geofl.governance.audit_read`: the run directory's file names, reading and
  parsing its files, aligning damaged lines with missing rounds.
* :mod:`~geofl.governance.audit_rounds`: ``rounds.jsonl`` against the chain.
* :mod:`~geofl.governance.audit_log`: ``governance.jsonl`` against the chain.
* :mod:`~geofl.governance.audit_files`: the rule document, ``config.yaml`` and the model
  files against the chain.
* :mod:`~geofl.governance.audit_counts`: the round counts the files state against the
  chain.
* :mod:`~geofl.governance.audit_head`: the chain's head and the anchored-head check.

Every public name stays importable from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geofl.errors import GovernanceError, LedgerError
from geofl.governance.audit_chain import (
    ChainRecords,
    Finding,
    LedgerRun,
    find_ledgers,
    governance_log,
    open_readonly,
    read_chain,
)
from geofl.governance.audit_counts import audit_counts
from geofl.governance.audit_files import audit_files
from geofl.governance.audit_head import ChainHead, chain_head, check_head, parse_head
from geofl.governance.audit_log import _check_log
from geofl.governance.audit_read import BEST_FILE as BEST_FILE
from geofl.governance.audit_read import CHECKPOINT_FILE as CHECKPOINT_FILE
from geofl.governance.audit_read import CONFIG_FILE as CONFIG_FILE
from geofl.governance.audit_read import FINAL_FILE as FINAL_FILE
from geofl.governance.audit_read import ROUNDS_FILE, _read
from geofl.governance.audit_rounds import _check_rounds
from geofl.governance.ledger import Ledger
from geofl.governance.subscriber import LOG_FILE

__all__ = [
    "ChainHead",
    "ChainRecords",
    "Finding",
    "LedgerRun",
    "Verified",
    "audit_counts",
    "audit_files",
    "audit_records",
    "chain_head",
    "find_ledgers",
    "governance_log",
    "open_readonly",
    "parse_head",
    "read_chain",
    "verify_run",
]


@dataclass(frozen=True)
class Verified:
    """A governed run its chain vouches for.

    Attributes:
        run: ``method/seed-N``.
        rounds: The rounds committed on chain.
        head: The chain's head, to anchor elsewhere (``None``: the backend has none).
    """

    run: str
    rounds: int
    head: ChainHead | None

    def __str__(self) -> str:
        return f"{self.run} ({self.rounds} rounds)"


def audit_records(run: LedgerRun, chain: ChainRecords) -> list[Finding]:
    """``rounds.jsonl`` and ``governance.jsonl`` against the chain's events.

    Raises:
        RunDirError: if either file exists but cannot be read.
    """
    sd = run.seed_dir
    rounds, log = _read(sd / ROUNDS_FILE), _read(sd / LOG_FILE)
    return [*_check_rounds(rounds, chain), *_check_log(log, chain)]


def _verify_one(
    run: LedgerRun, ledger: Ledger, run_dir: Path, expected: str | None
) -> list[Finding] | Verified:
    """Every check of one governed run (its ledger opened; closed here): its findings, or
    what it was verified as.

    Raises:
        RunDirError: if a file exists but cannot be read.
    """
    try:
        chain = read_chain(ledger)
        head = chain_head(ledger)
        found = [] if expected is None else check_head(ledger, head, expected)
    finally:
        ledger.close()
    found = [
        *audit_records(run, chain),
        *audit_files(run, chain, run_dir),
        *audit_counts(run, chain, run_dir),
        *found,
    ]
    return found or Verified(run.name, len(chain.aggregations), head)


def verify_run(
    run_dir: Path,
    method: str | None = None,
    seed: int | None = None,
    expect_head: str | None = None,
) -> tuple[list[Verified], list[str]]:
    """Verify every governed run; returns (what was verified, problems found).

    Args:
        run_dir: The run directory.
        method: Only this method.
        seed: Only this seed.
        expect_head: The hash of the block the chain must end at (anchored elsewhere);
            the selection must then be one governed run.

    Raises:
        GovernanceError: if ``run_dir`` holds no (matching) governed run, or
            ``expect_head`` is not a block hash or several runs match.
        RunDirError: if a file exists but cannot be read.
    """
    expected = None if expect_head is None else parse_head(expect_head)
    runs = find_ledgers(run_dir, method, seed)
    if expected is not None and len(runs) > 1:
        names = ", ".join(r.name for r in runs)
        raise GovernanceError(
            f"--expect-head: {len(runs)} governed runs match ({names}); an anchored head "
            "belongs to one: pick it with --method and --seed"
        )
    verified: list[Verified] = []
    problems: list[str] = []
    for run in runs:
        try:
            ledger = open_readonly(run)
        except LedgerError as err:
            problems.append(f"{run.name}: {err}")
            continue
        result = _verify_one(run, ledger, Path(run_dir), expected)
        if isinstance(result, Verified):
            verified.append(result)
        else:
            problems += [f"{run.name}: {f}" for f in result]
    return verified, problems
