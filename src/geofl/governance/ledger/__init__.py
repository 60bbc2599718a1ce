"""Governance ledger: an EVM contract recording roles, rules, aggregations, committees and
permission proposals (paper 000 §3.5, Eq. 24), with an embedded and a JSON-RPC backend.

Example:
    >>> from geofl.governance.ledger import EmbeddedLedger, Role, hash_json
    >>> ledger = EmbeddedLedger.create(None, seed=1)
    >>> rc = ledger.commit_rule(hash_json({"rounds": 10}), "rule_A_seed1")
    >>> ledger.rule().label
    'rule_A_seed1'
"""

from typing import TYPE_CHECKING

from geofl.governance.ledger.artifact import Artifact, load_artifact
from geofl.governance.ledger.base import Web3Ledger
from geofl.governance.ledger.embedded import EmbeddedLedger
from geofl.governance.ledger.hashing import (
    Hash32,
    as_bytes32,
    canonical_json,
    hash_bytes,
    hash_json,
)
from geofl.governance.ledger.identity import Identities, derive_private_key
from geofl.governance.ledger.protocol import Ledger
from geofl.governance.ledger.records import (
    AggregationCommitted,
    AggregationRecord,
    CommitteeElected,
    CommitteeRecord,
    LedgerEvent,
    PermissionApproved,
    PermissionChanged,
    PermissionProposed,
    ProposalCancelled,
    ProposalRecord,
    ProposalStatus,
    Receipt,
    Role,
    RoleGranted,
    RoleRevoked,
    RuleCommitted,
    RuleRecord,
)
from geofl.governance.ledger.rpc import RpcLedger

if TYPE_CHECKING:  # mypy checks that both backends implement the Ledger protocol
    _BACKENDS: tuple[type[Ledger], ...] = (EmbeddedLedger, RpcLedger)

__all__ = [
    "AggregationCommitted",
    "AggregationRecord",
    "Artifact",
    "CommitteeElected",
    "CommitteeRecord",
    "EmbeddedLedger",
    "Hash32",
    "Identities",
    "Ledger",
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
    "RpcLedger",
    "RuleCommitted",
    "RuleRecord",
    "Web3Ledger",
    "as_bytes32",
    "canonical_json",
    "derive_private_key",
    "hash_bytes",
    "hash_json",
    "load_artifact",
]
