"""Committee election (000 Eq. 23): distribution, α, reproducibility, shortfall, re-election."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.stats import chisquare

from geofl.errors import GovernanceError
from geofl.governance.committee import (
    CommitteeParams,
    elect_committee,
    election_id_for_round,
    is_election_round,
    seed_commitment,
    verify_election,
)
from geofl.governance.election_draw import (
    election_probabilities,
    weighted_sample_without_replacement,
)
from geofl.rng import numpy_generator

# node 5 is below τ = 0.5 and never a candidate.
REP = {1: 0.9, 2: 0.8, 3: 0.6, 4: 0.55, 5: 0.3}


def first_members(alpha: float, n: int, seed: int = 1) -> np.ndarray:
    params = CommitteeParams(size=2, tau=0.5, alpha=alpha)
    return np.array(
        [
            elect_committee(
                reputation=REP, params=params, seed=seed, election_id=e, round_id=e
            ).members[0]
            for e in range(n)
        ]
    )


def test_eq23_probabilities() -> None:
    # α = 2: Rep² = .81 .64 .36 .3025, Σ = 2.1125 → .383432 .302959 .170414 .143195
    p = election_probabilities(reputation=[0.9, 0.8, 0.6, 0.55], alpha=2.0)
    assert p == pytest.approx([0.81 / 2.1125, 0.64 / 2.1125, 0.36 / 2.1125, 0.3025 / 2.1125])
    assert election_probabilities(reputation=[0.0, 0.0], alpha=1.0) == pytest.approx([0.5, 0.5])
    with pytest.raises(GovernanceError, match="alpha"):
        election_probabilities(reputation=[0.5], alpha=0.0)


def test_first_draw_matches_eq23_chisquare() -> None:
    n = 20_000
    first = first_members(alpha=2.0, n=n)
    assert 5 not in first
    counts = np.array([(first == k).sum() for k in (1, 2, 3, 4)])
    expected = n * election_probabilities(reputation=[0.9, 0.8, 0.6, 0.55], alpha=2.0)
    assert chisquare(counts, expected).pvalue > 0.001


def test_record_probabilities_and_members() -> None:
    rec = elect_committee(
        reputation=REP,
        params=CommitteeParams(size=2, alpha=2.0),
        seed=3,
        election_id=0,
        round_id=1,
    )
    assert len(set(rec.members)) == 2 and set(rec.members) <= {1, 2, 3, 4}
    assert [c.node for c in rec.candidates] == [1, 2, 3, 4, 5]
    assert rec.candidates[4].eligible is False and rec.candidates[4].probability == 0.0
    assert rec.candidates[0].probability == pytest.approx(0.81 / 2.1125)
    assert rec.filled == ()
    d = rec.to_dict()
    assert d["members"] == list(rec.members) and "seed" not in d


def test_alpha_above_one_favours_high_reputation() -> None:
    # P(top) = .383 for α = 2 vs √.9 / Σ√Rep = .9487/3.3593 = .282 for α = ½
    hi = (first_members(alpha=2.0, n=2000) == 1).mean()
    lo = (first_members(alpha=0.5, n=2000) == 1).mean()
    assert hi > lo + 0.05
    p = [election_probabilities(reputation=[0.9, 0.5], alpha=a)[0] for a in (0.5, 1.0, 3.0)]
    assert p[0] < p[1] < p[2]


def test_reproducible_and_election_id_sensitive() -> None:
    params = CommitteeParams(size=2, alpha=1.0)

    def elect(seed: int, eid: int) -> tuple[int, ...]:
        rec = elect_committee(
            reputation=REP, params=params, seed=seed, election_id=eid, round_id=eid
        )
        return rec.members

    assert elect(7, 4) == elect(7, 4)
    a = elect_committee(reputation=REP, params=params, seed=7, election_id=4, round_id=4)
    b = elect_committee(reputation=REP, params=params, seed=7, election_id=4, round_id=4)
    assert a.digest() == b.digest()
    # another election id (or seed) is another draw: not all 20 ids give one committee
    assert len({elect(7, e) for e in range(20)}) > 1
    assert len({elect(s, 4) for s in range(20)}) > 1
    assert seed_commitment(7, 4) != seed_commitment(7, 5) != seed_commitment(8, 4)
    assert verify_election(a, seed=7)
    assert not verify_election(a, seed=8)


def test_sampling_without_replacement() -> None:
    rng = numpy_generator(0, "test")
    for _ in range(200):
        idx = weighted_sample_without_replacement(weights=[0.0, 1.0, 2.0, 0.0], size=3, rng=rng)
        # the two positive weights come first, then the zero-weight pick is uniform
        assert sorted(idx[:2].tolist()) == [1, 2] and idx[2] in (0, 3)
    with pytest.raises(GovernanceError, match="size"):
        weighted_sample_without_replacement(weights=[1.0], size=2, rng=rng)


def test_shortfall_fill_and_raise(caplog: pytest.LogCaptureFixture) -> None:
    rep = {1: 0.9, 2: 0.4, 3: 0.45, 4: 0.1}
    with caplog.at_level(logging.WARNING, logger="geofl.governance.committee"):
        rec = elect_committee(
            reputation=rep,
            params=CommitteeParams(size=3, tau=0.5),
            seed=1,
            election_id=0,
            round_id=1,
        )
    # only node 1 reaches τ; fills are the best below τ: 3 (.45), then 2 (.4)
    assert rec.members == (1, 3, 2) and rec.filled == (3, 2)
    assert "filling" in caplog.text
    with pytest.raises(GovernanceError, match="tau"):
        elect_committee(
            reputation=rep,
            params=CommitteeParams(size=3, tau=0.5, shortfall="raise"),
            seed=1,
            election_id=0,
            round_id=1,
        )
    with pytest.raises(GovernanceError, match="size"):
        elect_committee(
            reputation=rep, params=CommitteeParams(size=5), seed=1, election_id=0, round_id=1
        )


def test_validators_restrict_the_pool() -> None:
    rec = elect_committee(
        reputation=REP,
        params=CommitteeParams(size=2),
        seed=1,
        election_id=0,
        round_id=1,
        validators=[3, 4, 5],
    )
    assert set(rec.members) == {3, 4}
    with pytest.raises(GovernanceError, match="reputation"):
        elect_committee(
            reputation=REP,
            params=CommitteeParams(size=2),
            seed=1,
            election_id=0,
            round_id=1,
            validators=[3, 4, 99],
        )


def test_reelection_schedule() -> None:
    assert all(is_election_round(r, every=1) for r in range(1, 11))
    assert [r for r in range(1, 11) if is_election_round(r, every=3)] == [1, 4, 7, 10]
    assert [election_id_for_round(r, every=3) for r in (1, 3, 4, 10)] == [0, 0, 1, 3]
    assert not is_election_round(0, every=1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": -1.0}, "alpha"),
        ({"size": 0}, "size"),
        ({"every": 0}, "every"),
        ({"shortfall": "drop"}, "shortfall"),
    ],
)
def test_bad_params_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        CommitteeParams.model_validate(kwargs)


def test_protection_term_hand_numbers() -> None:
    # α = 1, γ = 1: w = Rep·(1 + p) = .9·1 .8·2 .6·1.5 → .9 1.6 .9, Σ = 3.4
    p = election_probabilities(
        reputation=[0.9, 0.8, 0.6], alpha=1.0, protection=[0.0, 1.0, 0.5], protection_weight=1.0
    )
    assert p == pytest.approx([0.9 / 3.4, 1.6 / 3.4, 0.9 / 3.4])
    # γ = 0 is Eq. 23 whatever p says
    p0 = election_probabilities(
        reputation=[0.9, 0.8], alpha=1.0, protection=[0.0, 1.0], protection_weight=0.0
    )
    assert p0 == pytest.approx([0.9 / 1.7, 0.8 / 1.7])
    with pytest.raises(GovernanceError, match="protection"):
        election_probabilities(
            reputation=[0.9, 0.8], alpha=1.0, protection=[0.0, 1.5], protection_weight=1.0
        )


def test_protection_recorded_verified_and_absent_from_plain_records() -> None:
    params = CommitteeParams(size=2, tau=0.5, protection_weight=2.0)
    prot = {1: 0.0, 2: 0.2, 3: 1.0, 4: 0.6}
    rec = elect_committee(
        reputation=REP, params=params, seed=7, election_id=3, round_id=3, protection=prot
    )
    assert [c.protection for c in rec.candidates] == [0.0, 0.2, 1.0, 0.6, 0.0]
    # 0.9·1, 0.8·1.4, 0.6·3, 0.55·2.2 → .9 1.12 1.8 1.21, Σ = 5.03
    assert rec.candidates[2].probability == pytest.approx(1.8 / 5.03)
    assert rec.to_dict()["protection_weight"] == 2.0
    assert verify_election(rec, seed=7)
    plain = elect_committee(
        reputation=REP,
        params=CommitteeParams(size=2),
        seed=7,
        election_id=3,
        round_id=3,
        protection=prot,
    )
    d = plain.to_dict()
    assert "protection_weight" not in d and "protection" not in d["candidates"][0]
