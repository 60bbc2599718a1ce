"""Read-only queries of the governance contract's state, as typed records.

Each query is one contract call (``eth_call``) against the latest block; node ids are
resolved through the on-chain binding of accounts to node ids.
"""

from __future__ import annotations

from typing import Any

from eth_utils.address import to_checksum_address
from web3.contract import Contract

from geofl.errors import LedgerError
from geofl.governance.ledger.decode import EventDecoder
from geofl.governance.ledger.hashing import to_hex
from geofl.governance.ledger.identity import Identities
from geofl.governance.ledger.records import (
    AggregationRecord,
    CommitteeRecord,
    ProposalRecord,
    ProposalStatus,
    Role,
    RuleRecord,
)
from geofl.governance.permissions import PermissionLevel

__all__ = ["LedgerViews"]


class LedgerViews:
    """State queries of one deployed governance contract.

    Args:
        contract: The web3 contract.
        decoder: Event decoder of the contract (its account → node id bindings).
        identities: Node accounts of the run.
        caller: Account the calls are made from (a funded one: some nodes, eth-tester
            among them, check the caller can afford the call's gas).
    """

    def __init__(
        self, contract: Contract, decoder: EventDecoder, identities: Identities, caller: str
    ) -> None:
        self.contract = contract
        self.decoder = decoder
        self.identities = identities
        self._caller = to_checksum_address(caller)

    def _call(self, name: str, *args: Any) -> Any:
        return self.contract.functions[name](*args).call({"from": self._caller})

    def _node(self, address: str) -> str:
        found = self.decoder.node(address)
        if found == address:  # not seen in an event: ask the contract
            bound = str(self._call("nodeIdOf", to_checksum_address(address)))
            if bound:
                self.decoder.bind(address, bound)
                return bound
        return found

    def account(self, node_id: str) -> str:
        """Checksummed account address of ``node_id``."""
        return self.identities.address(node_id)

    def node_of(self, address: str) -> str:
        """Node id bound to ``address`` on chain (the address itself if none)."""
        return self._node(address)

    def roles(self, node_id: str) -> Role:
        """Role flags ``node_id`` holds."""
        return Role(self._call("roles", self.account(node_id)))

    def permission(self, node_id: str) -> PermissionLevel:
        """Current permission level of ``node_id`` (``ACTIVE`` unless changed)."""
        return PermissionLevel(self._call("permission", self.account(node_id)))

    def current_election(self) -> int:
        """Id of the current committee's election (0 before the first)."""
        return int(self._call("currentElection"))

    def committee(self, election_id: int | None = None) -> CommitteeRecord:
        """Committee of ``election_id`` (the current one if ``None``).

        Raises:
            LedgerError: if no committee was recorded under that id.
        """
        eid = self.current_election() if election_id is None else int(election_id)
        round_id, members, seed, block = self._call("committees", eid)
        if not members:
            raise LedgerError(f"no committee recorded for election {eid}")
        accounts = tuple(str(m) for m in members)
        return CommitteeRecord(
            election_id=eid,
            round_id=int(round_id),
            members=tuple(self._node(a) for a in accounts),
            accounts=accounts,
            seed_hash=to_hex(seed),
            block_number=int(block),
        )

    def proposal_count(self) -> int:
        """Number of proposals made so far (ids are 1..count)."""
        return int(self._call("proposalCount"))

    def proposal(self, proposal_id: int) -> ProposalRecord:
        """Proposal ``proposal_id`` with its approval count and status.

        Raises:
            LedgerError: if there is no such proposal.
        """
        (node, old, new, reason, round_id, eid, proposer, approvals, status) = self._call(
            "proposals", int(proposal_id)
        )
        if status == ProposalStatus.NONE:
            raise LedgerError(f"no proposal {proposal_id}")
        return ProposalRecord(
            proposal_id=int(proposal_id),
            node=self._node(node),
            old=PermissionLevel(old),
            new=PermissionLevel(new),
            reason=str(reason),
            round_id=int(round_id),
            election_id=int(eid),
            proposer=self._node(proposer),
            approvals=int(approvals),
            status=ProposalStatus(status),
        )

    def has_approved(self, proposal_id: int, member: str) -> bool:
        """Whether ``member`` approved proposal ``proposal_id``."""
        return bool(self._call("approved", int(proposal_id), self.account(member)))

    def rule_count(self) -> int:
        """Number of rule commitments (indices are 1..count)."""
        return int(self._call("ruleCount"))

    def rule(self, index: int | None = None) -> RuleRecord:
        """Rule commitment ``index`` (the latest if ``None``).

        Raises:
            LedgerError: if there is no such rule.
        """
        idx = self.rule_count() if index is None else int(index)
        rule_hash, label, block = self._call("rules", idx)
        if idx <= 0 or block == 0:
            raise LedgerError(f"no rule {idx}")
        return RuleRecord(
            index=idx, rule_hash=to_hex(rule_hash), label=str(label), block_number=int(block)
        )

    def aggregation(self, round_id: int) -> AggregationRecord | None:
        """Aggregation commitment of ``round_id``, or ``None`` if none was committed."""
        if not self._call("aggregated", int(round_id)):
            return None
        model, updates, rule_index, block = self._call("aggregations", int(round_id))
        return AggregationRecord(
            round_id=int(round_id),
            model_hash=to_hex(model),
            update_set_hash=to_hex(updates),
            rule_index=int(rule_index),
            block_number=int(block),
        )

    def block_number(self) -> int:
        """Number of the latest block."""
        return int(self.contract.w3.eth.block_number)
