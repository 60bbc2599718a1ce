"""Governance ledger: an EVM contract recording roles, rules, aggregations, committees and
permission proposals (paper 000 §3.5, Eq. 24), with an embedded and a JSON-RPC backend.

Example:
    >>> from geofl.governance.ledger import EmbeddedLedger, Role, hash_json
    >>> ledger = EmbeddedLedger.create(None, seed=1)
    >>> rc = ledger.commit_rule(hash_json({"rounds": 10}), "rule_A_seed1")
    >>> ledger.rule().label
    'rule_A_seed1'
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from geofl.governance.ledger.artifact import Artifact, load_artifact
from geofl.governance.ledger.hashing import (
    Hash32,
    as_bytes32,
    canonical_json,
    hash_bytes,
    hash_json,
)
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

if TYPE_CHECKING:  # mypy checks that both backends implement the Ledger protocol
    from geofl.governance.ledger.base import Web3Ledger
    from geofl.governance.ledger.embedded import EmbeddedLedger
    from geofl.governance.ledger.identity import Identities, derive_private_key
    from geofl.governance.ledger.rpc import RpcLedger

    _BACKENDS: tuple[type[Ledger], ...] = (EmbeddedLedger, RpcLedger)

#: The backends and identities, by the module that defines them: imported on first use
#: (PEP 562), because they import web3 and eth-account (seconds), which a process that
#: only loads the plug-ins (a Flower ClientApp, one process per message) never needs.
_LAZY = {
    "Web3Ledger": "base",
    "EmbeddedLedger": "embedded",
    "Identities": "identity",
    "derive_private_key": "identity",
    "RpcLedger": "rpc",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
