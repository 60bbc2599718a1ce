"""Reputation model (000 Eq. 18–22): hand-computed components on a 3-node, T = 3 example."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from geofl.errors import GovernanceError
from geofl.governance.reputation import (
    NodeObservation,
    ReputationParams,
    ReputationTracker,
    behavior_variance,
    consistency_reputation,
    contribution_reputation,
    participation_reputation,
    total_reputation,
    update_quality,
)

# Params of the worked example: λ1 = λ2 = ½, g(d) = clip(½ + d/0.1, 0, 1) (s = 0.05),
# r: ρ_up = ¼, ρ_down = ½, κ = ¼; Eq. 21 exactly (v_floor = 0), π = ½; w = (0.4, 0.3, 0.3).
EXAMPLE = ReputationParams(variance_floor=0.0)

Ob = NodeObservation
FAIL = NodeObservation(participated=False)

# (ΔAcc, S, norm, σ) per round; node 1: steady; node 2: fluctuating norm, low quality;
# node 3: fails round 2.
ROUNDS: list[dict[int, NodeObservation]] = [
    {
        1: Ob(True, 0.01, 0.9, 2.0, 0.1),
        2: Ob(True, -0.01, 0.6, 1.0, 0.1),
        3: Ob(True, 0.05, 0.5, 4.0, 0.2),
    },
    {
        1: Ob(True, 0.00, 0.8, 2.0, 0.1),
        2: Ob(True, -0.05, 0.6, 3.0, 0.1),
        3: FAIL,
    },
    {
        1: Ob(True, 0.02, 1.0, 2.0, 0.1),
        2: Ob(True, 0.00, 0.6, 2.0, 0.1),
        3: Ob(True, 0.00, 0.7, 4.0, 0.2),
    },
]


def run(params: ReputationParams, rounds: list[dict[int, NodeObservation]]) -> ReputationTracker:
    tr = ReputationTracker(params)
    for t, obs in enumerate(rounds, start=1):
        tr.update(t, obs)
    return tr


def last(tr: ReputationTracker) -> dict[int, tuple[float, float, float, float]]:
    rows = [c for c in tr.history if c.round_id == max(c.round_id for c in tr.history)]
    return {c.node: (c.contribution, c.participation, c.consistency, c.reputation) for c in rows}


def test_three_node_window_example() -> None:
    got = last(run(EXAMPLE, ROUNDS))
    # Contribution (Eq. 18–19), g = 0.5 + ΔAcc/0.1, Q = (g + S)/2:
    #   node 1: g = .6 .5 .7; Q = (.6+.9)/2 = .75, (.5+.8)/2 = .65, (.7+1)/2 = .85 → mean .75
    #   node 2: g = .4 0 .5;  Q = .5, .3, .55 → 1.35/3 = .45
    #   node 3: g = 1 – .5;   Q = .75, (failed: skipped), .6 → .675
    # Participation: nodes 1, 2 never miss → r = 1. Node 3: r = 1 → miss: ½·1 = .5 (m = 1)
    #   → hit: .5 + ¼·(1 − .5) = .625, m = 0 → .625.
    # Consistency (Eq. 20–21): features scaled by their max over nodes × rounds
    #   norm /4: n1 .5 .5 .5 | n2 .25 .75 .5 | n3 1 0 1   (a failed round has norm 0)
    #   σ /.2:   n1 .5 .5 .5 | n2 .5 .5 .5   | n3 1 0 1   (and σ 0)
    #   x:       n1 1 1 1    | n2 1 1 1      | n3 1 0 1
    #   Var (population, mean over 3 features): n1 0; n2 (.0625+.0625+0)/3/3 = 1/72;
    #   n3 each feature 2/9 → 2/9. max = 2/9 → n1 1, n2 1 − (1/72)/(2/9) = 1 − 1/16 = .9375,
    #   n3 (1 − 1)·(1 − ½·⅓) = 0.
    # Total (Eq. 22): n1 .4·.75 + .3·1 + .3·1 = .9
    #                 n2 .4·.45 + .3·1 + .3·.9375 = .18 + .3 + .28125 = .76125
    #                 n3 .4·.675 + .3·.625 + .3·0 = .27 + .1875 = .4575
    expected = {
        1: (0.75, 1.0, 1.0, 0.9),
        2: (0.45, 1.0, 0.9375, 0.76125),
        3: (0.675, 0.625, 0.0, 0.4575),
    }
    for node, comps in expected.items():
        assert got[node] == pytest.approx(comps, abs=1e-12), node


def test_variance_floor_and_inactivity_penalty() -> None:
    # Same data, v_floor = 0.5 > max Var = 2/9:
    #   n1 1; n2 1 − (1/72)/0.5 = 1 − 1/36 = .972222; n3 (1 − (2/9)/.5)·(1 − ½·⅓) = (5/9)(5/6)
    got = last(run(ReputationParams(variance_floor=0.5), ROUNDS))
    assert got[1][2] == pytest.approx(1.0)
    assert got[2][2] == pytest.approx(35 / 36)
    assert got[3][2] == pytest.approx(25 / 54)


def test_window_slides() -> None:
    rounds = [*ROUNDS, {1: Ob(True, 0.0, 0.5, 2.0, 0.1)}]
    tr = run(EXAMPLE, rounds)
    c = tr.history[-3:]  # round 4, nodes 1, 2, 3
    # node 1: Q4 = (.5 + .5)/2 = .5; window rounds 2–4: (.65 + .85 + .5)/3 = 2/3
    assert [x.node for x in c] == [1, 2, 3]
    assert c[0].contribution == pytest.approx(2 / 3)
    # nodes 2, 3 not expected in round 4: participation unchanged, window holds rounds 2–3
    assert c[1].participation == pytest.approx(1.0)
    assert c[1].contribution == pytest.approx((0.3 + 0.55) / 2)
    assert c[2].participation == pytest.approx(0.625)
    assert c[2].contribution == pytest.approx(0.6)


def test_participation_decay_after_two_misses() -> None:
    # defaults ρ_up = ¼, ρ_down = ½, κ = ¼:
    #   miss: r = .5, m = 1 → .5·e^−¼ = .389400
    #   miss: r = .25, m = 2 → .25·e^−½ = .151633
    #   hit:  r = .25 + ¼·.75 = .4375, m = 0 → .4375
    #   hit:  r = .4375 + ¼·.5625 = .578125
    x = np.array([[1, 0, 0, 1, 1], [1, 1, np.nan, 1, 1]])
    part = participation_reputation(participated=x)
    assert part[0] == pytest.approx(
        [1.0, 0.5 * math.exp(-0.25), 0.25 * math.exp(-0.5), 0.4375, 0.578125]
    )
    assert part[1] == pytest.approx([1.0] * 5)  # a round not expected is no miss
    tr = ReputationTracker()
    for t, p in enumerate([True, False, False, True], start=1):
        out = tr.update(t, {9: NodeObservation(participated=p, update_norm=1.0)})
    assert out[9].participation == pytest.approx(0.4375)
    assert [c.miss_streak for c in tr.history] == [0, 1, 2, 0]


def test_all_equal_variances() -> None:
    # all 0 → the ratio is taken as 0 → consistency 1
    assert consistency_reputation(variance=[0.0, 0.0, 0.0]).tolist() == [1.0, 1.0, 1.0]
    # equal and positive: Eq. 21 gives 1 − v/v = 0 for all ...
    assert consistency_reputation(variance=[0.1, 0.1, 0.1]).tolist() == [0.0, 0.0, 0.0]
    # ... unless the floor dominates: 1 − .1/.4 = .75
    got = consistency_reputation(variance=[0.1, 0.1, 0.1], variance_floor=0.4)
    assert got == pytest.approx([0.75] * 3)
    # tracker: identical constant behaviour of every node → consistency 1
    tr = ReputationTracker(EXAMPLE)
    for t in range(1, 4):
        out = tr.update(t, {n: Ob(True, 0.0, 1.0, 3.0, 0.1) for n in (1, 2, 3)})
    assert [c.consistency for c in out.values()] == [1.0, 1.0, 1.0]
    # g(0) = .5, S = 1 → Q = .75; Rep = .4·.75 + .3 + .3 = .9
    assert [c.reputation for c in out.values()] == pytest.approx([0.9] * 3)


def test_behavior_variance_skips_unexpected_rounds() -> None:
    b = np.array([[[0.0], [1.0], [np.nan]], [[np.nan], [np.nan], [0.5]]])
    # node 0: values 0, 1 → var ¼; node 1: a single value → 0
    assert behavior_variance(behavior=b, weights=[1.0]) == pytest.approx([0.25, 0.0])


def test_quality_uses_the_term_present() -> None:
    q = update_quality(
        delta_acc=[0.05, np.nan, np.nan],
        consistency=[np.nan, 0.8, np.nan],
        lambda_acc=0.5,
        lambda_consistency=0.5,
    )
    assert q[:2] == pytest.approx([1.0, 0.8])
    assert math.isnan(q[2])
    assert contribution_reputation(quality=[[np.nan, np.nan]], default=0.3) == pytest.approx([0.3])


def test_missing_quality_counts_failed_rounds() -> None:
    # node 3 with missing_quality = 0: (.75 + 0 + .6)/3 = .45
    got = last(run(ReputationParams(variance_floor=0.0, missing_quality=0.0), ROUNDS))
    assert got[3][0] == pytest.approx(0.45)


def test_total_reputation_validates_weights() -> None:
    got = total_reputation(
        contribution=[1.0], participation=[0.5], consistency=[0.0], weights=(0.2, 0.4, 0.4)
    )
    assert got == pytest.approx([0.4])  # .2 + .2 + 0
    with pytest.raises(GovernanceError, match="weights"):
        total_reputation(
            contribution=[1.0], participation=[1.0], consistency=[1.0], weights=(0.5, 0.5, 0.5)
        )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"w_contribution": 0.5}, "w_contribution"),  # .5 + .3 + .3 ≠ 1
        ({"w_participation": 0.0, "w_contribution": 0.7}, "w_participation"),
        ({"window": 0}, "window"),
        ({"lambda_acc": 0.7}, "lambda_acc"),
        ({"delta_acc_scale": 0.0}, "delta_acc_scale"),
        ({"behavior_weights": (0.0, 0.0, 0.0)}, "behavior_weights"),
        ({"windows": 3}, "windows"),
    ],
)
def test_bad_params_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ReputationParams.model_validate(kwargs)


def test_tracker_rejects_bad_input() -> None:
    tr = ReputationTracker()
    tr.update(2, {1: Ob()})
    with pytest.raises(GovernanceError, match="round_id"):
        tr.update(2, {1: Ob()})
    with pytest.raises(GovernanceError, match="consistency"):
        tr.update(3, {1: Ob(True, 0.0, 1.5)})
    with pytest.raises(GovernanceError, match="update_norm"):
        tr.update(4, {1: Ob(True, update_norm=math.inf)})


def test_scenario_b_shape_of_fig13() -> None:
    # 6 clients, client 7 fails rounds 4 and 5 (000 §4.7 Scenario B, Fig. 13).
    tr = ReputationTracker()
    clients = (1, 3, 5, 7, 8, 9)
    for t in range(1, 11):
        tr.update(
            t,
            {
                c: FAIL
                if c == 7 and t in (4, 5)
                else Ob(True, 0.01, 0.9, 5.0 + 0.1 * ((t + c) % 3), 0.05)
                for c in clients
            },
        )
    s = tr.series(7)
    part, cons, rep = s["participation"], s["consistency"], s["reputation"]
    assert part[3] < part[2] and part[4] < part[3]  # drops in rounds 4–5
    assert cons[3] < cons[2] and cons[4] < cons[2]
    assert int(np.argmin(rep)) == 4  # lowest at round 5
    assert rep[9] > rep[4] and rep[9] < rep[2] - 0.05  # recovers to a lower level
    assert part[9] < 0.9


def test_a_round_with_no_observation_before_any_node_is_known() -> None:
    """A first round where nobody was expected (every sampled client dropped before the
    record) gives no components instead of failing; the next round starts the nodes."""
    tr = ReputationTracker(EXAMPLE)
    assert tr.update(1, {}) == {}
    out = tr.update(2, {7: Ob(True, 0.0, 1.0, 1.0, 0.1)})
    assert list(out) == [7] and out[7].participation_ratio == 1.0
