"""Decoding the governance contract's logs into typed events.

One :class:`EventDecoder` per contract: it maps each log's first topic to the event's
ABI, decodes the arguments and builds the matching record of
:mod:`geofl.governance.ledger.records`, turning accounts into node ids through the
bindings it has seen (``RoleGranted`` carries the node id) or the run's identities.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from eth_utils.abi import event_abi_to_log_topic
from web3.contract import Contract

from geofl.governance.ledger.hashing import to_hex
from geofl.governance.ledger.records import (
    AggregationCommitted,
    CommitteeElected,
    LedgerEvent,
    PermissionApproved,
    PermissionChanged,
    PermissionProposed,
    ProposalCancelled,
    Role,
    RoleGranted,
    RoleRevoked,
    RuleCommitted,
)
from geofl.governance.permissions import PermissionLevel

__all__ = ["EVENT_TYPES", "EventDecoder"]

#: Record type of each contract event, by event name.
EVENT_TYPES: dict[str, type[LedgerEvent]] = {
    "RoleGranted": RoleGranted,
    "RoleRevoked": RoleRevoked,
    "RuleCommitted": RuleCommitted,
    "AggregationCommitted": AggregationCommitted,
    "CommitteeElected": CommitteeElected,
    "PermissionProposed": PermissionProposed,
    "PermissionApproved": PermissionApproved,
    "PermissionChanged": PermissionChanged,
    "ProposalCancelled": ProposalCancelled,
}


def _topic_hex(topic: Any) -> str:
    raw = bytes.fromhex(topic.removeprefix("0x")) if isinstance(topic, str) else bytes(topic)
    return to_hex(raw)


class EventDecoder:
    """Typed events from the logs of one deployed governance contract.

    Args:
        contract: The web3 contract (its address filters foreign logs out).
        fallback: Node id of an account no ``RoleGranted`` bound yet (e.g. derived from
            the run seed), or ``None``; the checksummed address is used then.
    """

    def __init__(self, contract: Contract, fallback: Callable[[str], str | None]) -> None:
        self.contract = contract
        self.address = str(contract.address).lower()
        self._fallback = fallback
        self._nodes: dict[str, str] = {}
        self._by_topic: dict[str, str] = {}
        for item in contract.abi:
            entry = cast(dict[str, Any], item)
            if entry.get("type") == "event" and entry["name"] in EVENT_TYPES:
                topic = event_abi_to_log_topic(cast(Any, entry))
                self._by_topic[to_hex(topic)] = entry["name"]
        self.topics: dict[str, str] = {name: topic for topic, name in self._by_topic.items()}

    def bind(self, address: str, node_id: str) -> None:
        """Record that ``address`` belongs to ``node_id``."""
        self._nodes[address.lower()] = node_id

    def node(self, address: str) -> str:
        """Node id of ``address`` (its checksummed address if unknown)."""
        found = self._nodes.get(address.lower()) or self._fallback(address)
        return found if found is not None else address

    def event_name(self, log: Mapping[str, Any]) -> str | None:
        """Name of the contract event ``log`` holds, or ``None`` for a foreign log."""
        if str(log["address"]).lower() != self.address or not log["topics"]:
            return None
        return self._by_topic.get(_topic_hex(log["topics"][0]))

    def decode_logs(self, logs: Iterable[Mapping[str, Any]]) -> tuple[LedgerEvent, ...]:
        """Decode the contract's logs among ``logs`` (others are skipped), in order."""
        out = []
        for log in logs:
            name = self.event_name(log)
            if name is not None:
                out.append(self._decode(name, log))
        return tuple(out)

    def _decode(self, name: str, log: Mapping[str, Any]) -> LedgerEvent:
        """The record of one contract log whose event is ``name``.

        Args:
            name: Event name, a key of :data:`EVENT_TYPES`.
            log: The raw web3 log.

        Returns:
            The event's record, with the log's block number, transaction hash and index.
        """
        data = self.contract.events[name]().process_log(cast(Any, log))
        a = data["args"]
        meta: dict[str, Any] = {
            "block_number": int(log["blockNumber"]),
            "tx_hash": _topic_hex(log["transactionHash"]),
            "log_index": int(log["logIndex"]),
        }
        if name in ("RoleGranted", "RoleRevoked"):
            return self._role_event(name, a, meta)
        if name in ("RuleCommitted", "AggregationCommitted", "CommitteeElected"):
            return self._commit_event(name, a, meta)
        return self._permission_event(name, a, meta)

    def _role_event(
        self, name: str, a: Mapping[str, Any], meta: dict[str, Any]
    ) -> RoleGranted | RoleRevoked:
        """``RoleGranted`` (which binds the account to its node id) or ``RoleRevoked``.

        Args:
            name: ``"RoleGranted"`` or ``"RoleRevoked"``.
            a: The decoded event arguments.
            meta: Block number, transaction hash and log index of the log.
        """
        if name == "RoleGranted":
            self.bind(a["account"], a["nodeId"])
            return RoleGranted(
                node=a["nodeId"],
                account=a["account"],
                role=Role(a["role"]),
                roles=Role(a["roles"]),
                **meta,
            )
        return RoleRevoked(
            node=self.node(a["account"]),
            account=a["account"],
            role=Role(a["role"]),
            roles=Role(a["roles"]),
            **meta,
        )

    def _commit_event(
        self, name: str, a: Mapping[str, Any], meta: dict[str, Any]
    ) -> RuleCommitted | AggregationCommitted | CommitteeElected:
        """``RuleCommitted``, ``AggregationCommitted`` or ``CommitteeElected``.

        Args:
            name: One of the three event names.
            a: The decoded event arguments.
            meta: Block number, transaction hash and log index of the log.
        """
        if name == "RuleCommitted":
            return RuleCommitted(
                index=a["index"], rule_hash=to_hex(a["ruleHash"]), label=a["label"], **meta
            )
        if name == "AggregationCommitted":
            return AggregationCommitted(
                round_id=a["roundId"],
                model_hash=to_hex(a["modelHash"]),
                update_set_hash=to_hex(a["updateSetHash"]),
                rule_index=a["ruleIndex"],
                **meta,
            )
        accounts = tuple(str(m) for m in a["members"])
        return CommitteeElected(
            election_id=a["electionId"],
            round_id=a["roundId"],
            members=tuple(self.node(m) for m in accounts),
            accounts=accounts,
            seed_hash=to_hex(a["seed"]),
            **meta,
        )

    def _permission_event(
        self, name: str, a: Mapping[str, Any], meta: dict[str, Any]
    ) -> PermissionProposed | PermissionApproved | PermissionChanged | ProposalCancelled:
        """A permission proposal's event: proposed, approved, changed or (any other
        name) cancelled.

        Args:
            name: The event name.
            a: The decoded event arguments.
            meta: Block number, transaction hash and log index of the log.
        """
        if name == "PermissionProposed":
            return PermissionProposed(
                proposal_id=a["proposalId"],
                node=self.node(a["node"]),
                old=PermissionLevel(a["oldState"]),
                new=PermissionLevel(a["newState"]),
                reason=a["reason"],
                round_id=a["roundId"],
                election_id=a["electionId"],
                proposer=self.node(a["proposer"]),
                **meta,
            )
        if name == "PermissionApproved":
            return PermissionApproved(
                proposal_id=a["proposalId"],
                member=self.node(a["member"]),
                approvals=a["approvals"],
                needed=a["needed"],
                **meta,
            )
        if name == "PermissionChanged":
            return PermissionChanged(
                proposal_id=a["proposalId"],
                node=self.node(a["node"]),
                old=PermissionLevel(a["oldState"]),
                new=PermissionLevel(a["newState"]),
                round_id=a["roundId"],
                **meta,
            )
        return ProposalCancelled(proposal_id=a["proposalId"], by=self.node(a["canceller"]), **meta)
