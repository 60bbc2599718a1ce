"""Server optimisers by hand: plain, FedAvgM and FedAdagrad/FedAdam/FedYogi (Reddi et al. 2021).

Every expected value below is written out from the paper's formulas with scalars, never by
calling the code under test, so a reader can check each number with a pocket calculator.
"""

from __future__ import annotations

import copy
import io
import math
from typing import Literal

import pytest
import torch

from geofl.server.optimizers import (
    AdaptiveParams,
    AdaptiveServerOptimizer,
    MomentumServerOptimizer,
    PlainServerOptimizer,
    ServerOptimizer,
    adaptive_second_moment,
)

Kind = Literal["adagrad", "adam", "yogi"]


def _t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def _close(got: torch.Tensor, want: list[float]) -> None:
    assert torch.allclose(got, _t(*want), rtol=1e-12, atol=1e-12), (got.tolist(), want)


def test_plain_step() -> None:
    # w ← w + η_s Δ with η_s = 0.5: [1, 2, 3] + 0.5·[0.5, −1, 2] = [1.25, 1.5, 4.0]
    opt = PlainServerOptimizer(0.5)
    w = _t(1.0, 2.0, 3.0)
    _close(opt.step(w, _t(0.5, -1.0, 2.0)), [1.25, 1.5, 4.0])
    assert w.tolist() == [1.0, 2.0, 3.0]  # the input is not modified
    assert opt.state_dict() == {}


def test_fedavgm_two_steps_by_hand() -> None:
    # β = 0.9, η_s = 0.5, w0 = 0.
    # v1 = Δ1 = [1, −2]                         w1 = 0.5·v1 = [0.5, −1]
    # v2 = 0.9·[1, −2] + [0.5, 1] = [1.4, −0.8] w2 = w1 + 0.5·v2 = [1.2, −1.4]
    opt = MomentumServerOptimizer(0.5, 0.9)
    d1, d2 = _t(1.0, -2.0), _t(0.5, 1.0)
    w1 = opt.step(_t(0.0, 0.0), d1)
    _close(w1, [0.5, -1.0])
    assert opt.velocity is not None
    _close(opt.velocity, [1.0, -2.0])
    w2 = opt.step(w1, d2)
    _close(opt.velocity, [1.4, -0.8])
    _close(w2, [1.2, -1.4])
    assert d1.tolist() == [1.0, -2.0]  # v1 = Δ1 is a copy, not the caller's tensor


def test_fedavgm_with_zero_momentum_is_plain() -> None:
    opt = MomentumServerOptimizer(0.3, 0.0)
    w = opt.step(_t(1.0), _t(2.0))
    w = opt.step(w, _t(-1.0))
    _close(w, [1.0 + 0.3 * 2.0 - 0.3 * 1.0])


# ---------------------------------------------------------------- adaptive (Reddi et al.)
# Shared numbers: τ = 0.3 (v0 = τ² = 0.09), β1 = 0.5, β2 = 0.5, η = 1, w0 = 0,
# Δ1 = [0.4, −0.72, 0], Δ2 = [−0.2, 0.1, 0.5].  Δ1² = [0.16, 0.5184, 0], Δ2² = [0.04, 0.01, 0.25].
# m1 = 0.5·Δ1 = [0.2, −0.36, 0];  m2 = 0.5·m1 + 0.5·Δ2 = [0, −0.13, 0.25]  (no bias correction).
TAU, B1, B2, ETA = 0.3, 0.5, 0.5, 1.0
D1 = [0.4, -0.72, 0.0]
D2 = [-0.2, 0.1, 0.5]
M1 = [0.2, -0.36, 0.0]
M2 = [0.0, -0.13, 0.25]
V1 = {
    # Adagrad: v1 = v0 + Δ1² = [0.25, 0.6084, 0.09]  (√ = [0.5, 0.78, 0.3])
    "adagrad": [0.25, 0.6084, 0.09],
    # Adam: v1 = 0.5·0.09 + 0.5·Δ1² = [0.125, 0.3042, 0.045]
    "adam": [0.125, 0.3042, 0.045],
    # Yogi: v0 − Δ1² = [−0.07, −0.4284, 0.09] → sign [−1, −1, +1];
    # v1 = v0 − 0.5·Δ1²·sign = [0.09 + 0.08, 0.09 + 0.2592, 0.09 − 0] = [0.17, 0.3492, 0.09]
    "yogi": [0.17, 0.3492, 0.09],
}
V2 = {
    # Adagrad: v2 = v1 + Δ2² = [0.29, 0.6184, 0.34]
    "adagrad": [0.29, 0.6184, 0.34],
    # Adam: v2 = 0.5·v1 + 0.5·Δ2² = [0.0825, 0.1571, 0.1475]
    "adam": [0.0825, 0.1571, 0.1475],
    # Yogi: v1 − Δ2² = [0.13, 0.3392, −0.16] → sign [+1, +1, −1]  (v ≥ Δ²: v shrinks; v < Δ²: grows)
    # v2 = v1 − 0.5·Δ2²·sign = [0.17 − 0.02, 0.3492 − 0.005, 0.09 + 0.125] = [0.15, 0.3442, 0.215]
    "yogi": [0.15, 0.3442, 0.215],
}


def _adaptive(kind: Kind) -> AdaptiveServerOptimizer:
    return AdaptiveServerOptimizer(kind, AdaptiveParams(server_lr=ETA, beta1=B1, beta2=B2, tau=TAU))


def _expected_w(w_prev: list[float], m: list[float], v: list[float]) -> list[float]:
    # w_t = w_{t−1} + η m_t / (√v_t + τ)
    return [w + ETA * mi / (math.sqrt(vi) + TAU) for w, mi, vi in zip(w_prev, m, v, strict=True)]


@pytest.mark.parametrize("kind", ["adagrad", "adam", "yogi"])
def test_adaptive_one_and_two_steps_by_hand(kind: Kind) -> None:
    opt = _adaptive(kind)
    w0 = [0.0, 0.0, 0.0]
    w1 = opt.step(_t(*w0), _t(*D1))
    assert opt.m is not None and opt.v is not None
    _close(opt.m, M1)
    _close(opt.v, V1[kind])
    want1 = _expected_w(w0, M1, V1[kind])
    _close(w1, want1)
    if kind == "adagrad":  # the nice square roots: [0.2/0.8, −0.36/1.08, 0/0.6]
        _close(w1, [0.25, -1.0 / 3.0, 0.0])
    w2 = opt.step(w1, _t(*D2))
    _close(opt.m, M2)
    _close(opt.v, V2[kind])
    _close(w2, _expected_w(want1, M2, V2[kind]))


def test_yogi_sign_rule_all_cases() -> None:
    # v − (1 − β2)·Δ²·sign(v − Δ²) with β2 = 0.5, element by element:
    #   v = 1,    Δ² = 0.25 (v > Δ²):  1 − 0.5·0.25 = 0.875   (shrinks, like Adam would)
    #   v = 0.01, Δ² = 1    (v < Δ²):  0.01 + 0.5·1 = 0.51    (grows by (1−β2)Δ², not to Δ²)
    #   v = 0.25, Δ² = 0.25 (v = Δ²):  unchanged, 0.25
    #   Δ = 0:                         unchanged
    v = _t(1.0, 0.01, 0.25, 0.7)
    delta = _t(0.5, -1.0, -0.5, 0.0)
    _close(adaptive_second_moment("yogi", v, delta, 0.5), [0.875, 0.51, 0.25, 0.7])
    # Adam on the same numbers moves toward Δ² from both sides: 0.5·v + 0.5·Δ²
    _close(adaptive_second_moment("adam", v, delta, 0.5), [0.625, 0.505, 0.25, 0.35])
    _close(adaptive_second_moment("adagrad", v, delta, 0.5), [1.25, 1.01, 0.5, 0.7])
    assert v.tolist() == [1.0, 0.01, 0.25, 0.7]  # a new tensor; v is not modified


def test_adaptive_starts_from_tau_squared_not_zero() -> None:
    # With v0 = τ² (not 0) the first Adam step on Δ = [0] leaves v1 = β2·τ²;
    # on Δ = 0 nothing moves.
    opt = _adaptive("adam")
    w = opt.step(_t(0.0), _t(0.0))
    assert opt.v is not None
    _close(opt.v, [B2 * TAU * TAU])
    _close(w, [0.0])


def _roundtrip(state: dict[str, object]) -> dict[str, object]:
    """What a checkpoint does to a state dict: torch.save then torch.load."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    out: dict[str, object] = torch.load(buf, weights_only=False)
    return out


def _make(name: str) -> ServerOptimizer:
    if name == "plain":
        return PlainServerOptimizer(0.7)
    if name == "momentum":
        return MomentumServerOptimizer(0.7, 0.9)
    kind: Kind = name  # type: ignore[assignment]
    return _adaptive(kind)


@pytest.mark.parametrize("name", ["plain", "momentum", "adagrad", "adam", "yogi"])
def test_state_dict_round_trip_continues_identically(name: str) -> None:
    deltas = [_t(0.4, -0.72, 0.0), _t(-0.2, 0.1, 0.5), _t(1.0, 1.0, -1.0), _t(0.3, 0.0, 0.2)]
    ref = _make(name)
    w = _t(0.1, 0.2, 0.3)
    w = ref.step(w, deltas[0])
    state = copy.deepcopy(ref.state_dict())  # taken after step 1, as a checkpoint would
    saved = _roundtrip(ref.state_dict())
    w_ref = w
    for d in deltas[1:]:  # the reference keeps going: its state must not alias the dict
        w_ref = ref.step(w_ref, d)
    for st in (state, saved):
        other = _make(name)
        other.load_state_dict(st)
        w_other = w
        for d in deltas[1:]:
            w_other = other.step(w_other, d)
        assert torch.equal(w_other, w_ref), name


@pytest.mark.parametrize("name", ["momentum", "adagrad", "adam", "yogi"])
def test_loading_a_fresh_state_starts_fresh(name: str) -> None:
    fresh = _make(name).state_dict()
    used = _make(name)
    used.step(_t(0.0, 0.0, 0.0), _t(5.0, 5.0, 5.0))
    used.load_state_dict(fresh)
    new = _make(name)
    d = _t(0.4, -0.72, 0.0)
    assert torch.equal(used.step(_t(0.0, 0.0, 0.0), d), new.step(_t(0.0, 0.0, 0.0), d))
