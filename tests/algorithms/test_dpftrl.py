"""DP-FTRL's server and client halves (Kairouz et al. 2021): the FTRL form against FedAvg(M)
with σ = 0, the released noise, clipping, and state that resumes bit for bit."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pytest
import torch

import geofl.algorithms.dpftrl  # noqa: F401  (registers dp_ftrl)
from geofl.algorithms import ALGORITHMS, AlgorithmContext
from geofl.algorithms.dpftrl import DpFtrlClient, DpFtrlStrategy, FtrlSettings, clipped_sum
from geofl.client.state import ClientState
from geofl.client.trainer import LocalTrainParams
from geofl.privacy.tree import node_count, prefix_noise, tree_epsilon
from geofl.registry import NoParams
from geofl.server.aggregators import build_mean
from geofl.server.optimizers import MomentumServerOptimizer, PlainServerOptimizer, ServerOptimizer
from geofl.server.strategy import ComposedStrategy, UpdateBatch
from geofl.server.tier import FlatTier
from geofl.server.weighting import uniform_weights
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

N, D, SEED = 6, 40, 11
TRAIN = LocalTrainParams(optimizer="sgd", lr=0.1, momentum=0.0, weight_decay=0.0)


def _settings(**over: float) -> FtrlSettings:
    base: dict[str, float] = {
        "noise_multiplier": 0.0,
        "clip": math.inf,
        "server_lr": 0.7,
        "momentum": 0.0,
        "expected_clients": 3.0,
        "tree_rounds": 8,
    }
    base.update(over)
    return FtrlSettings(**base)  # type: ignore[arg-type]


def _strategy(**over: float) -> DpFtrlStrategy:
    return DpFtrlStrategy(_settings(**over), num_clients=N, dim=D, seed=SEED)


def _cohort(r: int) -> list[int]:
    return [(r + i) % N for i in range(3)]


def _batch(r: int, cohort: Sequence[int], scale: float = 1.0) -> UpdateBatch:
    gen = torch.Generator().manual_seed(r)
    deltas = scale * torch.randn(len(cohort), D, generator=gen)
    metas = [UpdateMeta(client_id=k, num_samples=10 + k, round=r) for k in cohort]
    return UpdateBatch(deltas, metas, {}, N)


def _run(strategy: object, rounds: range, theta: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    for r in rounds:
        cohort = _cohort(r)
        strategy.configure(r, cohort)  # type: ignore[attr-defined]
        theta = strategy.aggregate(r, theta, _batch(r, cohort, scale)).params  # type: ignore[attr-defined]
    return theta


@pytest.mark.parametrize(
    ("momentum", "tree_rounds", "optimizer"),
    [
        (0.0, 8, PlainServerOptimizer(0.7)),
        (0.0, 3, PlainServerOptimizer(0.7)),
        (0.9, 8, MomentumServerOptimizer(0.7, 0.9)),
        (0.5, 1, MomentumServerOptimizer(0.7, 0.5)),
    ],
)
def test_sigma_zero_unclipped_equals_fedavg_and_fedavgm(
    momentum: float, tree_rounds: int, optimizer: ServerOptimizer
) -> None:
    # θ_t = θ_0 + η v_t, v_t = β v_{t−1} + Σ_{s≤t} x_s/m; with m = |cohort| and uniform
    # weights, Σ_{s≤t} x_s/m = Σ_{s≤t} mean_s, and V_t = Σ_{s≤t} u_s of FedAvgM's
    # u_s = β u_{s−1} + mean_s satisfies V_t = βV_{t−1} + Σ_{s≤t} mean_s: the same θ_t.
    theta0 = torch.randn(D, generator=torch.Generator().manual_seed(0))
    ftrl = _run(_strategy(momentum=momentum, tree_rounds=tree_rounds), range(1, 13), theta0)
    fedavg = ComposedStrategy(FlatTier(uniform_weights, build_mean(NoParams())), optimizer)
    want = _run(fedavg, range(1, 13), theta0)
    assert torch.allclose(ftrl, want, atol=1e-5, rtol=1e-5)
    assert float(torch.linalg.vector_norm(want - theta0)) > 1.0  # it did move


@pytest.mark.parametrize("tree_rounds", [16, 5, 1])
def test_released_noise_is_the_tree_noise_with_closed_trees_carried(tree_rounds: int) -> None:
    sigma, clip = 0.8, 2.0
    s = _strategy(noise_multiplier=sigma, clip=clip, tree_rounds=tree_rounds)
    theta0 = torch.zeros(D)
    metas = [UpdateMeta(client_id=k, num_samples=1, round=1) for k in range(3)]
    zero = UpdateBatch(torch.zeros(3, D), metas)
    prev = torch.zeros(D, dtype=torch.float64)
    for r in range(1, 13):
        s.configure(r, [0, 1, 2])
        res = s.aggregate(r, theta0, zero)
        # β = 0: θ_t = θ_0 + η S̃_t/m, and with zero updates S̃_t is pure noise
        noise = res.params.to(torch.float64) * s.s.expected_clients / s.s.server_lr
        tree, leaf = divmod(r - 1, tree_rounds)
        want = sum(
            (
                prefix_noise(D, std=sigma * clip, keys=(SEED, "dp_ftrl"), tree=b, leaf=tree_rounds)
                for b in range(tree)
            ),
            prefix_noise(D, std=sigma * clip, keys=(SEED, "dp_ftrl"), tree=tree, leaf=leaf + 1),
        )
        assert torch.allclose(noise, want, atol=1e-5), r
        nodes = tree * node_count(tree_rounds) + node_count(leaf + 1)
        assert res.info["dp_ftrl.tree_nodes"] == nodes
        std = sigma * clip * math.sqrt(nodes) / s.s.expected_clients
        assert res.info["dp_ftrl.noise_std"] == pytest.approx(std)
        assert not torch.equal(noise, prev)
        prev = noise


def test_released_prefix_variance_over_seeds() -> None:
    # round 7 of a 16-round tree: nodes [1-4], [5-6], [7] → variance 3σ²C² on S̃_7
    sigma, clip, dim = 1.5, 0.5, 500
    draws = []
    for seed in range(60):
        s = DpFtrlStrategy(
            _settings(noise_multiplier=sigma, clip=clip, tree_rounds=16),
            num_clients=N,
            dim=dim,
            seed=seed,
        )
        draws.append(s.released_noise(7))
    var = float(torch.stack(draws).var())
    assert var == pytest.approx(3 * (sigma * clip) ** 2, rel=0.03)


def test_server_clips_each_row_to_c() -> None:
    deltas = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    total, n_clipped = clipped_sum(deltas, 1.0)
    assert n_clipped == 1
    assert torch.allclose(total, torch.tensor([0.6 + 0.3, 0.8 + 0.4], dtype=torch.float64))
    assert clipped_sum(deltas, math.inf)[1] == 0


def test_client_half_clips_and_logs() -> None:
    update = ClientUpdate(torch.tensor([6.0, 8.0]), UpdateMeta(client_id=0, num_samples=1, round=1))
    out, state = DpFtrlClient(5.0).finish(
        update, ClientState(), ClientDirectives(1, 0), TRAIN, global_params=torch.zeros(2)
    )
    assert torch.allclose(out.delta, torch.tensor([3.0, 4.0])) and state == {}
    assert out.local_log["dp_ftrl_clip"] == {"norm": 10.0, "bound": 5.0, "clipped": True}


def test_state_dict_round_trip_resumes_identically() -> None:
    kw = {"noise_multiplier": 1.1, "clip": 1.0, "momentum": 0.9, "tree_rounds": 5}
    theta0 = torch.randn(D, generator=torch.Generator().manual_seed(1))
    whole = _run(_strategy(**kw), range(1, 12), theta0)
    first = _strategy(**kw)
    mid = _run(first, range(1, 7), theta0)
    state = first.state_dict()
    second = _strategy(**kw)
    second.load_state_dict(state)
    state["velocity"].add_(1.0)  # the loaded strategy holds copies
    resumed = _run(second, range(7, 12), mid)
    assert torch.equal(resumed, whole)
    assert second.privacy_summary() == _strategy_after(kw, theta0).privacy_summary()


def _strategy_after(kw: dict[str, float], theta0: torch.Tensor) -> DpFtrlStrategy:
    s = _strategy(**kw)
    _run(s, range(1, 12), theta0)
    return s


def test_epsilon_in_record_tracks_worst_client_and_grows_with_rounds() -> None:
    s = _strategy(noise_multiplier=1.0, clip=1.0, tree_rounds=4)
    theta = torch.zeros(D)
    eps = []
    for r in range(1, 10):
        s.configure(r, _cohort(r))
        eps.append(s.aggregate(r, theta, _batch(r, _cohort(r))).info["dp_ftrl.epsilon"])
    assert all(a <= b for a, b in itertools.pairwise(eps)) and eps[-1] > eps[0]
    summary = s.privacy_summary()
    assert summary["epsilon"] == eps[-1]
    assert summary["epsilon"] == tree_epsilon(1.0, summary["sq_sensitivity_max"], 1e-5)
    assert set(summary["epsilon_per_client"]) == {str(k) for k in range(N)}


def test_rounds_without_configure_enter_as_empty_leaves() -> None:
    s = _strategy(noise_multiplier=1.0, clip=1.0, tree_rounds=8)
    s.configure(1, [0])
    s.configure(4, [])  # rounds 2–3 never configured: [1-2] and [1-4] still close
    assert int(s.participation.sq[0]) == 3


def test_factory_resolves_defaults_from_the_context() -> None:
    tier = FlatTier(uniform_weights, build_mean(NoParams()))
    ctx = AlgorithmContext(tier, 0.5, 10, D, TRAIN, seed=4, clients_per_round=3, delta=1e-6)
    alg = ALGORITHMS.build("dp_ftrl", {"noise_multiplier": 1.0, "clip": 2.0}, ctx=ctx)
    assert isinstance(alg.strategy, DpFtrlStrategy) and isinstance(alg.client, DpFtrlClient)
    s = alg.strategy.s
    assert (s.server_lr, s.expected_clients, s.tree_rounds, s.delta) == (0.5, 3.0, 4, 1e-6)
    assert alg.strategy.keys == (4, "dp_ftrl")
