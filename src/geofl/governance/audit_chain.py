"""A governed run's ledger and the chain's events the audit compares it with (000 §3.5.1).

Locates the governed (method, seed) runs of a run directory, reopens their ledgers
read-only and collects the chain's governance events (:class:`ChainRecords`); a difference
the audit finds is a :class:`Finding`. The checks themselves are in
:mod:`geofl.governance.audit`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geofl.errors import GovernanceError
from geofl.governance.ledger import (
    AggregationCommitted,
    CommitteeElected,
    EmbeddedLedger,
    Ledger,
    PermissionApproved,
    PermissionChanged,
    PermissionProposed,
    RpcLedger,
    RuleCommitted,
)
from geofl.governance.subscriber import LEDGER_DIR, LOG_FILE
from geofl.io import read_jsonl

__all__ = [
    "ChainRecords",
    "Finding",
    "LedgerRun",
    "find_ledgers",
    "governance_log",
    "open_readonly",
    "read_chain",
]


@dataclass(frozen=True)
class LedgerRun:
    """One governed (method, seed) run."""

    method: str
    seed: int
    seed_dir: Path

    @property
    def name(self) -> str:
        """``method/seed-N``."""
        return f"{self.method}/seed-{self.seed}"


@dataclass(frozen=True)
class Finding:
    """One difference between a run directory and its chain.

    Attributes:
        where: The file, relative to the seed directory (``config.yaml`` and
            ``summary.json``: the run directory's), with ``:line`` when one line is at
            fault (``rounds.jsonl:4``).
        what: What differs.
        round: The round it concerns, if one (``geofl ledger show`` lists it there).
    """

    where: str
    what: str
    round: int | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass(frozen=True)
class ChainRecords:
    """The governance events of one chain, each kind in block order."""

    rules: tuple[RuleCommitted, ...]
    aggregations: tuple[AggregationCommitted, ...]
    committees: tuple[CommitteeElected, ...]
    proposals: tuple[PermissionProposed, ...]
    approvals: Mapping[int, tuple[PermissionApproved, ...]]
    changes: Mapping[int, PermissionChanged]
    by_round: Mapping[int, AggregationCommitted] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_round", {a.round_id: a for a in self.aggregations})

    @property
    def last_round(self) -> AggregationCommitted | None:
        """The commitment of the highest round committed, if any."""
        return max(self.aggregations, key=lambda a: a.round_id, default=None)

    def rounds(self) -> list[int]:
        """Every round some event concerns, ascending."""
        rs = {a.round_id for a in self.aggregations}
        rs |= {c.round_id for c in self.committees} | {p.round_id for p in self.proposals}
        return sorted(rs)


def read_chain(ledger: Ledger) -> ChainRecords:
    """The rule, aggregation, committee and permission events of ``ledger``."""
    approvals: dict[int, list[PermissionApproved]] = {}
    for ev in ledger.events(PermissionApproved):
        approvals.setdefault(ev.proposal_id, []).append(ev)
    return ChainRecords(
        rules=tuple(ledger.events(RuleCommitted)),
        aggregations=tuple(ledger.events(AggregationCommitted)),
        committees=tuple(ledger.events(CommitteeElected)),
        proposals=tuple(ledger.events(PermissionProposed)),
        approvals={k: tuple(v) for k, v in approvals.items()},
        changes={ev.proposal_id: ev for ev in ledger.events(PermissionChanged)},
    )


def find_ledgers(
    run_dir: Path, method: str | None = None, seed: int | None = None
) -> list[LedgerRun]:
    """The governed runs of ``run_dir`` (optionally one method and/or seed).

    Raises:
        GovernanceError: if nothing matches.
    """
    run_dir = Path(run_dir)
    out = []
    for led in sorted((run_dir / "methods").glob(f"*/seed-*/{LEDGER_DIR}")):
        sd = led.parent
        m, s = sd.parent.name, int(sd.name.removeprefix("seed-"))
        if (method is None or m == method) and (seed is None or s == seed):
            out.append(LedgerRun(m, s, sd))
    if not out:
        what = " ".join(x for x in (method and f"method {method}", seed and f"seed {seed}") if x)
        raise GovernanceError(
            f"{run_dir}: no governance ledger{' for ' + what if what else ''}; run with a "
            "governance section or build one with `geofl ledger build`"
        )
    return out


def open_readonly(run: LedgerRun) -> Ledger:
    """Reopen a run's ledger for reading (an embedded one is replayed and checked)."""
    path = run.seed_dir / LEDGER_DIR
    rpc = path / "rpc.json"
    if rpc.exists():
        info = json.loads(rpc.read_text())
        return RpcLedger.attach(info["url"], info["address"], seed=info["seed"])
    return EmbeddedLedger.open(path, read_only=True)


def governance_log(run: LedgerRun) -> list[dict[str, Any]]:
    """The round entries of ``governance.jsonl`` (the rule entry left out)."""
    return [e for e in read_jsonl(run.seed_dir / LOG_FILE) if "round" in e]
