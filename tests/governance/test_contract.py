"""Behaviour of the governance contract, on the embedded chain and on a real ganache node.

Every test runs on both backends (fixture ``make_ledger``): roles, commitments, committee
records, and permission changes only through proposals approved by a strict majority of
the current committee (paper 000 §3.5.3, Eq. 24).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from geofl.errors import LedgerError, LedgerRevertError
from geofl.governance.ledger import (
    AggregationCommitted,
    CommitteeElected,
    PermissionApproved,
    PermissionChanged,
    PermissionProposed,
    ProposalCancelled,
    ProposalStatus,
    Role,
    RoleGranted,
    RoleRevoked,
    RuleCommitted,
    Web3Ledger,
    hash_json,
)
from geofl.governance.permissions import PermissionLevel

MakeLedger = Callable[..., Web3Ledger]
ACTIVE, WATCHLIST, SUSPENDED = (
    PermissionLevel.ACTIVE,
    PermissionLevel.WATCHLIST,
    PermissionLevel.SUSPENDED,
)
VALIDATORS = ("v1", "v2", "v3", "v4")


def governed(make: MakeLedger, committee: tuple[str, ...] = ("v1", "v2", "v3")) -> Web3Ledger:
    """A ledger with four validators, a training node, a rule and ``committee`` elected."""
    ledger = make()
    for node in VALIDATORS:
        ledger.grant_role(node, Role.VALIDATION | Role.TRAINING)
    ledger.grant_role("t1", Role.TRAINING)
    ledger.commit_rule(hash_json({"rule": "A"}), "rule_A_seed1")
    ledger.record_committee(1, 1, list(committee), hash_json("draw-1"))
    return ledger


def reverts(reason: str) -> pytest.RaisesContext[LedgerRevertError]:
    return pytest.raises(LedgerRevertError, match=reason)


def test_roles_are_bound_to_accounts_and_granted_by_the_coordinator(make_ledger: MakeLedger):
    ledger = make_ledger()
    assert ledger.roles("coordinator") == Role.COORDINATOR
    rc = ledger.grant_role("v1", Role.VALIDATION)
    assert rc.status == 1 and rc.block_number > 0 and rc.gas_used > 0 and rc.latency_s > 0
    assert rc.tx_hash.startswith("0x") and len(rc.tx_hash) == 66
    (event,) = rc.events
    assert isinstance(event, RoleGranted)
    assert (event.node, event.account, event.roles) == ("v1", ledger.account("v1"), Role.VALIDATION)
    ledger.grant_role("v1", Role.AUDIT)
    assert ledger.roles("v1") == Role.VALIDATION | Role.AUDIT
    assert ledger.node_of(ledger.account("v1")) == "v1"
    (revoked,) = ledger.revoke_role("v1", Role.AUDIT).events
    assert isinstance(revoked, RoleRevoked) and revoked.roles == Role.VALIDATION
    assert ledger.roles("v1") == Role.VALIDATION
    assert ledger.roles("nobody") == Role(0)
    with reverts("does not hold the role"):
        ledger.revoke_role("v1", Role.AUDIT)
    with reverts("coordinator cannot revoke itself"):
        ledger.revoke_role("coordinator", Role.COORDINATOR)


def test_unauthorised_calls_revert_with_a_reason(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    before = ledger.block_number()
    h = hash_json("x")
    with reverts("caller is not the coordinator"):
        ledger.transact("t1", "grantRole", ledger.account("t1"), int(Role.COORDINATOR), "t1")
    with reverts("caller is not the coordinator"):
        ledger.transact("v1", "commitRule", bytes.fromhex(h[2:]), "forged")
    with reverts("caller is not the coordinator"):
        ledger.transact("v1", "commitAggregation", 1, bytes.fromhex(h[2:]), bytes(32))
    with reverts("caller is not the coordinator"):
        ledger.transact("v1", "recordCommittee", 9, 1, [ledger.account("v1")], bytes(32))
    with reverts("caller may not propose"):
        ledger.propose_permission("v4", ACTIVE, SUSPENDED, "spite", 1, proposer="t1")
    assert ledger.rule_count() == 1 and ledger.current_election() == 1
    assert ledger.roles("t1") == Role.TRAINING
    # Rejected by the pre-check: no contract transaction was mined (only funding transfers).
    assert ledger.events(from_block=before + 1) == []


def test_an_audit_node_may_propose_and_a_stranger_may_not_cancel(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    ledger.grant_role("auditor", Role.AUDIT)
    pid, rc = ledger.propose_permission("v4", ACTIVE, WATCHLIST, "review", 2, proposer="auditor")
    (event,) = rc.events
    assert isinstance(event, PermissionProposed) and event.proposer == "auditor"
    with reverts("caller may not cancel"):
        ledger.cancel(pid, by="t1")
    (cancelled,) = ledger.cancel(pid, by="auditor").events
    assert isinstance(cancelled, ProposalCancelled) and cancelled.by == "auditor"
    assert ledger.proposal(pid).status == ProposalStatus.CANCELLED
    with reverts("proposal is not pending"):
        ledger.approve(pid, "v1")


def test_commitments_are_recorded_in_order_under_the_current_rule(make_ledger: MakeLedger):
    ledger = make_ledger()
    with reverts("no rule committed"):
        ledger.commit_aggregation(1, hash_json("m1"), hash_json("u1"))
    (rule,) = ledger.commit_rule(hash_json({"cfg": 1}), "rule_A_seed1").events
    assert isinstance(rule, RuleCommitted) and rule.index == 1
    assert rule.rule_hash == hash_json({"cfg": 1})
    (agg,) = ledger.commit_aggregation(1, hash_json("m1"), hash_json("u1")).events
    assert isinstance(agg, AggregationCommitted)
    assert (agg.round_id, agg.model_hash, agg.rule_index) == (1, hash_json("m1"), 1)
    with reverts("round already committed"):
        ledger.commit_aggregation(1, hash_json("m1b"), hash_json("u1"))
    with reverts("empty rule hash"):
        ledger.commit_rule(bytes(32), "empty")
    ledger.commit_rule(hash_json({"cfg": 2}), "rule_B")
    ledger.commit_aggregation(2, hash_json("m2"), hash_json("u2"))
    stored = ledger.aggregation(2)
    assert stored is not None and stored.rule_index == 2 and stored.model_hash == hash_json("m2")
    assert ledger.aggregation(3) is None
    assert ledger.rule().label == "rule_B" and ledger.rule(1).label == "rule_A_seed1"
    with pytest.raises(LedgerError, match="no rule 7"):
        ledger.rule(7)
    with pytest.raises(LedgerError, match="label"):
        ledger.commit_rule(hash_json(1), "x" * 129)
    with pytest.raises(ValueError, match="model hash: expected 32 bytes"):
        ledger.commit_aggregation(4, b"short", hash_json("u"))


def test_committee_records_check_their_members(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    record = ledger.committee()
    assert record.members == ("v1", "v2", "v3") and record.majority == 2
    assert record.seed_hash == hash_json("draw-1") and record.round_id == 1
    with reverts("lacks the validation role"):
        ledger.record_committee(2, 2, ["v1", "t1"], hash_json("d"))
    with reverts("duplicate committee member"):
        ledger.record_committee(2, 2, ["v1", "v2", "v1"], hash_json("d"))
    with reverts("election id must increase"):
        ledger.record_committee(1, 2, ["v1", "v2"], hash_json("d"))
    (event,) = ledger.record_committee(2, 2, ["v4", "v2"], hash_json("d2")).events
    assert isinstance(event, CommitteeElected) and event.members == ("v4", "v2")
    assert ledger.current_election() == 2 and ledger.committee(1).members == record.members
    with pytest.raises(LedgerError, match="no committee recorded for election 5"):
        ledger.committee(5)


def test_non_members_and_double_approvals_revert(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    pid, _ = ledger.propose_permission("v4", ACTIVE, WATCHLIST, "two failures", 5)
    with reverts("not a member of the current committee"):
        ledger.approve(pid, "v4")  # a validator, but not on this committee
    with reverts("not a member of the current committee"):
        ledger.approve(pid, "outsider")  # no role at all
    ledger.approve(pid, "v1")
    with reverts("already approved"):
        ledger.approve(pid, "v1")
    assert ledger.proposal(pid).approvals == 1 and ledger.permission("v4") == ACTIVE


def test_a_proposal_without_a_majority_never_takes_effect(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    pid, _ = ledger.propose_permission("v4", ACTIVE, SUSPENDED, "abnormal updates", 3)
    (approval,) = ledger.approve(pid, "v2").events
    assert isinstance(approval, PermissionApproved)
    assert (approval.approvals, approval.needed) == (1, 2)
    assert ledger.permission("v4") == ACTIVE
    assert ledger.proposal(pid).status == ProposalStatus.PENDING
    ledger.record_committee(2, 4, ["v1", "v3", "v4"], hash_json("d2"))  # re-election
    with reverts("committee changed since the proposal"):
        ledger.approve(pid, "v1")
    assert ledger.permission("v4") == ACTIVE
    assert ledger.events(PermissionChanged) == []


def test_a_majority_changes_the_state_and_emits_events(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    pid, rc = ledger.propose_permission("v4", ACTIVE, WATCHLIST, "two failures", 5)
    assert ledger.approve(pid, "v3").events[0].approvals == 1  # type: ignore[attr-defined]
    rc = ledger.approve(pid, "v1")
    approved, changed = rc.events
    assert isinstance(approved, PermissionApproved) and approved.approvals == 2
    assert isinstance(changed, PermissionChanged)
    assert (changed.node, changed.old, changed.new, changed.round_id) == (
        "v4",
        ACTIVE,
        WATCHLIST,
        5,
    )
    assert ledger.permission("v4") == WATCHLIST
    proposal = ledger.proposal(pid)
    assert proposal.status == ProposalStatus.EXECUTED and proposal.reason == "two failures"
    assert ledger.has_approved(pid, "v3") and not ledger.has_approved(pid, "v2")
    with reverts("proposal is not pending"):
        ledger.approve(pid, "v2")
    assert ledger.events(PermissionChanged) == [changed]
    approvals = ledger.events(PermissionApproved)
    assert [e.member for e in approvals] == ["v3", "v1"]


def test_a_stale_proposal_reverts_on_execution(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    first, _ = ledger.propose_permission("v4", ACTIVE, WATCHLIST, "late", 2)
    second, _ = ledger.propose_permission("v4", ACTIVE, SUSPENDED, "failed", 2)
    ledger.approve(second, "v1")
    ledger.approve(first, "v1")
    ledger.approve(first, "v2")  # executes: v4 is on the watchlist now
    with reverts("stale proposal"):
        ledger.approve(second, "v2")
    assert ledger.permission("v4") == WATCHLIST
    assert ledger.proposal(second).status == ProposalStatus.PENDING
    with reverts("old state does not match"):
        ledger.propose_permission("v4", ACTIVE, SUSPENDED, "again", 3)
    with reverts("old and new state are equal"):
        ledger.propose_permission("v4", WATCHLIST, WATCHLIST, "noop", 3)
    with reverts("unknown node"):
        ledger.propose_permission("ghost", ACTIVE, WATCHLIST, "who", 3)


def test_suspended_nodes_neither_approve_nor_sit_on_a_committee(make_ledger: MakeLedger):
    ledger = governed(make_ledger)
    pid, _ = ledger.propose_permission("v3", ACTIVE, SUSPENDED, "violation", 1)
    ledger.approve(pid, "v1")
    ledger.approve(pid, "v2")
    pid, _ = ledger.propose_permission("v4", ACTIVE, WATCHLIST, "late", 1)
    with reverts("caller is suspended or removed"):
        ledger.approve(pid, "v3")  # still seated on the current committee
    with reverts("member is suspended or removed"):
        ledger.record_committee(2, 2, ["v1", "v3"], hash_json("d"))


def test_scenario_b_permission_update_is_auditable(make_ledger: MakeLedger):
    """Paper 000 Table 3: client7 active → watchlist after two failures, round 5."""
    ledger = make_ledger()
    for client in range(1, 10):
        ledger.grant_role(f"client{client}", Role.TRAINING | Role.VALIDATION)
    ledger.commit_rule(hash_json({"scenario": "B", "seed": 1}), "rule_B_seed1")
    for r in range(1, 6):
        ledger.commit_aggregation(r, hash_json(["model", r]), hash_json(["updates", r]))
        ledger.record_committee(r, r, ["client5", "client9"], hash_json(["draw", r]))
    start = ledger.block_number()
    pid, _ = ledger.propose_permission("client7", ACTIVE, WATCHLIST, "Two failures", 5)
    for member in ledger.committee().members:
        ledger.approve(pid, member)
    (change,) = ledger.events(PermissionChanged, from_block=start)
    assert (change.node, change.old, change.new, change.round_id) == (
        "client7",
        ACTIVE,
        WATCHLIST,
        5,
    )
    approvers = [e.member for e in ledger.events(PermissionApproved, from_block=start)]
    assert approvers == ["client5", "client9"]
    assert len(ledger.events(AggregationCommitted)) == 5
    assert [e.round_id for e in ledger.events(CommitteeElected, to_block=start)] == [1, 2, 3, 4, 5]
    assert ledger.events(RuleCommitted, from_block=start) == []
