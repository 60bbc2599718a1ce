"""Server and client update rules of each algorithm, checked by hand on 2–3 element vectors.

The tier is always the real one: FlatTier(data_size weighting, mean aggregator), so
p_k = n_k / Σ n_j. Every expected number is worked out in the comment beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

import geofl.algorithms.fedavg
import geofl.algorithms.feddyn
import geofl.algorithms.fednova
import geofl.algorithms.scaffold  # noqa: F401  (registers the algorithms)
from geofl.algorithms import ALGORITHMS, Algorithm, AlgorithmContext
from geofl.algorithms.base import local_step_weight_sum
from geofl.algorithms.feddyn import GRADIENT, FedDynClient
from geofl.algorithms.fednova import A_NORM, FedNovaClient
from geofl.algorithms.scaffold import CONTROL, CONTROL_DELTA, ScaffoldClient
from geofl.client.state import ClientState, StateSpec
from geofl.client.trainer import LocalTrainParams
from geofl.registry import NoParams
from geofl.server.aggregators import build_mean
from geofl.server.defenses import Defense
from geofl.server.strategy import StrategyResult, UpdateBatch
from geofl.server.tier import FlatTier
from geofl.server.weighting import data_size_weights
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

SGD0 = LocalTrainParams(optimizer="sgd", lr=0.1, momentum=0.0, weight_decay=0.0)


def _t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def _rows(*rows: Sequence[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def _close(got: torch.Tensor, want: Sequence[float], tol: float = 1e-6) -> None:
    w = torch.tensor(list(want), dtype=got.dtype)
    assert torch.allclose(got, w, rtol=tol, atol=tol), (got.tolist(), list(want))


def _tier(defenses: Sequence[Defense] = ()) -> FlatTier:
    return FlatTier(data_size_weights, build_mean(NoParams()), defenses)


def _build(
    name: str,
    params: dict[str, object] | None = None,
    *,
    server_lr: float = 1.0,
    num_clients: int = 4,
    dim: int = 2,
    train: LocalTrainParams = SGD0,
    defenses: Sequence[Defense] = (),
) -> Algorithm:
    ctx = AlgorithmContext(_tier(defenses), server_lr, num_clients, dim, train)
    return ALGORITHMS.build(name, params or {}, ctx=ctx)


def _metas(ns: Sequence[int], a_norms: Sequence[float] | None = None) -> list[UpdateMeta]:
    return [
        UpdateMeta(
            client_id=k,
            num_samples=n,
            round=1,
            steps=int(a_norms[k]) if a_norms else 1,
            scalars={A_NORM: a_norms[k]} if a_norms else {},
        )
        for k, n in enumerate(ns)
    ]


# ------------------------------------------------------------------------------ FedAvg
def test_fedavg_is_w_plus_server_lr_times_weighted_mean() -> None:
    # n = [1, 2, 1] → p = [0.25, 0.5, 0.25]
    # Σ p_k Δ_k = 0.25·[4, 0] + 0.5·[0, 2] + 0.25·[−4, 4] = [0, 2]
    # w' = [1, 1] + 0.5·[0, 2] = [1, 2]
    alg = _build("fedavg", server_lr=0.5)
    batch = UpdateBatch(_rows([4, 0], [0, 2], [-4, 4]), _metas([1, 2, 1]), num_clients=4)
    res = alg.strategy.aggregate(1, _t(1, 1), batch)
    _close(res.aggregate, [0, 2])
    _close(res.params, [1, 2])
    _close(res.weights, [0.25, 0.5, 0.25])
    assert res.weights.dtype == torch.float64 and res.kept.tolist() == [True, True, True]
    assert alg.strategy.uploads == () and alg.strategy.state_dict() == {"optimizer": {}}


# ---------------------------------------------------------------------------- SCAFFOLD
def test_scaffold_server_two_rounds_by_hand() -> None:
    # N = 4 clients in the federation, η_s = 1, x0 = [1, 1], c0 = 0.
    alg = _build("scaffold", num_clients=4)
    s = alg.strategy
    assert s.uploads == (CONTROL_DELTA,)
    plan1 = s.configure(1, [0, 1])
    _close(plan1.payload[CONTROL], [0, 0])  # c is broadcast with the model
    # Round 1, |S| = 2, n = [1, 3] → p = [0.25, 0.75]
    # Δx = 0.25·[2, 0] + 0.75·[0, 2] = [0.5, 1.5];  x1 = [1.5, 2.5]
    # mean Δc = ([1, −1] + [3, 1]) / 2 = [2, 0];  c1 = 0 + (2/4)·[2, 0] = [1, 0]
    b1 = UpdateBatch(
        _rows([2, 0], [0, 2]),
        _metas([1, 3]),
        {CONTROL_DELTA: _rows([1, -1], [3, 1])},
        num_clients=4,
    )
    r1 = s.aggregate(1, _t(1, 1), b1)
    _close(r1.params, [1.5, 2.5])
    _close(r1.weights, [0.25, 0.75])
    assert r1.info == pytest.approx({"control_norm": 1.0})
    _close(plan1.payload[CONTROL], [0, 0])  # what clients received is not changed afterwards
    plan2 = s.configure(2, [0, 1, 2])
    _close(plan2.payload[CONTROL], [1, 0])
    # Round 2, |S| = 3, n = [1, 1, 2] → p = [0.25, 0.25, 0.5]
    # Δx = 0.25·[4, 0] + 0.25·[0, 4] + 0.5·[2, 2] = [2, 2];  x2 = [3.5, 4.5]
    # mean Δc = ([0, 2] + [2, 2] + [−2, 2]) / 3 = [0, 2];  c2 = [1, 0] + (3/4)·[0, 2] = [1, 1.5]
    b2 = UpdateBatch(
        _rows([4, 0], [0, 4], [2, 2]),
        _metas([1, 1, 2]),
        {CONTROL_DELTA: _rows([0, 2], [2, 2], [-2, 2])},
        num_clients=4,
    )
    r2 = s.aggregate(2, r1.params, b2)
    _close(r2.params, [3.5, 4.5])
    _close(s.configure(3, [0]).payload[CONTROL], [1, 1.5])
    assert r2.info["control_norm"] == pytest.approx(math.sqrt(1 + 1.5**2))


def test_scaffold_control_update_uses_only_updates_the_defenses_kept() -> None:
    # A defense drops client 1 (its Δc is huge): |S| counts kept updates only.
    # Δx = 0.5·[1, 0] + 0.5·[0, 1] = [0.5, 0.5];  c = (2/4)·mean([2, 0], [0, 2]) = [0.5, 0.5]
    def drop_second(u: torch.Tensor) -> torch.Tensor:
        return torch.tensor([True, False, True])

    alg = _build("scaffold", num_clients=4, defenses=[drop_second])
    batch = UpdateBatch(
        _rows([1, 0], [50, 50], [0, 1]),
        _metas([1, 1, 1]),
        {CONTROL_DELTA: _rows([2, 0], [100, 100], [0, 2])},
        num_clients=4,
    )
    res = alg.strategy.aggregate(1, _t(0, 0), batch)
    _close(res.params, [0.5, 0.5])
    _close(res.weights, [0.5, 0.0, 0.5])
    _close(alg.strategy.configure(2, []).payload[CONTROL], [0.5, 0.5])


def test_scaffold_strategy_state_round_trip() -> None:
    a = _build("scaffold", num_clients=2)
    batch = UpdateBatch(_rows([1, 0]), _metas([1]), {CONTROL_DELTA: _rows([3, 4])}, num_clients=2)
    a.strategy.aggregate(1, _t(0, 0), batch)
    state = a.strategy.state_dict()
    b = _build("scaffold", num_clients=2)
    b.strategy.load_state_dict(state)
    a.strategy.aggregate(2, _t(0, 0), batch)  # a moves on; b's copy must not follow
    _close(b.strategy.configure(2, []).payload[CONTROL], [1.5, 2])  # (1/2)·[3, 4]
    _close(a.strategy.configure(3, []).payload[CONTROL], [3, 4])


def _scaffold_finish(
    c_k: list[float],
    c: list[float],
    delta: list[float],
    steps: int,
    train: LocalTrainParams,
) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
    client = ScaffoldClient()
    state = ClientState({CONTROL: _t(*c_k)})
    directives = ClientDirectives(1, 0, payload={CONTROL: _t(*c)})
    update = ClientUpdate(_t(*delta), UpdateMeta(client_id=0, num_samples=5, round=1, steps=steps))
    return client.finish(update, state, directives, train, global_params=torch.zeros(len(c)))


def test_scaffold_client_option_two_by_hand() -> None:
    # c_k = [1, 0, −1], c = [0.5, 0.5, 0.5], Δ = y − x = [−0.2, 0.4, 0], τ = 4, η_l = 0.1,
    # momentum 0 so ‖a‖₁ = τ and η_l‖a‖₁ = 0.4; Δ / 0.4 = [−0.5, 1, 0]
    # c_k⁺ = c_k − c − Δ/(η_l τ) = [1 − 0.5 + 0.5, 0 − 0.5 − 1, −1 − 0.5 − 0] = [1, −1.5, −1.5]
    # Δc_k = c_k⁺ − c_k = [0, −1.5, −0.5]
    up, new = _scaffold_finish([1, 0, -1], [0.5, 0.5, 0.5], [-0.2, 0.4, 0], 4, SGD0)
    _close(new[CONTROL], [1, -1.5, -1.5])
    _close(up.tensors[CONTROL_DELTA], [0, -1.5, -0.5])
    _close(up.delta, [-0.2, 0.4, 0])  # Δy itself is uploaded unchanged
    assert set(new) == {CONTROL}


def test_scaffold_client_with_momentum_divides_by_eta_times_a_norm() -> None:
    # ρ = 0.5, τ = 2: ‖a‖₁ = (1 − 0.5²)/0.5 + (1 − 0.5)/0.5 = 1.5 + 1 = 2.5; η_l‖a‖₁ = 0.25
    # c_k = c = 0, Δ = [0.25, 0, −0.5] → c_k⁺ = −Δ/0.25 = [−1, 0, 2]
    train = LocalTrainParams(optimizer="sgd", lr=0.1, momentum=0.5, weight_decay=0.0)
    _, new = _scaffold_finish([0, 0, 0], [0, 0, 0], [0.25, 0, -0.5], 2, train)
    _close(new[CONTROL], [-1, 0, 2])
    # Adam ignores ρ: η_l τ = 0.2 → c_k⁺ = −Δ/0.2 = [−1.25, 0, 2.5]
    adam = LocalTrainParams(optimizer="adam", lr=0.1, momentum=0.5, weight_decay=0.0)
    _, new = _scaffold_finish([0, 0, 0], [0, 0, 0], [0.25, 0, -0.5], 2, adam)
    _close(new[CONTROL], [-1.25, 0, 2.5])


def test_scaffold_client_without_steps_keeps_its_control() -> None:
    up, new = _scaffold_finish([1, 2, 3], [5, 5, 5], [0, 0, 0], 0, SGD0)
    _close(new[CONTROL], [1, 2, 3])
    _close(up.tensors[CONTROL_DELTA], [0, 0, 0])


def test_scaffold_client_state_and_correction() -> None:
    client = ScaffoldClient()
    assert client.state_specs(3) == {CONTROL: StateSpec((3,))}
    state = ClientState({CONTROL: _t(1, 0, -1)})
    directives = ClientDirectives(1, 0, payload={CONTROL: _t(0.5, 0.5, 0.5)})
    corr = client.correction(_t(9, 9, 9), state, directives)
    assert corr is not None and corr.prox_mu == 0.0 and corr.linear is not None
    _close(corr.linear, [-0.5, 0.5, 1.5])  # each local step follows g − c_k + c


# ------------------------------------------------------------------------------ FedDyn
def test_feddyn_server_two_rounds_by_hand() -> None:
    # α = 0.5, N = 4, θ0 = [1, 1], h0 = 0.
    alg = _build("feddyn", {"alpha": 0.5}, num_clients=4)
    s = alg.strategy
    # Round 1: Δ = [[2, 0], [0, 4]], n = [1, 1] → weighted mean [1, 2], Σ Δ = [2, 4]
    # h1 = 0 − (0.5/4)·[2, 4] = [−0.25, −0.5]
    # θ1 = θ0 + mean Δ − h1/α = [1, 1] + [1, 2] + [0.5, 1] = [2.5, 4]
    r1 = s.aggregate(1, _t(1, 1), UpdateBatch(_rows([2, 0], [0, 4]), _metas([1, 1]), {}, 4))
    _close(r1.params, [2.5, 4])
    assert r1.info["h_norm"] == pytest.approx(math.hypot(0.25, 0.5))
    # Round 2: Δ = [[−1, 0], [0, −2], [1, 1]], n = [1, 1, 2] → p = [0.25, 0.25, 0.5]
    # weighted mean = [−0.25 + 0.5, −0.5 + 0.5] = [0.25, 0];  Σ Δ = [0, −1]
    # h2 = [−0.25, −0.5] − 0.125·[0, −1] = [−0.25, −0.375]
    # θ2 = [2.5, 4] + [0.25, 0] − h2/0.5 = [2.75 + 0.5, 4 + 0.75] = [3.25, 4.75]
    b2 = UpdateBatch(_rows([-1, 0], [0, -2], [1, 1]), _metas([1, 1, 2]), {}, 4)
    r2 = s.aggregate(2, r1.params, b2)
    _close(r2.params, [3.25, 4.75])
    _close(r2.weights, [0.25, 0.25, 0.5])
    assert r2.info["h_norm"] == pytest.approx(math.hypot(0.25, 0.375))
    # the state carries h: a copy continues identically
    other = _build("feddyn", {"alpha": 0.5}, num_clients=4).strategy
    other.load_state_dict(s.state_dict())
    b3 = UpdateBatch(_rows([1, 1]), _metas([1]), {}, 4)
    assert torch.equal(
        other.aggregate(3, r2.params, b3).params, s.aggregate(3, r2.params, b3).params
    )


def test_feddyn_client_gradient_state_and_correction() -> None:
    # α = 0.5, g = ∇L_k(θ_k^{t−1}) = [1, −1], Δ = θ_k^t − θ^{t−1} = [0.2, 0.4]
    # g ← g − αΔ = [1 − 0.1, −1 − 0.2] = [0.9, −1.2]
    client = FedDynClient(0.5)
    assert client.state_specs(2) == {GRADIENT: StateSpec((2,))}
    state = ClientState({GRADIENT: _t(1, -1)})
    directives = ClientDirectives(1, 0)
    update = ClientUpdate(_t(0.2, 0.4), UpdateMeta(client_id=0, num_samples=3, round=1, steps=2))
    up, new = client.finish(update, state, directives, SGD0, global_params=torch.zeros(2))
    _close(new[GRADIENT], [0.9, -1.2])
    _close(up.delta, [0.2, 0.4])
    assert up.tensors == {}
    _close(state.tensors[GRADIENT], [1, -1])  # the old state is not written in place
    # the local gradient gains α(θ − θ^{t−1}) − g: at θ = [3, 1] from θ^{t−1} = [1, 1],
    # term = 0.5·[2, 0] − [1, −1] = [0, 1]
    corr = client.correction(_t(1, 1), state, directives)
    assert corr is not None
    grad = torch.zeros(2)
    corr.apply(grad, _t(3, 1), None)
    _close(grad, [0, 1])


# ----------------------------------------------------------------------------- FedNova
def test_fednova_unequal_steps_by_hand() -> None:
    # n = [1, 3] → p = [0.25, 0.75];  a = ‖a_k‖₁ = τ_k = [1, 3] (plain SGD)
    # d_k = Δ_k / a_k:  [1, 0]/1 = [1, 0],  [0, 3]/3 = [0, 1]
    # τ_eff = Σ p_k a_k = 0.25·1 + 0.75·3 = 2.5
    # step = τ_eff Σ p_k d_k = 2.5·[0.25, 0.75] = [0.625, 1.875]   (FedAvg: [0.25, 2.25])
    # effective weights ∝ p/a = [0.25, 0.25] → [0.5, 0.5]
    alg = _build("fednova", server_lr=1.0)
    batch = UpdateBatch(_rows([1, 0], [0, 3]), _metas([1, 3], [1.0, 3.0]), {}, 4)
    res = alg.strategy.aggregate(1, _t(0, 0), batch)
    _close(res.aggregate, [0.625, 1.875])
    _close(res.params, [0.625, 1.875])
    _close(res.weights, [0.5, 0.5])
    assert res.info == pytest.approx({"tau_eff": 2.5})
    # with η_s = 0.4 the same step is scaled: [0.25, 0.75]
    scaled = _build("fednova", server_lr=0.4).strategy.aggregate(1, _t(0, 0), batch)
    _close(scaled.params, [0.25, 0.75])


def test_fednova_momentum_a_norms_by_hand() -> None:
    # three clients, n = [2, 1, 1] → p = [0.5, 0.25, 0.25], a = [2.5, 1, 5]
    # d = [[5, 0]/2.5, [0, 1]/1, [5, 5]/5] = [[2, 0], [0, 1], [1, 1]]
    # Σ p d = [1 + 0 + 0.25, 0 + 0.25 + 0.25] = [1.25, 0.5]
    # τ_eff = 0.5·2.5 + 0.25·1 + 0.25·5 = 2.75 → step = [3.4375, 1.375]
    # weights ∝ p/a = [0.2, 0.25, 0.05] (sum 0.5) → [0.4, 0.5, 0.1]
    alg = _build("fednova")
    metas = _metas([2, 1, 1], [2.5, 1.0, 5.0])
    res = alg.strategy.aggregate(1, _t(0, 0), UpdateBatch(_rows([5, 0], [0, 1], [5, 5]), metas))
    _close(res.params, [3.4375, 1.375])
    _close(res.weights, [0.4, 0.5, 0.1])
    assert res.info["tau_eff"] == pytest.approx(2.75)


def test_fednova_equals_fedavg_when_all_steps_are_equal() -> None:
    g = torch.Generator().manual_seed(0)
    deltas = torch.randn(5, 7, generator=g)
    ns = [3, 10, 1, 7, 4]
    w = torch.randn(7, generator=g)
    for a in (1.0, 5.0, local_step_weight_sum(5, 0.9)):
        metas = _metas(ns, [a] * 5)
        batch = UpdateBatch(deltas, metas, {}, 5)
        nova = _build("fednova", server_lr=0.7, dim=7).strategy.aggregate(1, w, batch)
        avg = _build("fedavg", server_lr=0.7, dim=7).strategy.aggregate(1, w, batch)
        assert torch.allclose(nova.params, avg.params, rtol=1e-5, atol=1e-6), a
        assert torch.allclose(nova.weights, avg.weights, rtol=1e-12, atol=1e-12)
        assert nova.info["tau_eff"] == pytest.approx(a)


def test_fednova_client_reports_a_norm() -> None:
    # τ = 2, ρ = 0.5 → ‖a‖₁ = 1.5 + 1 = 2.5
    train = LocalTrainParams(optimizer="sgd", lr=0.1, momentum=0.5, weight_decay=0.0)
    update = ClientUpdate(_t(1, 2), UpdateMeta(client_id=0, num_samples=3, round=1, steps=2))
    up, new = FedNovaClient().finish(
        update, ClientState(), ClientDirectives(1, 0), train, global_params=torch.zeros(2)
    )
    assert up.meta.scalars[A_NORM] == pytest.approx(2.5) and new == {}
    assert up.meta.steps == 2 and torch.equal(up.delta, update.delta)


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.9, 0.99])
def test_local_step_weight_sum_against_brute_force(rho: float) -> None:
    for tau in range(0, 12):
        # ‖a‖₁ = Σ_{s=0}^{τ−1} (1 − ρ^{τ−s}) / (1 − ρ)
        brute = sum((1 - rho ** (tau - s)) / (1 - rho) for s in range(tau))
        assert local_step_weight_sum(tau, rho) == pytest.approx(brute, rel=1e-12, abs=1e-12)
    assert local_step_weight_sum(7, 0.0) == 7.0


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_local_step_weight_sum_is_torch_sgd_displacement(rho: float) -> None:
    # With a constant gradient 1, τ steps of torch's SGD(momentum=ρ) move w by −η‖a‖₁.
    tau, lr = 6, 0.1
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=lr, momentum=rho)
    for _ in range(tau):
        opt.zero_grad()
        w.sum().backward()
        opt.step()
    assert float(-w.detach()) == pytest.approx(lr * local_step_weight_sum(tau, rho), rel=1e-6)


# --------------------------------------------------------------- recorded effective weights
def _weights(alg: Algorithm, batch: UpdateBatch) -> StrategyResult:
    return alg.strategy.aggregate(1, torch.zeros(batch.deltas.shape[1]), batch)


def test_effective_weights_sum_to_one_and_match_p_or_p_over_a() -> None:
    ns, a = [2, 5, 3], [4.0, 1.0, 2.0]
    deltas = _rows([1, 0], [0, 1], [1, 1])
    batch = UpdateBatch(deltas, _metas(ns, a), {}, 3)
    p = torch.tensor(ns, dtype=torch.float64) / 10  # [0.2, 0.5, 0.3]
    avg = _weights(_build("fedavg"), batch)
    assert float(avg.weights.sum()) == pytest.approx(1.0)
    assert torch.allclose(avg.weights, p)
    nova = _weights(_build("fednova"), batch)
    # p/a = [0.05, 0.5, 0.15] / 0.7
    want = p / torch.tensor(a, dtype=torch.float64)
    assert float(nova.weights.sum()) == pytest.approx(1.0)
    assert torch.allclose(nova.weights, want / want.sum())
    _close(nova.weights, [0.05 / 0.7, 0.5 / 0.7, 0.15 / 0.7])


def test_effective_weights_with_a_dropped_update() -> None:
    def drop_first(u: torch.Tensor) -> torch.Tensor:
        return torch.tensor([False, True, True])

    ns, a = [2, 5, 3], [4.0, 1.0, 2.0]
    batch = UpdateBatch(_rows([9, 9], [0, 1], [1, 1]), _metas(ns, a), {}, 3)
    for name in ("fedavg", "fednova", "feddyn", "scaffold"):
        b = batch
        if name == "scaffold":
            b = UpdateBatch(batch.deltas, batch.metas, {CONTROL_DELTA: torch.zeros(3, 2)}, 3)
        res = _weights(_build(name, dim=2, defenses=[drop_first]), b)
        assert res.kept.tolist() == [False, True, True], name
        assert float(res.weights[0]) == 0.0, name
        assert float(res.weights.sum()) == pytest.approx(1.0), name
    # FedNova over the kept rows: p = [5/8, 3/8], a = [1, 2] → p/a ∝ [0.625, 0.1875] → [10/13, 3/13]
    nova = _weights(_build("fednova", defenses=[drop_first]), batch)
    _close(nova.weights, [0.0, 10 / 13, 3 / 13])
    # τ_eff = 0.625·1 + 0.375·2 = 1.375;  step = τ_eff·(0.625·[0, 1] + 0.1875·[1, 1])
    _close(nova.params, [1.375 * 0.1875, 1.375 * 0.8125])
