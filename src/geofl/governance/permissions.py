"""Dynamic permission governance: levels, proposals, trigger rules, votes (000 §3.5.3, Eq. 24).

A node's permission level is one of :class:`PermissionLevel` (small ints 0..3, as the
contract stores them). A change is always a :class:`Proposal`
``p = ⟨u, L_old, L_new, reason, round_id⟩`` (Eq. 24) that the current committee approves
by strict majority (:func:`majority_approved`) before it is applied
(:func:`apply_proposal`).

Trigger rules (§3.5.3: reputation degradation, abnormal behaviour or rule violation,
periodic review, manual intervention), each configured in :class:`PermissionRules`:

* ``consecutive_failures`` — ``failure_streak`` or more consecutive failed rounds
  (000 §4.7 Scenario B: 2) move an active node to the watchlist;
* ``validation_rejected`` — an update rejected by server validation moves an active node
  to the watchlist;
* ``reputation_degraded`` — Rep < ``suspend_below`` → suspended, else Rep <
  ``watchlist_below`` → watchlist (only ever escalating);
* ``periodic_review`` — in rounds that are multiples of ``review_every``, a watchlisted
  node that did not fail this round and whose Rep ≥ ``restore_above`` goes back to active
  (off by default, so that 000 §4.7 Scenario B yields its single change, Table 3);
* ``manual`` — an administrator's request (:func:`manual_proposal`), any change but a no-op.

:meth:`PermissionPolicy.evaluate` makes at most one proposal per node per round: the most
severe escalation triggered (ties resolved in the order consecutive failures, validation
rejection, reputation; every triggered cause is listed in ``detail``), else a restoration.
It never proposes a no-op and never re-proposes a change ``(node, old, new)`` that is
still pending. The rules are level-based, not edge-based: if the committee rejects a
proposal and the condition persists, the next round proposes again. ``removed`` is final
for the automatic rules.

Enforcement for the engine: :func:`participation_allowed` (active and watchlist train;
suspended and removed are excluded; the engine applies this through its permission gate)
and :func:`committee_eligible` (active only). :func:`weight_factor` (active 1, watchlist
``watchlist_weight`` — 1.0 = flagged but not down-weighted —, others 0) is offered for a
strategy that wants to down-weight watchlisted nodes; the engine does not apply it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from geofl.errors import GovernanceError

__all__ = [
    "PermissionLevel",
    "PermissionObservation",
    "PermissionPolicy",
    "PermissionRules",
    "PermissionState",
    "Proposal",
    "ProposalReason",
    "apply_proposal",
    "committee_eligible",
    "majority_approved",
    "manual_proposal",
    "participation_allowed",
    "weight_factor",
]


class PermissionLevel(IntEnum):
    """Permission level L_u of a node (000 Eq. 24); every node starts ``ACTIVE``.

    The int values are the on-chain encoding (the contract's ``permission`` and the
    ``oldState``/``newState`` of its events) and what JSON outputs hold.
    """

    ACTIVE = 0
    WATCHLIST = 1
    SUSPENDED = 2
    REMOVED = 3


class ProposalReason(StrEnum):
    """Why a proposal was made (the ``reason`` of Eq. 24)."""

    CONSECUTIVE_FAILURES = "consecutive_failures"
    VALIDATION_REJECTED = "validation_rejected"
    REPUTATION_DEGRADED = "reputation_degraded"
    PERIODIC_REVIEW = "periodic_review"
    MANUAL = "manual"


@dataclass(frozen=True)
class Proposal:
    """A permission adjustment proposal p = ⟨u, L_old, L_new, reason, round_id⟩ (000 Eq. 24).

    Attributes:
        node: Target node u.
        old: L_u^old.
        new: L_u^new (≠ old).
        reason: Trigger.
        round_id: Round in which it was triggered.
        detail: Human-readable context (e.g. "2 consecutive failures").
    """

    node: int
    old: PermissionLevel
    new: PermissionLevel
    reason: ProposalReason
    round_id: int
    detail: str = ""

    def __post_init__(self) -> None:
        if self.old == self.new:
            raise GovernanceError(
                f"proposal for node {self.node}: new level equals old ({self.old.name})"
            )

    @property
    def change(self) -> tuple[int, PermissionLevel, PermissionLevel]:
        """``(node, old, new)``: the identity used to spot duplicate pending proposals."""
        return (self.node, self.old, self.new)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with levels as ints (contract encoding) and the reason string."""
        return {
            "node": self.node,
            "old": int(self.old),
            "new": int(self.new),
            "reason": str(self.reason),
            "round_id": self.round_id,
            "detail": self.detail,
        }


class PermissionRules(BaseModel):
    """Trigger thresholds of the permission rules (000 §3.5.3, §4.7); None disables a rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    failure_streak: int | None = Field(
        2, ge=1, description="N consecutive failures → watchlist (000 §4.7: 2)"
    )
    validation_rejected: bool = Field(True, description="rejected update → watchlist")
    watchlist_below: float | None = Field(
        0.25, ge=0.0, le=1.0, description="Rep < this → watchlist"
    )
    suspend_below: float | None = Field(0.1, ge=0.0, le=1.0, description="Rep < this → suspended")
    review_every: int | None = Field(
        None, ge=1, description="P: review in rounds P, 2P, ...; None = no periodic review"
    )
    restore_above: float = Field(
        0.6, ge=0.0, le=1.0, description="review: watchlist → active if Rep ≥ this"
    )

    @model_validator(mode="after")
    def _check(self) -> PermissionRules:
        if (
            self.watchlist_below is not None
            and self.suspend_below is not None
            and self.suspend_below > self.watchlist_below
        ):
            raise ValueError(
                f"suspend_below ({self.suspend_below}) must not exceed "
                f"watchlist_below ({self.watchlist_below})"
            )
        if self.watchlist_below is not None and self.restore_above < self.watchlist_below:
            raise ValueError(
                f"restore_above ({self.restore_above}) must not be below "
                f"watchlist_below ({self.watchlist_below})"
            )
        return self


@dataclass(frozen=True)
class PermissionObservation:
    """What the rules see of one node in one round.

    Attributes:
        reputation: Rep (000 Eq. 22) after this round, or None if not scored.
        failure_streak: Consecutive failed rounds up to and including this one (e.g.
            ``ReputationComponents.miss_streak``).
        rejected: The node's update was rejected by server validation this round.
    """

    reputation: float | None = None
    failure_streak: int = 0
    rejected: bool = False


@dataclass(frozen=True)
class PermissionState:
    """Current permission levels and the proposals still awaiting a decision.

    Attributes:
        levels: node id → level; nodes not listed are active.
        pending: Proposals submitted but not yet decided.
    """

    levels: Mapping[int, PermissionLevel] = field(default_factory=dict)
    pending: Collection[Proposal] = ()

    def level(self, node: int) -> PermissionLevel:
        """The node's level (active if unknown)."""
        return PermissionLevel(self.levels.get(node, PermissionLevel.ACTIVE))


class PermissionPolicy:
    """The automatic trigger rules of 000 §3.5.3 (see the module docstring).

    Examples:
        >>> pol = PermissionPolicy(PermissionRules())
        >>> [p.new.name for p in pol.evaluate(5, PermissionState(),
        ...     {7: PermissionObservation(reputation=0.5, failure_streak=2)})]
        ['WATCHLIST']
    """

    def __init__(self, rules: PermissionRules | None = None) -> None:
        self.rules = rules or PermissionRules()

    def is_review_round(self, round_id: int) -> bool:
        """Whether ``round_id`` is a periodic review round (a positive multiple of P)."""
        p = self.rules.review_every
        return p is not None and round_id > 0 and round_id % p == 0

    def evaluate(
        self,
        round_id: int,
        state: PermissionState,
        observations: Mapping[int, PermissionObservation],
    ) -> list[Proposal]:
        """Proposals triggered in round ``round_id``, sorted by node.

        Args:
            round_id: Current round.
            state: Current levels and pending proposals.
            observations: node id → this round's observation.

        Returns:
            At most one proposal per node; none is a no-op or duplicates a pending change.
        """
        pending = {p.change for p in state.pending}
        out: list[Proposal] = []
        for node in sorted(observations):
            prop = self._propose(round_id, node, state.level(node), observations[node])
            if prop is not None and prop.change not in pending:
                out.append(prop)
        return out

    def _propose(
        self, round_id: int, node: int, old: PermissionLevel, obs: PermissionObservation
    ) -> Proposal | None:
        """The one proposal the rules make for ``node`` this round (000 §3.5.3, Eq. 24).

        The most severe escalation above ``old`` (the first triggered cause on a tie,
        every cause in ``detail``), else a periodic-review restoration, else None; a
        removed node gets none.
        """
        if old == PermissionLevel.REMOVED:
            return None
        hits = [h for h in self._escalations(obs) if h[0] > old]
        if hits:
            top = max(h[0] for h in hits)
            chosen = next(h for h in hits if h[0] == top)
            detail = "; ".join(h[2] for h in hits)
            return Proposal(node, old, top, chosen[1], round_id, detail)
        return self._restoration(round_id, node, old, obs)

    def _escalations(
        self, obs: PermissionObservation
    ) -> list[tuple[PermissionLevel, ProposalReason, str]]:
        """Every escalation ``obs`` triggers, as (target, reason, detail) in tie-break
        order: consecutive failures, validation rejection, reputation degradation."""
        r = self.rules
        hits: list[tuple[PermissionLevel, ProposalReason, str]] = []
        if r.failure_streak is not None and obs.failure_streak >= r.failure_streak:
            hits.append(
                (
                    PermissionLevel.WATCHLIST,
                    ProposalReason.CONSECUTIVE_FAILURES,
                    f"{obs.failure_streak} consecutive failures",
                )
            )
        if r.validation_rejected and obs.rejected:
            hits.append(
                (
                    PermissionLevel.WATCHLIST,
                    ProposalReason.VALIDATION_REJECTED,
                    "update rejected by server validation",
                )
            )
        rep = obs.reputation
        if rep is not None:
            if r.suspend_below is not None and rep < r.suspend_below:
                hits.append(
                    (
                        PermissionLevel.SUSPENDED,
                        ProposalReason.REPUTATION_DEGRADED,
                        f"reputation {rep:.3f} < {r.suspend_below:g}",
                    )
                )
            elif r.watchlist_below is not None and rep < r.watchlist_below:
                hits.append(
                    (
                        PermissionLevel.WATCHLIST,
                        ProposalReason.REPUTATION_DEGRADED,
                        f"reputation {rep:.3f} < {r.watchlist_below:g}",
                    )
                )
        return hits

    def _restoration(
        self, round_id: int, node: int, old: PermissionLevel, obs: PermissionObservation
    ) -> Proposal | None:
        """Watchlist → active at a review round for a node that did not fail this round
        and whose Rep ≥ ``restore_above`` (§3.5.3 periodic review), else None."""
        r = self.rules
        rep = obs.reputation
        if (
            old == PermissionLevel.WATCHLIST
            and self.is_review_round(round_id)
            and rep is not None
            and rep >= r.restore_above
            and obs.failure_streak == 0
            and not obs.rejected
        ):
            return Proposal(
                node,
                old,
                PermissionLevel.ACTIVE,
                ProposalReason.PERIODIC_REVIEW,
                round_id,
                f"reputation {rep:.3f} >= {r.restore_above:g} at review",
            )
        return None


def manual_proposal(
    *,
    node: int,
    old: PermissionLevel | int,
    new: PermissionLevel | int,
    round_id: int,
    detail: str = "administrator request",
) -> Proposal:
    """An administrator's permission change request (000 §3.5.3, manual intervention).

    Raises:
        GovernanceError: if ``new`` equals ``old`` or a level is not 0..3.
    """
    try:
        lo, ln = PermissionLevel(old), PermissionLevel(new)
    except ValueError:
        raise GovernanceError(f"level: {old!r} / {new!r} must be 0..3") from None
    return Proposal(node, lo, ln, ProposalReason.MANUAL, round_id, detail)


def majority_approved(*, approvals: Iterable[int], committee: Collection[int]) -> bool:
    """Approved iff distinct current committee members approving > |committee| / 2.

    Approvals from nodes outside the committee and repeated approvals are ignored.

    Raises:
        GovernanceError: if the committee is empty.
    """
    members = set(committee)
    if not members:
        raise GovernanceError("committee: empty; no proposal can be approved")
    valid = members.intersection(approvals)
    return 2 * len(valid) > len(members)


def apply_proposal(
    levels: Mapping[int, PermissionLevel], proposal: Proposal
) -> dict[int, PermissionLevel]:
    """A copy of ``levels`` with an approved proposal applied.

    Raises:
        GovernanceError: if the node's current level is not the proposal's ``old``
            (stale proposal).
    """
    cur = PermissionLevel(levels.get(proposal.node, PermissionLevel.ACTIVE))
    if cur != proposal.old:
        raise GovernanceError(
            f"proposal for node {proposal.node} is stale: expects {proposal.old.name}, "
            f"node is {cur.name}"
        )
    out = dict(levels)
    out[proposal.node] = proposal.new
    return out


def participation_allowed(level: PermissionLevel | int) -> bool:
    """Whether a node at ``level`` may train and send updates (active, watchlist)."""
    return PermissionLevel(level) <= PermissionLevel.WATCHLIST


def weight_factor(level: PermissionLevel | int, *, watchlist_weight: float = 1.0) -> float:
    """Multiplier of a node's aggregation weight: 1 active, ``watchlist_weight``, else 0."""
    lvl = PermissionLevel(level)
    if lvl == PermissionLevel.ACTIVE:
        return 1.0
    if lvl == PermissionLevel.WATCHLIST:
        return watchlist_weight
    return 0.0


def committee_eligible(level: PermissionLevel | int) -> bool:
    """Whether a node at ``level`` may stand for the committee (active only)."""
    return PermissionLevel(level) == PermissionLevel.ACTIVE
