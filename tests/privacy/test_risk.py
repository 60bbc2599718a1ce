"""Spatial risk scoring (000 Eq. 3–4, Alg. 1 lines 3–13) with hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geofl.errors import ConfigError
from geofl.plugins import RELEASE_STEPS, load_all
from geofl.privacy.risk import RiskParams, assess_risk, normalized_entropy, risk_level

CLASSES = ("Industrial", "Forest", "River", "SeaLake")


def test_normalized_entropy_by_hand() -> None:
    # p = (0.75, 0.25): H = -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.215762 + 0.346574 = 0.562335;
    # divided by ln 4 = 1.386294 → 0.405639.
    assert normalized_entropy(np.array([3, 1, 0, 0])) == pytest.approx(0.405639, abs=1e-6)
    assert normalized_entropy(np.array([5, 5, 5, 5])) == pytest.approx(1.0)
    assert normalized_entropy(np.array([7, 0, 0, 0])) == 0.0


@pytest.mark.parametrize("hist", [[0, 0, 0], [1, -1, 2], [5]])
def test_normalized_entropy_rejects_bad_histograms(hist: list[int]) -> None:
    with pytest.raises(ValueError, match="label histogram"):
        normalized_entropy(np.array(hist))


def test_assess_risk_by_hand() -> None:
    # sem  = 0.75·s(Industrial)=1.0 + 0.25·s(Forest)=0.1             = 0.775
    # conc = 1 − 0.405639                                             = 0.594361
    # size = 200 / (200 + 4)                                          = 0.980392
    # res  = min(1, 1 m / 10 m)                                       = 0.1
    # r    = 0.5·0.775 + 0.3·0.594361 + 0.1·0.980392 + 0.1·0.1        = 0.673847 ≥ τ_H = 0.6
    a = assess_risk(np.array([3, 1, 0, 0]), CLASSES, gsd_m=10.0, params=RiskParams())
    assert a.semantic == pytest.approx(0.775)
    assert a.concentration == pytest.approx(0.594361, abs=1e-6)
    assert a.size == pytest.approx(200 / 204)
    assert a.resolution == pytest.approx(0.1)
    assert a.score == pytest.approx(0.673847, abs=1e-6)
    assert a.level == "high"


def test_assess_risk_natural_balanced_client_is_low() -> None:
    # Forest/River/SeaLake evenly, 1000 samples, 10 m:
    # sem = (0 + 0.1 + 0.3 + 0.2)·250/1000 = 0.15; conc = 1 − ln 4/ln 4·… (uniform over 3 of 4):
    # H/ln4 = ln 3 / ln 4 = 0.792481 → conc = 0.207519; size = 200/1200 = 0.166667; res 0.1.
    # r = 0.075 + 0.062256 + 0.016667 + 0.01 = 0.163922 < τ_M = 0.4 → low.
    a = assess_risk(np.array([0, 334, 333, 333]), CLASSES, gsd_m=10.0, params=RiskParams())
    assert a.level == "low"
    h = np.array([0, 334, 333, 333]) / 1000
    sem = h @ np.array([1.0, 0.1, 0.3, 0.2])
    conc = 1 - normalized_entropy(np.array([0, 334, 333, 333]))
    assert a.score == pytest.approx(0.5 * sem + 0.3 * conc + 0.1 * 200 / 1200 + 0.01)


def test_resolution_and_unknown_classes_and_custom_weights() -> None:
    p = RiskParams(
        w_semantic=1.0,
        w_concentration=0.0,
        w_size=0.0,
        w_resolution=0.0,
        sensitivity={"industrial": 0.9},
        default_sensitivity=0.2,
    )
    # Only sem counts: 0.5·0.9 + 0.5·0.2 (Forest not in the table → default) = 0.55.
    assert assess_risk(np.array([1, 1, 0, 0]), CLASSES, gsd_m=None, params=p).score == (
        pytest.approx(0.55)
    )
    q = RiskParams(w_semantic=0.0, w_concentration=0.0, w_size=0.0, w_resolution=1.0)
    assert assess_risk(np.array([1, 1, 0, 0]), CLASSES, gsd_m=0.3, params=q).score == 1.0
    assert assess_risk(np.array([1, 1, 0, 0]), CLASSES, gsd_m=None, params=q).score == 0.1


@pytest.mark.parametrize(
    ("score", "level"),
    [(0.0, "low"), (0.3999, "low"), (0.4, "mid"), (0.5999, "mid"), (0.6, "high")],
)
def test_risk_level_thresholds(score: float, level: str) -> None:
    assert risk_level(score, tau_mid=0.4, tau_high=0.6) == level


def test_risk_params_are_validated() -> None:
    load_all()
    with pytest.raises(ConfigError, match="tau_mid"):
        RELEASE_STEPS.validate("risk_aware", {"risk": {"tau_mid": 0.7, "tau_high": 0.6}})
    with pytest.raises(ConfigError, match="sensitivity"):
        RELEASE_STEPS.validate("risk_aware", {"risk": {"sensitivity": {"industrial": 2.0}}})
    with pytest.raises(ConfigError, match=r"risk\.w_size"):
        RELEASE_STEPS.validate("risk_aware", {"risk": {"w_size": -1}})
    assert math.isclose(RiskParams().tau_high, 0.6)
