"""Per-client accounting of Gaussian releases with dp_accounting."""

from __future__ import annotations

import math

import dp_accounting as dpa
import pytest

from geofl.plugins import ACCOUNTANTS, load_all
from geofl.privacy.accounting import dp_event_from_log, epsilon_summary

load_all()


def test_event_from_log() -> None:
    ev = dp_event_from_log({"dp_event": {"mechanism": "gaussian", "noise_multiplier": 0.5}})
    assert isinstance(ev, dpa.GaussianDpEvent) and ev.noise_multiplier == 0.5
    assert isinstance(
        dp_event_from_log({"dp_event": {"mechanism": "gaussian", "noise_multiplier": 0.0}}),
        dpa.NonPrivateDpEvent,
    )
    assert dp_event_from_log({"norm": 3.0}) is None
    with pytest.raises(ValueError, match="laplace"):
        dp_event_from_log({"dp_event": {"mechanism": "laplace", "noise_multiplier": 1}})


def test_rdp_composes_per_client_like_dp_accounting() -> None:
    acc = ACCOUNTANTS.build("rdp", {})
    for _ in range(25):
        acc.record(0, dpa.GaussianDpEvent(1.0))
    acc.record(1, dpa.GaussianDpEvent(1.0))
    ref = dpa.rdp.RdpAccountant(acc.orders)  # type: ignore[attr-defined]
    ref.compose(dpa.GaussianDpEvent(1.0), 25)
    assert acc.epsilon(0, 1e-5) == pytest.approx(ref.get_epsilon(1e-5))
    assert acc.epsilon(1, 1e-5) < acc.epsilon(0, 1e-5)
    assert acc.clients() == [0, 1]


def test_paper_settings_give_an_astronomical_epsilon() -> None:
    # z = σ/C = 0.05/100 = 5e-4 for 25 rounds ≈ one Gaussian with μ = √25 / z = 1e4
    # (Dong et al. 2019, GDP): ε ≈ μ²/2 = 5e7 for any reasonable δ.
    acc = ACCOUNTANTS.build("rdp", {})
    for _ in range(25):
        acc.record(3, dpa.GaussianDpEvent(0.05 / 100))
    eps = acc.epsilon(3, 1e-5)
    assert 0.9 * 5e7 < eps < 1.2 * 5e7
    s = epsilon_summary(acc, delta=1e-5, noise_multipliers=[5e-4])
    assert s["epsilon_max"] == eps and s["epsilon_per_client"] == {"3": eps}
    assert s["noise_multiplier_min"] == s["noise_multiplier_max"] == 5e-4


def test_pld_agrees_with_rdp_for_moderate_noise() -> None:
    rdp, pld = ACCOUNTANTS.build("rdp", {}), ACCOUNTANTS.build("pld", {})
    for acc in (rdp, pld):
        for _ in range(10):
            acc.record(0, dpa.GaussianDpEvent(2.0))
    # PLD is tight; RDP is an upper bound that is looser by a modest factor here.
    assert pld.epsilon(0, 1e-5) <= rdp.epsilon(0, 1e-5) <= 1.5 * pld.epsilon(0, 1e-5)


def test_non_private_release_is_infinite() -> None:
    acc = ACCOUNTANTS.build("rdp", {})
    acc.record(2, dpa.NonPrivateDpEvent())
    assert math.isinf(acc.epsilon(2, 1e-5))


def test_pld_defers_to_rdp_for_astronomically_weak_noise() -> None:
    # z = 5e-4 would need ~1e9 PLD points; the PLD accountant answers with the RDP bound.
    rdp, pld = ACCOUNTANTS.build("rdp", {}), ACCOUNTANTS.build("pld", {})
    for acc in (rdp, pld):
        for _ in range(25):
            acc.record(0, dpa.GaussianDpEvent(5e-4))
    assert pld.epsilon(0, 1e-5) == rdp.epsilon(0, 1e-5)


@pytest.mark.parametrize("mechanism", ["gaussian", "poisson_gaussian"])
def test_a_nan_noise_multiplier_is_refused_not_accounted_as_epsilon_zero(mechanism: str) -> None:
    from geofl.privacy.accounting import dp_event_from_spec

    spec = {"mechanism": mechanism, "noise_multiplier": math.nan, "sampling_probability": 0.1}
    with pytest.raises(ValueError, match="noise_multiplier=nan"):
        dp_event_from_spec(spec)
