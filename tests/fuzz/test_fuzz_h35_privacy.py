"""Fuzzing the TOST and the seasonal swap with hostile inputs.

The TOST must agree with its own CI rule on any finite paired sample (p < α ⇔ the 90 % CI
lies inside ±m), never return a p outside [0, 1], and stay NaN-safe in the summary path;
the seasonal swap must only ever permute whole season blocks of one sample. Derandomized,
a few seconds.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geofl.client.augment import seasonal_swap
from geofl.report.paired import equivalence_test, paired_statistics
from geofl.rng import torch_generator

FUZZ = settings(deadline=None, derandomize=True, max_examples=150)
_VAL = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@FUZZ
@given(
    pairs=st.lists(st.tuples(_VAL, _VAL), min_size=2, max_size=8),
    margin=st.floats(1e-3, 10.0),
)
def test_tost_p_and_ci_rule_agree(pairs: list[tuple[float, float]], margin: float) -> None:
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    res = equivalence_test(a, b, margin=margin)
    p = res["tost_p"]
    assert 0.0 <= p <= 1.0
    inside = -margin < res["ci90_low"] and res["ci90_high"] < margin
    lo, hi = res["ci90_low"], res["ci90_high"]
    near_edge = min(abs(abs(lo) - margin), abs(abs(hi) - margin)) < 1e-9 * max(1.0, margin)
    if not near_edge and math.isfinite(p) and hi > lo:
        assert (p < 0.05) == inside


@FUZZ
@given(
    base=st.lists(st.one_of(_VAL, st.just(math.nan)), min_size=0, max_size=5),
    other=st.lists(st.one_of(_VAL, st.just(math.nan)), min_size=0, max_size=5),
)
def test_summary_path_survives_nan_and_short_series(base: list[float], other: list[float]) -> None:
    values = {"m": {"b": dict(enumerate(base)), "x": dict(enumerate(other))}}
    row = paired_statistics(values, "b")["metrics"]["m"]["x"]
    assert row["verdict"] in {"differs", "equivalent", "inconclusive"}
    assert math.isnan(row["tost_p"]) or 0.0 <= row["tost_p"] <= 1.0


@FUZZ
@given(
    batch=st.integers(1, 6),
    seasons=st.integers(2, 5),
    bands=st.integers(1, 3),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_swap_only_permutes_whole_blocks(
    batch: int, seasons: int, bands: int, p: float, seed: int
) -> None:
    x = torch.rand((batch, seasons * bands, 3, 3), generator=torch_generator(seed, "x"))
    y = seasonal_swap(x, torch_generator(seed, "swap"), seasons=seasons, p=p)
    xb = x.reshape(batch, seasons, bands, 3, 3)
    yb = y.reshape(batch, seasons, bands, 3, 3)
    for i in range(batch):
        matches = [
            next(j for j in range(seasons) if torch.equal(yb[i, s], xb[i, j]))
            for s in range(seasons)
        ]
        assert sorted(matches) == list(range(seasons))
        assert sum(m != s for s, m in enumerate(matches)) in (0, 2)
