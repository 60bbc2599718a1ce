"""NQI (003 Eq. 9–10), weight tuning (Eq. 5), rural link model (§2.3.1, Table 3)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from geofl.network.nqi import NqiParams, normalise, nqi, ranges_for
from geofl.network.pipelines import Pipeline
from geofl.network.rural import (
    RuralParams,
    assign_profiles,
    frames_delivered,
    sample_link_states,
    transfer_time_s,
)
from geofl.network.tuning import Trace, simplex_grid, tune_weights


def test_nqi_by_hand() -> None:
    # a 4G tractor: S = −95 dBm (mid of −110..−80), B = 11 Mbps (mid of 2..20), L = 60 ms (min)
    values = np.array([[-95.0, 11.0, 60.0]])
    ranges = ranges_for(np.array([1]))
    np.testing.assert_allclose(normalise(values, ranges), [[0.5, 0.5, 0.0]])
    # 0.35·0.5 + 0.45·0.5 − 0.20·0 = 0.40
    np.testing.assert_allclose(nqi(values, ranges, np.array([0.35, 0.45, 0.20])), [0.40])
    worst = np.array([[-120.0, 0.0, 900.0]])  # clipped to [0, 1]: 0 + 0 − 0.2
    np.testing.assert_allclose(nqi(worst, ranges, np.array([0.35, 0.45, 0.20])), [-0.2])


def test_global_normalisation_uses_all_profiles() -> None:
    r = ranges_for(np.array([0, 2]), "global")
    np.testing.assert_allclose(r[0], [[-112, -75], [0.2, 60], [20, 500]])
    np.testing.assert_allclose(r[0], r[1])


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"weights": (0.4, 0.4, 0.4)}, "sum to 1"),
        ({"weights": (1.2, -0.1, -0.1)}, "non-negative"),
        ({"t_chunked": 0.8}, "ascending"),
        ({"tau": 0.6}, "ascending"),
    ],
)
def test_bad_nqi_config_rejected(over: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        NqiParams.model_validate(over)


def test_simplex_grid_has_231_candidates() -> None:
    grid = simplex_grid(0.05)
    assert grid.shape == (231, 3)
    np.testing.assert_allclose(grid.sum(1), 1.0)
    assert (grid >= 0).all() and len({tuple(np.round(w, 6)) for w in grid}) == 231
    assert any(np.allclose(w, [0.35, 0.45, 0.20]) for w in grid)
    with pytest.raises(ValueError, match="step"):
        simplex_grid(0.3)


def test_tuning_by_hand_on_a_two_sample_trace() -> None:
    # Two 5G samples, normalised (S̃, B̃, L̃) = (1, 1, 0) and (1, 0.04, 1). Under w = (0, 1, 0)
    # sample 0 scores 1 (fallback, 1 MB, delivered in 0.153 s) and sample 1 scores 0.04
    # (skipped); under w = (1, 0, 0) both score 1 and sample 1's 1 MB at 12 Mbps (0.73 s)
    # misses the 0.5 s deadline.
    values = np.array([[-75.0, 60.0, 20.0], [-75.0, 12.0, 60.0]])
    trace = Trace(values, ranges_for(np.array([2, 2])), np.array([False, False]))
    sizes = {Pipeline.COMPRESSED: 20_000, Pipeline.CHUNKED: 1_000_000, Pipeline.FALLBACK: 1_000_000}
    res = tune_weights(trace, sizes, NqiParams(), deadline_s=0.5, lam=0.0)
    by_w = {tuple(np.round(w, 2)): i for i, w in enumerate(res.candidates)}
    i_b, i_s = by_w[(0.0, 1.0, 0.0)], by_w[(1.0, 0.0, 0.0)]
    assert res.p_fail[i_b] == 0.0 and res.p_fail[i_s] == 0.5
    # 1 MB at 60 Mbps + 20 ms = 0.1533 s
    np.testing.assert_allclose(res.latency_s[i_b], 0.02 + 8e6 / 60e6)
    assert res.objective[res.best] == 0.0 and res.feasible[res.best]
    strict = tune_weights(trace, sizes, NqiParams(), deadline_s=0.5, c_max=100_000)
    assert not strict.feasible[i_b]  # c̄ = 0.5 MB per scheduled update > C_max
    # feasible: sample 0 in the compressed band (NQI = 1 − w3 ∈ [0.35, 0.55)), sample 1 skipped
    w3 = strict.weights[2]
    assert 0.45 < w3 <= 0.65 and strict.bytes[strict.best] == 10_000
    assert res.delivery[i_b] == 0.5 and res.delivery[i_s] == 0.5
    # both delivered only when sample 1 lands in the compressed band (its 20 kB meets ℓ_max)
    both = tune_weights(trace, sizes, NqiParams(), deadline_s=0.5, min_delivery=1.0)
    assert both.delivery[both.best] == 1.0 and both.p_fail[both.best] == 0.0


def test_profiles_in_paper_shares_and_deterministic() -> None:
    p = assign_profiles(120, (0.31, 0.49, 0.20), seed=3)
    assert np.bincount(p).tolist() == [37, 59, 24]
    np.testing.assert_array_equal(p, assign_profiles(120, (0.31, 0.49, 0.20), seed=3))
    assert not np.array_equal(p, assign_profiles(120, (0.31, 0.49, 0.20), seed=4))


def test_link_states_in_ranges_seeded_and_outage_rate() -> None:
    params = RuralParams(p_fail=0.25)
    prof = assign_profiles(400, params.shares, seed=0)
    a = sample_link_states(prof, params, seed=0, round_idx=1)
    np.testing.assert_array_equal(a.values, sample_link_states(prof, params, 0, 1).values)
    r = ranges_for(prof)
    assert ((a.values >= r[..., 0]) & (a.values <= r[..., 1])).all()
    assert 0.18 < a.outage.mean() < 0.32
    # a tractor's draw does not depend on how many others are simulated
    np.testing.assert_array_equal(sample_link_states(prof[:5], params, 0, 1).values, a.values[:5])
    normal = sample_link_states(prof, RuralParams(distribution="clipped_normal"), 0, 1)
    assert ((normal.values >= r[..., 0]) & (normal.values <= r[..., 1])).all()
    with pytest.raises(ValidationError, match="shares"):
        RuralParams(shares=(0.5, 0.5, 0.5))


def test_transfer_time_and_frames_by_hand() -> None:
    # 250 kB at 2 Mbps + 150 ms = 0.15 + 1.0 s
    assert float(transfer_time_s(250_000, 2.0, 150.0)) == pytest.approx(1.15)
    # frames of 100 kB at 8 Mbps, 100 ms: ends 0.2, 0.3, 0.4, 0.5 s
    assert frames_delivered([100_000] * 4, 8.0, 100.0, 0.35) == (2, pytest.approx(0.25))
    assert frames_delivered([100_000] * 4, 8.0, 100.0, 9.0) == (4, pytest.approx(0.4))
