"""Typed records of the governance ledger: roles, proposal states, receipts, events, views.

Hashes (transaction, block, rule, model) are ``0x``-prefixed lowercase hex strings, so
records serialise to JSON as they are (``dataclasses.asdict``; the enums are ints).
Accounts are checksummed addresses; nodes are the string ids the ledger was given
(``"coordinator"``, ``"client7"``), resolved from accounts through the on-chain binding.
Permission levels are :class:`geofl.governance.permissions.PermissionLevel`, whose int
values are the contract's encoding.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from geofl.governance.permissions import PermissionLevel

__all__ = [
    "AggregationCommitted",
    "AggregationRecord",
    "CommitteeElected",
    "CommitteeRecord",
    "LedgerEvent",
    "PermissionApproved",
    "PermissionChanged",
    "PermissionProposed",
    "ProposalCancelled",
    "ProposalRecord",
    "ProposalStatus",
    "Receipt",
    "Role",
    "RoleGranted",
    "RoleRevoked",
    "RuleCommitted",
    "RuleRecord",
]


class Role(enum.IntFlag):
    """System roles of paper 000 §3.5.1, as bit flags (an account may hold several)."""

    COORDINATOR = 1
    TRAINING = 2
    VALIDATION = 4
    AUDIT = 8


class ProposalStatus(enum.IntEnum):
    """Life cycle of a permission proposal; ``NONE`` means no such proposal."""

    NONE = 0
    PENDING = 1
    EXECUTED = 2
    CANCELLED = 3


@dataclass(frozen=True, kw_only=True)
class LedgerEvent:
    """Fields every decoded contract event carries: where it was recorded."""

    block_number: int
    tx_hash: str
    log_index: int


@dataclass(frozen=True, kw_only=True)
class Receipt:
    """A confirmed transaction.

    Attributes:
        method: Contract function called (``"deploy"`` for the deployment, ``"transfer"``
            for a plain value transfer that funds a node account).
        sender: Node id of the signing account.
        tx_hash: Transaction hash.
        block_number: Block that includes the transaction.
        block_hash: Hash of that block.
        gas_used: Gas the transaction used.
        status: 1 when it succeeded (a failed one raises before a receipt is returned).
        latency_s: Seconds from submission (the pre-check call) to the confirmed receipt,
            its events decoded (writing the embedded backend's log comes after).
        events: The contract events the transaction emitted, decoded.
        contract_address: Address created by a deployment, else ``None``.
    """

    method: str
    sender: str
    tx_hash: str
    block_number: int
    block_hash: str
    gas_used: int
    status: int
    latency_s: float
    events: tuple[LedgerEvent, ...] = ()
    contract_address: str | None = None


@dataclass(frozen=True, kw_only=True)
class RoleGranted(LedgerEvent):
    """``RoleGranted``: ``account`` bound to ``node`` and given ``role`` (now ``roles``)."""

    node: str
    account: str
    role: Role
    roles: Role


@dataclass(frozen=True, kw_only=True)
class RoleRevoked(LedgerEvent):
    """``RoleRevoked``: ``role`` cleared from ``node`` (now ``roles``)."""

    node: str
    account: str
    role: Role
    roles: Role


@dataclass(frozen=True, kw_only=True)
class RuleCommitted(LedgerEvent):
    """``RuleCommitted``: rule number ``index`` (1-based) with its hash and label."""

    index: int
    rule_hash: str
    label: str


@dataclass(frozen=True, kw_only=True)
class AggregationCommitted(LedgerEvent):
    """``AggregationCommitted``: a round's model hash and update-set hash."""

    round_id: int
    model_hash: str
    update_set_hash: str
    rule_index: int


@dataclass(frozen=True, kw_only=True)
class CommitteeElected(LedgerEvent):
    """``CommitteeElected``: the members of election ``election_id`` in draw order."""

    election_id: int
    round_id: int
    members: tuple[str, ...]
    accounts: tuple[str, ...]
    seed_hash: str


@dataclass(frozen=True, kw_only=True)
class PermissionProposed(LedgerEvent):
    """``PermissionProposed``: proposal ⟨node, old, new, reason, round_id⟩ (Eq. 24)."""

    proposal_id: int
    node: str
    old: PermissionLevel
    new: PermissionLevel
    reason: str
    round_id: int
    election_id: int
    proposer: str


@dataclass(frozen=True, kw_only=True)
class PermissionApproved(LedgerEvent):
    """``PermissionApproved``: one committee member's approval (``approvals`` of ``needed``)."""

    proposal_id: int
    member: str
    approvals: int
    needed: int


@dataclass(frozen=True, kw_only=True)
class PermissionChanged(LedgerEvent):
    """``PermissionChanged``: a proposal reached its majority and took effect."""

    proposal_id: int
    node: str
    old: PermissionLevel
    new: PermissionLevel
    round_id: int


@dataclass(frozen=True, kw_only=True)
class ProposalCancelled(LedgerEvent):
    """``ProposalCancelled``: a pending proposal was withdrawn."""

    proposal_id: int
    by: str


@dataclass(frozen=True, kw_only=True)
class RuleRecord:
    """Stored rule commitment number ``index``."""

    index: int
    rule_hash: str
    label: str
    block_number: int


@dataclass(frozen=True, kw_only=True)
class AggregationRecord:
    """Stored aggregation commitment of ``round_id``; ``rule_index`` was in force."""

    round_id: int
    model_hash: str
    update_set_hash: str
    rule_index: int
    block_number: int


@dataclass(frozen=True, kw_only=True)
class CommitteeRecord:
    """Stored committee of ``election_id``; ``members`` in draw order."""

    election_id: int
    round_id: int
    members: tuple[str, ...]
    accounts: tuple[str, ...]
    seed_hash: str
    block_number: int

    @property
    def majority(self) -> int:
        """Approvals a proposal needs from this committee: a strict majority."""
        return len(self.members) // 2 + 1


@dataclass(frozen=True, kw_only=True)
class ProposalRecord:
    """Stored permission proposal and its approval count."""

    proposal_id: int
    node: str
    old: PermissionLevel
    new: PermissionLevel
    reason: str
    round_id: int
    election_id: int
    proposer: str
    approvals: int
    status: ProposalStatus
