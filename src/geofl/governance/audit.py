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

Every public name stays importable from here.
"""

from __future__ import annotations

from pathlib import Path

from geofl.errors import LedgerError
from geofl.governance.audit_chain import (
    ChainRecords,
    Finding,
    LedgerRun,
    find_ledgers,
    governance_log,
    open_readonly,
    read_chain,
)
from geofl.governance.audit_files import audit_files
from geofl.governance.audit_log import _check_log
from geofl.governance.audit_read import BEST_FILE as BEST_FILE
from geofl.governance.audit_read import CHECKPOINT_FILE as CHECKPOINT_FILE
from geofl.governance.audit_read import CONFIG_FILE as CONFIG_FILE
from geofl.governance.audit_read import FINAL_FILE as FINAL_FILE
from geofl.governance.audit_read import ROUNDS_FILE, _read
from geofl.governance.audit_rounds import _check_rounds
from geofl.governance.subscriber import LOG_FILE

__all__ = [
    "ChainRecords",
    "Finding",
    "LedgerRun",
    "audit_files",
    "audit_records",
    "find_ledgers",
    "governance_log",
    "open_readonly",
    "read_chain",
    "verify_run",
]


def audit_records(run: LedgerRun, chain: ChainRecords) -> list[Finding]:
    """``rounds.jsonl`` and ``governance.jsonl`` against the chain's events.

    Raises:
        RunDirError: if either file exists but cannot be read.
    """
    sd = run.seed_dir
    rounds, log = _read(sd / ROUNDS_FILE), _read(sd / LOG_FILE)
    return [*_check_rounds(rounds, chain), *_check_log(log, chain)]


def verify_run(
    run_dir: Path, method: str | None = None, seed: int | None = None
) -> tuple[list[str], list[str]]:
    """Verify every governed run; returns (what was checked, problems found).

    Raises:
        GovernanceError: if ``run_dir`` holds no (matching) governed run.
        RunDirError: if a file exists but cannot be read.
    """
    checked: list[str] = []
    problems: list[str] = []
    for run in find_ledgers(run_dir, method, seed):
        try:
            ledger = open_readonly(run)
        except LedgerError as err:
            problems.append(f"{run.name}: {err}")
            continue
        try:
            chain = read_chain(ledger)
        finally:
            ledger.close()
        found = [*audit_records(run, chain), *audit_files(run, chain, Path(run_dir))]
        problems += [f"{run.name}: {f}" for f in found]
        if not found:
            checked.append(f"{run.name} ({len(chain.aggregations)} rounds)")
    return checked, problems
