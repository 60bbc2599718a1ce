"""Reputation-weighted committee election (000 §3.5.2, Eq. 23).

Validators whose reputation reaches the threshold τ form the candidate set C; ``size``
members are drawn from C at random **without replacement**, by sequential draws: the first
member is drawn with Eq. 23's probability ``P(i) = Rep_i^α / Σ_{j∈C} Rep_j^α``, and each
later member with the same formula renormalised over the candidates not yet drawn. (So
Eq. 23 is exactly the probability of being the *first* member; the probability of being
in the committee at all is larger and, for ``size > 1``, not proportional to Rep^α.) If
every remaining candidate has Rep^α = 0 the draw among them is uniform.

α > 1 favours high-reputation nodes, α < 1 flattens the odds (more randomness); α = 1 is
plain reputation-proportional sampling.

Data protection (§3.5.2 item 2 says nodes with stronger data protection get higher
election weights but gives no formula): with ``protection_weight`` γ > 0 every weight
Rep^α becomes Rep^α·(1 + γ·p), p ∈ [0, 1] the node's relative protection (the governance
process passes its mean observed perturbation σ̂ over the reputation window divided by
the largest candidate's). γ = 0, the default, is Eq. 23 as printed.

The draw takes its generator from :func:`geofl.rng.numpy_generator` of
``(seed, "committee", election_id)``, so an election depends only on the seed, its id and
the reputations: anyone holding the seed can re-run and audit it
(:func:`verify_election`). The record carries a SHA-256 commitment to that seed material
(:func:`seed_commitment`), to be written on-chain before the seed is revealed.

The committee is re-elected every R rounds (:func:`is_election_round`; 000 §4.7 uses
R = 1). If fewer than ``size`` validators reach τ, ``shortfall="fill"`` (default) takes all
candidates and fills the remaining seats with the best validators below τ (highest
reputation first, ties by node id), logging a warning and listing them in
``CommitteeRecord.filled`` — governance keeps running but the shortfall is on record;
``shortfall="raise"`` raises :class:`~geofl.errors.GovernanceError` instead. Fewer
validators than seats always raises.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import GovernanceError
from geofl.governance.election_draw import (
    election_probabilities,
    election_weights,
    weighted_sample_without_replacement,
)
from geofl.rng import numpy_generator

__all__ = [
    "Candidate",
    "CommitteeParams",
    "CommitteeRecord",
    "elect_committee",
    "election_id_for_round",
    "is_election_round",
    "seed_commitment",
    "verify_election",
]

log = logging.getLogger(__name__)


class CommitteeParams(BaseModel):
    """Committee election parameters (000 Eq. 23, §4.7)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(2, ge=1, description="committee seats (000 §4.7: 2)")
    tau: float = Field(0.5, ge=0.0, description="τ: candidates need Rep ≥ τ")
    alpha: float = Field(1.0, gt=0.0, description="α of Eq. 23: >1 favours high reputation")
    protection_weight: float = Field(
        0.0,
        ge=0.0,
        description="γ: election weight Rep^α·(1 + γ·p) with p ∈ [0, 1] the node's relative "
        "data protection (000 §3.5.2 item 2); 0 = Eq. 23 as printed",
    )
    every: int = Field(1, ge=1, description="R: re-elect every R rounds (000 §4.7: 1)")
    first_round: int = Field(1, description="round of the first election")
    shortfall: Literal["fill", "raise"] = Field(
        "fill", description="fewer candidates than seats: fill from below τ, or raise"
    )


def is_election_round(round_id: int, *, every: int, first_round: int = 1) -> bool:
    """Whether round ``round_id`` elects a new committee (every R rounds from the first).

    Args:
        round_id: The round.
        every: R ≥ 1.
        first_round: Round of the first election.

    Returns:
        True for ``first_round, first_round + R, first_round + 2R, ...``.
    """
    if every < 1:
        raise GovernanceError(f"every: R must be >= 1, got {every}")
    return round_id >= first_round and (round_id - first_round) % every == 0


def election_id_for_round(round_id: int, *, every: int, first_round: int = 1) -> int:
    """Index (0, 1, ...) of the election whose committee serves round ``round_id``."""
    if every < 1:
        raise GovernanceError(f"every: R must be >= 1, got {every}")
    if round_id < first_round:
        raise GovernanceError(f"round_id {round_id} precedes first_round {first_round}")
    return (round_id - first_round) // every


def seed_commitment(seed: int, election_id: int) -> str:
    """SHA-256 hex of the election's seed material ``["committee", seed, election_id]``."""
    material = json.dumps(["committee", int(seed), int(election_id)], separators=(",", ":"))
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class Candidate:
    """One validator at an election.

    Attributes:
        node: Node id.
        reputation: Rep at election time.
        eligible: Rep ≥ τ (member of the candidate set C).
        probability: Eq. 23 probability of being drawn first (0 if not eligible).
        protection: Relative data protection p ∈ [0, 1] used in the draw weight (0 when
            the election does not weigh protection).
    """

    node: int
    reputation: float
    eligible: bool
    probability: float
    protection: float = 0.0


@dataclass(frozen=True)
class CommitteeRecord:
    """The outcome of one election, ready to be committed to a ledger.

    Attributes:
        election_id: Election index (seed key).
        round_id: Round at which the election ran.
        members: Elected node ids in draw order (fills last).
        candidates: Every validator, sorted by node id, with Eq. 23 probabilities.
        filled: Members taken from below τ because C had fewer nodes than seats.
        size: Seats.
        tau: τ.
        alpha: α.
        seed_commitment: SHA-256 of the seed material (:func:`seed_commitment`).
        protection_weight: γ of the protection term (0: Eq. 23 as printed; the record's
            JSON then omits γ and the candidates' p, as records did before the term).
    """

    election_id: int
    round_id: int
    members: tuple[int, ...]
    candidates: tuple[Candidate, ...]
    filled: tuple[int, ...]
    size: int
    tau: float
    alpha: float
    seed_commitment: str
    protection_weight: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the raw seed is not included, only its commitment)."""
        d = asdict(self)
        d["members"] = list(self.members)
        d["filled"] = list(self.filled)
        d["candidates"] = [asdict(c) for c in self.candidates]
        if self.protection_weight == 0.0:
            del d["protection_weight"]
            for c in d["candidates"]:
                del c["protection"]
        return d

    def digest(self) -> str:
        """SHA-256 hex of the canonical JSON of :meth:`to_dict`."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _validator_reputations(
    reputation: Mapping[int, float], validators: Iterable[int] | None, seats: int
) -> tuple[list[int], np.ndarray]:
    """The sorted validator ids and their ``[n]`` float64 reputations, checked.

    Raises:
        GovernanceError: a validator without a reputation, a negative or non-finite one, or
            fewer validators than seats.
    """
    nodes = sorted(set(reputation if validators is None else validators))
    missing = [n for n in nodes if n not in reputation]
    if missing:
        raise GovernanceError(f"reputation: no value for validators {missing}")
    rep = np.array([float(reputation[n]) for n in nodes], dtype=np.float64)
    if not np.all(np.isfinite(rep)) or np.any(rep < 0):
        raise GovernanceError("reputation: values must be finite and >= 0")
    if len(nodes) < seats:
        raise GovernanceError(f"size: {seats} seats but only {len(nodes)} validators {nodes}")
    return nodes, rep


def _fill_shortfall(
    nodes: list[int],
    rep: np.ndarray,
    eligible: np.ndarray,
    params: CommitteeParams,
    where: str,
) -> list[int]:
    """Seats fewer validators reach τ for: the best below τ (``shortfall: fill``), highest
    reputation first, ties by id.

    Raises:
        GovernanceError: with ``shortfall: raise``.
    """
    reach = int(eligible.sum())
    msg = f"{where}: {reach} validators reach tau={params.tau:g} for {params.size} seats"
    if params.shortfall == "raise":
        raise GovernanceError(f"tau: {msg}; lower tau or set shortfall='fill'")
    below = sorted(np.flatnonzero(~eligible), key=lambda k: (-rep[k], nodes[k]))
    filled = [nodes[k] for k in below[: params.size - reach]]
    log.warning("%s; filling with the best below tau: %s", msg, filled)
    return filled


def _candidate_probabilities(
    rep: np.ndarray, prot: np.ndarray, idx_c: np.ndarray, params: CommitteeParams
) -> np.ndarray:
    """``[n]`` Eq. 23 selection probabilities of every validator: those of the candidates
    ``idx_c`` (Rep ≥ τ), 0 for the others."""
    probs = np.zeros(len(rep))
    if idx_c.size:
        probs[idx_c] = election_probabilities(
            reputation=rep[idx_c],
            alpha=params.alpha,
            protection=prot[idx_c],
            protection_weight=params.protection_weight,
        )
    return probs


def _draw_members(
    nodes: list[int],
    rep_c: np.ndarray,
    prot_c: np.ndarray,
    idx_c: np.ndarray,
    n_draw: int,
    params: CommitteeParams,
    rng: np.random.Generator,
) -> list[int]:
    """``n_draw`` members drawn without replacement from the candidates ``idx_c`` (rows of
    ``nodes``; ``rep_c``, ``prot_c`` their Rep and protection) with the Eq. 23 weights."""
    if not n_draw:
        return []
    weights = election_weights(
        reputation=rep_c,
        alpha=params.alpha,
        protection=prot_c,
        protection_weight=params.protection_weight,
    )
    drawn = weighted_sample_without_replacement(weights=weights, size=n_draw, rng=rng)
    return [nodes[int(idx_c[k])] for k in drawn]


def elect_committee(
    *,
    reputation: Mapping[int, float],
    params: CommitteeParams,
    seed: int,
    election_id: int,
    round_id: int,
    validators: Iterable[int] | None = None,
    protection: Mapping[int, float] | None = None,
) -> CommitteeRecord:
    """Elect a committee: threshold τ, then weighted draws without replacement (Eq. 23).

    Args:
        reputation: node id → Rep (Eq. 22) of at least every validator.
        params: Seats, τ, α and the shortfall policy.
        seed: Experiment seed.
        election_id: Election index; with ``seed`` it fixes the random draw.
        round_id: Round the election runs at (recorded only).
        validators: Nodes allowed to sit on the committee (default: every node in
            ``reputation``); the caller excludes suspended/removed nodes here.
        protection: node id → relative data protection p ∈ [0, 1], used when
            ``params.protection_weight`` > 0 (missing nodes count as 0).

    Returns:
        The :class:`CommitteeRecord`.

    Raises:
        GovernanceError: if a validator has no or an invalid reputation, if there are
            fewer validators than seats, or if C is too small and ``shortfall="raise"``.
    """
    nodes, rep = _validator_reputations(reputation, validators, params.size)
    gamma = params.protection_weight
    prot = np.array([float((protection or {}).get(n, 0.0)) if gamma else 0.0 for n in nodes])
    eligible = rep >= params.tau
    idx_c = np.flatnonzero(eligible)
    probs = _candidate_probabilities(rep, prot, idx_c, params)
    n_draw = min(params.size, int(idx_c.size))
    filled: list[int] = []
    if n_draw < params.size:
        where = f"election {election_id} (round {round_id})"
        filled = _fill_shortfall(nodes, rep, eligible, params, where)
    members = _draw_members(
        nodes,
        rep[idx_c],
        prot[idx_c],
        idx_c,
        n_draw,
        params,
        numpy_generator(seed, "committee", election_id),
    )
    return CommitteeRecord(
        election_id=election_id,
        round_id=round_id,
        members=tuple(members + filled),
        candidates=tuple(
            Candidate(n, float(rep[k]), bool(eligible[k]), float(probs[k]), float(prot[k]))
            for k, n in enumerate(nodes)
        ),
        filled=tuple(filled),
        size=params.size,
        tau=params.tau,
        alpha=params.alpha,
        seed_commitment=seed_commitment(seed, election_id),
        protection_weight=gamma,
    )


def verify_election(record: CommitteeRecord, *, seed: int) -> bool:
    """Re-run an election from its record and a revealed seed; True if it matches.

    Checks the seed against the record's commitment, then repeats the draw from the
    recorded reputations, protections, τ, α, γ and size.
    """
    if seed_commitment(seed, record.election_id) != record.seed_commitment:
        return False
    params = CommitteeParams(
        size=record.size,
        tau=record.tau,
        alpha=record.alpha,
        shortfall="fill",
        protection_weight=record.protection_weight,
    )
    again = elect_committee(
        reputation={c.node: c.reputation for c in record.candidates},
        params=params,
        seed=seed,
        election_id=record.election_id,
        round_id=record.round_id,
        protection={c.node: c.protection for c in record.candidates},
    )
    same_probs = all(
        math.isclose(a.probability, b.probability, rel_tol=1e-12, abs_tol=1e-15)
        for a, b in zip(again.candidates, record.candidates, strict=True)
    )
    return again.members == record.members and same_probs
