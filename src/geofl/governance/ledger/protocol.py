"""The interface every governance ledger backend implements.

Writes return the confirmed :class:`~geofl.governance.ledger.records.Receipt` (so the
latency from submission to confirmation can be measured) and raise
:class:`~geofl.errors.LedgerRevertError` with the contract's reason when the contract
rejects them. Node ids are strings; their accounts derive from the run seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, overload

from geofl.governance.ledger.hashing import Hash32
from geofl.governance.ledger.records import (
    AggregationRecord,
    CommitteeRecord,
    LedgerEvent,
    ProposalRecord,
    Receipt,
    Role,
    RuleRecord,
)
from geofl.governance.permissions import PermissionLevel

__all__ = ["Ledger"]

E = TypeVar("E", bound=LedgerEvent)


class Ledger(Protocol):
    """Roles, rule and aggregation commitments, committees and permission proposals."""

    coordinator: str
    contract_address: str

    def grant_role(self, node_id: str, role: Role) -> Receipt:
        """Bind ``node_id`` to its account and give it ``role`` (coordinator only)."""
        ...

    def revoke_role(self, node_id: str, role: Role) -> Receipt:
        """Clear ``role`` from ``node_id`` (coordinator only)."""
        ...

    def commit_rule(self, rule_hash: Hash32, label: str) -> Receipt:
        """Commit the hash of a resolved config plus governance rules."""
        ...

    def commit_aggregation(
        self, round_id: int, model_hash: Hash32, update_set_hash: Hash32
    ) -> Receipt:
        """Commit a round's aggregated model hash and update-set hash."""
        ...

    def record_committee(
        self, election_id: int, round_id: int, members: Sequence[str], seed_hash: Hash32
    ) -> Receipt:
        """Record an election's committee; it becomes the current committee."""
        ...

    def propose_permission(
        self,
        node_id: str,
        old: PermissionLevel,
        new: PermissionLevel,
        reason: str,
        round_id: int,
        *,
        proposer: str | None = None,
    ) -> tuple[int, Receipt]:
        """Propose ⟨node, old, new, reason, round_id⟩; the proposal id and receipt."""
        ...

    def approve(self, proposal_id: int, member: str) -> Receipt:
        """Approve a proposal as a member of the current committee."""
        ...

    def cancel(self, proposal_id: int, by: str | None = None) -> Receipt:
        """Withdraw a pending proposal."""
        ...

    def transact(self, sender: str, method: str, *args: Any) -> Receipt:
        """Call any contract function as ``sender`` (the contract decides)."""
        ...

    def roles(self, node_id: str) -> Role:
        """Role flags of ``node_id``."""
        ...

    def permission(self, node_id: str) -> PermissionLevel:
        """Permission level of ``node_id``."""
        ...

    def current_election(self) -> int:
        """Id of the current committee's election (0 before the first)."""
        ...

    def committee(self, election_id: int | None = None) -> CommitteeRecord:
        """Committee of an election (the current one if ``None``)."""
        ...

    def proposal(self, proposal_id: int) -> ProposalRecord:
        """A proposal with its approval count and status."""
        ...

    def rule(self, index: int | None = None) -> RuleRecord:
        """Rule commitment ``index`` (the latest if ``None``)."""
        ...

    def aggregation(self, round_id: int) -> AggregationRecord | None:
        """Aggregation commitment of a round, if any."""
        ...

    @overload
    def events(
        self, kind: type[E], *, from_block: int = 0, to_block: int | None = None
    ) -> list[E]: ...

    @overload
    def events(
        self, kind: None = None, *, from_block: int = 0, to_block: int | None = None
    ) -> list[LedgerEvent]: ...

    def receipt_events(self, tx_hash: str) -> tuple[LedgerEvent, ...]:
        """The decoded contract events of one transaction."""
        ...

    def close(self) -> None:
        """Release what the backend holds."""
        ...
