"""The JSON-RPC backend against a real ganache node: attach, funding, several writers."""

from __future__ import annotations

import pytest

from geofl.errors import LedgerError
from geofl.governance.ledger import (
    CommitteeElected,
    PermissionChanged,
    Role,
    RpcLedger,
    hash_json,
)
from geofl.governance.ledger.ganache import free_port
from geofl.governance.permissions import PermissionLevel

#: Private key of account 0 of ganache's --wallet.deterministic mnemonic (public knowledge).
GANACHE_KEY_0 = "0x4f3edf983ac636a65a842ce7c78d9aa706d3b113bce9c46f30d7d21715b23b1d"


def test_an_attached_ledger_sees_what_another_writer_recorded(ganache_url: str):
    first = RpcLedger.create(ganache_url, seed="attach")
    start = first.block_number()
    for node in ("a", "b", "c"):
        first.grant_role(node, Role.VALIDATION)
    first.commit_rule(hash_json({"r": 1}), "rule")
    first.record_committee(1, 1, ["a", "b"], hash_json("d"))

    second = RpcLedger.attach(ganache_url, first.contract_address, seed="attach", from_block=start)
    assert second.committee().members == ("a", "b")
    pid, _ = second.propose_permission("c", PermissionLevel.ACTIVE, PermissionLevel.REMOVED, "x", 1)
    first.approve(pid, "a")  # the writers share nonces through the chain, not memory
    second.approve(pid, "b")
    assert first.permission("c") == PermissionLevel.REMOVED
    for ledger in (first, second):
        (change,) = ledger.events(PermissionChanged)
        assert change.node == "c" and change.proposal_id == pid
        assert [e.members for e in ledger.events(CommitteeElected)] == [("a", "b")]
    assert second.event_blocks()["PermissionChanged"] == [change.block_number]


def test_attach_checks_the_contract_and_the_coordinator(ganache_url: str):
    ledger = RpcLedger.create(ganache_url, seed="check")
    with pytest.raises(LedgerError, match="holds no coordinator role"):
        RpcLedger.attach(ganache_url, ledger.contract_address, seed="other")
    with pytest.raises(LedgerError, match="no contract at"):
        RpcLedger.attach(ganache_url, "0x" + "12" * 20, seed="check")


def test_the_coordinator_can_be_funded_from_a_given_key(ganache_url: str):
    ledger = RpcLedger.create(ganache_url, seed="funded-by-key", funder_key=GANACHE_KEY_0)
    assert ledger.w3.eth.get_balance(ledger.account("coordinator")) > 0
    assert ledger.grant_role("n1", Role.AUDIT).status == 1


def test_an_unreachable_node_is_a_clear_error():
    with pytest.raises(LedgerError, match=r"no Ethereum node answers at http://127\.0\.0\.1"):
        RpcLedger.create(f"http://127.0.0.1:{free_port()}", seed=1, timeout_s=2)
