"""Permission governance (000 §3.5.3, Eq. 24) and the §4.7 Scenario B closed loop."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from geofl.errors import GovernanceError
from geofl.governance.committee import CommitteeParams, elect_committee, election_id_for_round
from geofl.governance.permissions import (
    PermissionLevel,
    PermissionObservation,
    PermissionPolicy,
    PermissionRules,
    PermissionState,
    Proposal,
    ProposalReason,
    apply_proposal,
    committee_eligible,
    majority_approved,
    manual_proposal,
    participation_allowed,
    weight_factor,
)
from geofl.governance.reputation import NodeObservation, ReputationTracker

A, W, S, R = (
    PermissionLevel.ACTIVE,
    PermissionLevel.WATCHLIST,
    PermissionLevel.SUSPENDED,
    PermissionLevel.REMOVED,
)
Obs = PermissionObservation
CLIENTS = (1, 3, 5, 7, 8, 9)


def scenario_b_observations(t: int) -> dict[int, NodeObservation]:
    """Six clients; client 7 fails rounds 4 and 5 (000 §4.7 Scenario B)."""
    return {
        c: NodeObservation(False)
        if c == 7 and t in (4, 5)
        else NodeObservation(True, 0.01, 0.9, 5.0 + 0.1 * ((t + c) % 3), 0.05)
        for c in CLIENTS
    }


def test_scenario_b_closed_loop() -> None:
    tracker = ReputationTracker()
    policy = PermissionPolicy()  # N = 2 consecutive failures → watchlist
    cparams = CommitteeParams(size=2, tau=0.5, alpha=1.0, every=1)  # R = 1
    levels: dict[int, PermissionLevel] = {}
    proposals: list[Proposal] = []
    approvers: dict[int, tuple[int, ...]] = {}
    for t in range(1, 11):
        comps = tracker.update(t, scenario_b_observations(t))
        rep = {n: c.reputation for n, c in comps.items()}
        committee = elect_committee(
            reputation=rep,
            params=cparams,
            seed=1,
            election_id=election_id_for_round(t, every=cparams.every),
            round_id=t,
            validators=[n for n in rep if committee_eligible(levels.get(n, A))],
        )
        obs = {
            n: Obs(reputation=c.reputation, failure_streak=c.miss_streak) for n, c in comps.items()
        }
        for p in policy.evaluate(t, PermissionState(levels=levels), obs):
            # this round's committee votes; both members approve
            assert majority_approved(approvals=committee.members, committee=committee.members)
            levels = apply_proposal(levels, p)
            approvers[t] = committee.members
            proposals.append(p)
    # exactly one proposal: client 7, active → watchlist, in round 5 (the second failure)
    assert proposals == [
        Proposal(7, A, W, ProposalReason.CONSECUTIVE_FAILURES, 5, "2 consecutive failures")
    ]
    assert levels == {7: W}
    assert 7 not in approvers[5]  # client 7 (Rep < τ) did not approve its own change
    assert proposals[0].to_dict() == {
        "node": 7,
        "old": 0,
        "new": 1,
        "reason": "consecutive_failures",
        "round_id": 5,
        "detail": "2 consecutive failures",
    }


def test_first_failure_alone_triggers_nothing() -> None:
    pol = PermissionPolicy()
    assert pol.evaluate(4, PermissionState(), {7: Obs(reputation=0.4, failure_streak=1)}) == []


def test_no_majority_is_not_approved() -> None:
    committee = (3, 8)
    assert not majority_approved(approvals=[3], committee=committee)  # 1 of 2 is not > 1
    assert not majority_approved(approvals=[3, 3], committee=committee)  # not distinct
    assert not majority_approved(approvals=[3, 9], committee=committee)  # 9 not a member
    assert majority_approved(approvals=[8, 3], committee=committee)
    assert majority_approved(approvals=[1, 2], committee=(1, 2, 3))  # 2 of 3 > 1.5
    with pytest.raises(GovernanceError, match="committee"):
        majority_approved(approvals=[1], committee=())


def test_pending_change_is_not_proposed_twice() -> None:
    pol = PermissionPolicy()
    first = pol.evaluate(5, PermissionState(), {7: Obs(0.5, 2)})
    assert len(first) == 1
    # not yet decided: streak 3 in round 6 must not repeat it
    again = pol.evaluate(6, PermissionState(pending=first), {7: Obs(0.5, 3)})
    assert again == []
    # rejected (no longer pending) and the condition persists → proposed again
    assert len(pol.evaluate(6, PermissionState(), {7: Obs(0.5, 3)})) == 1


def test_never_a_noop_and_removed_is_final() -> None:
    pol = PermissionPolicy()
    state = PermissionState(levels={1: W, 2: S, 3: R})
    obs = {1: Obs(0.2, 3), 2: Obs(0.5, 0, rejected=True), 3: Obs(0.0, 9, rejected=True)}
    # 1: watchlist already (Rep .2 < .25 → watchlist again: no-op); 2: rejection would only
    # lower suspended to watchlist; 3: removed
    assert pol.evaluate(7, state, obs) == []


def test_most_severe_trigger_wins() -> None:
    pol = PermissionPolicy()
    [p] = pol.evaluate(3, PermissionState(), {4: Obs(0.05, 2, rejected=True)})
    assert (p.old, p.new, p.reason) == (A, S, ProposalReason.REPUTATION_DEGRADED)
    assert "2 consecutive failures" in p.detail and "rejected" in p.detail
    [p] = pol.evaluate(3, PermissionState(), {4: Obs(0.2, 0)})
    assert (p.new, p.reason) == (W, ProposalReason.REPUTATION_DEGRADED)
    [p] = pol.evaluate(3, PermissionState(), {4: Obs(0.9, 0, rejected=True)})
    assert (p.new, p.reason) == (W, ProposalReason.VALIDATION_REJECTED)
    [p] = pol.evaluate(3, PermissionState(levels={4: W}), {4: Obs(0.05, 0)})
    assert (p.old, p.new) == (W, S)


def test_periodic_review_restores_recovered_nodes() -> None:
    pol = PermissionPolicy(PermissionRules(review_every=5, restore_above=0.6))
    state = PermissionState(levels={1: W, 2: W, 3: W})
    obs = {1: Obs(0.7, 0), 2: Obs(0.5, 0), 3: Obs(0.8, 1)}
    assert pol.evaluate(9, state, obs) == []  # not a review round
    [p] = pol.evaluate(10, state, obs)  # only node 1: recovered and not failing
    assert (p.node, p.old, p.new, p.reason) == (1, W, A, ProposalReason.PERIODIC_REVIEW)
    assert PermissionPolicy().evaluate(10, state, obs) == []  # reviews are off by default


def test_manual_proposal_and_apply() -> None:
    p = manual_proposal(node=3, old=0, new=3, round_id=2)
    assert (p.old, p.new, p.reason) == (A, R, ProposalReason.MANUAL)
    assert apply_proposal({}, p) == {3: R}
    with pytest.raises(GovernanceError, match="stale"):
        apply_proposal({3: S}, p)
    with pytest.raises(GovernanceError, match="equals old"):
        manual_proposal(node=3, old=1, new=1, round_id=2)
    with pytest.raises(GovernanceError, match="level"):
        manual_proposal(node=3, old=0, new=7, round_id=2)


def test_enforcement() -> None:
    assert [int(x) for x in PermissionLevel] == [0, 1, 2, 3]
    assert [participation_allowed(x) for x in (0, 1, 2, 3)] == [True, True, False, False]
    assert [weight_factor(x) for x in PermissionLevel] == [1.0, 1.0, 0.0, 0.0]
    assert weight_factor(W, watchlist_weight=0.5) == 0.5
    assert [committee_eligible(x) for x in PermissionLevel] == [True, False, False, False]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"failure_streak": 0}, "failure_streak"),
        ({"suspend_below": 0.5, "watchlist_below": 0.3}, "suspend_below"),
        ({"restore_above": 0.1}, "restore_above"),
        ({"review": 5}, "review"),
    ],
)
def test_bad_rules_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        PermissionRules.model_validate(kwargs)
