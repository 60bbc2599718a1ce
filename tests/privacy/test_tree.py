"""Tree aggregation (Kairouz et al. 2021): node decomposition, noise variance, and the
client-level accounting checked against dp_accounting computed independently."""

from __future__ import annotations

import itertools
import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant

from geofl.privacy.tree import (
    RDP_ORDERS,
    TreeParticipation,
    node_count,
    prefix_nodes,
    prefix_noise,
    tree_epsilon,
)

DELTA = 1e-5


def _rdp_epsilon(event: dpa.DpEvent) -> float:
    """dp_accounting's own ε(δ) for ``event`` (replace-with-zero neighbours, same orders)."""
    acc = rdp_privacy_accountant.RdpAccountant(
        list(RDP_ORDERS), dpa.NeighboringRelation.REPLACE_SPECIAL
    )
    acc.compose(event)
    return float(acc.get_epsilon(DELTA))


@pytest.mark.parametrize("leaf", range(1, 130))
def test_prefix_nodes_tile_the_prefix_once(leaf: int) -> None:
    covered: list[int] = []
    for h, j in prefix_nodes(leaf):
        covered += range(j * 2**h + 1, (j + 1) * 2**h + 1)
    assert sorted(covered) == list(range(1, leaf + 1))
    assert node_count(leaf) == bin(leaf).count("1")


def test_prefix_nodes_refuse_leaf_zero() -> None:
    with pytest.raises(ValueError, match="leaf must be ≥ 1"):
        prefix_nodes(0)


def test_prefix_noise_is_the_sum_of_its_nodes_regenerated_from_their_keys() -> None:
    keys = (7, "dp_ftrl")
    a = prefix_noise(50, std=0.3, keys=keys, tree=2, leaf=13)
    assert torch.equal(a, prefix_noise(50, std=0.3, keys=keys, tree=2, leaf=13))
    # 13 = 8 + 4 + 1: leaf 12's prefix uses the same two upper nodes, plus node (0, 12)
    b = prefix_noise(50, std=0.3, keys=keys, tree=2, leaf=12)
    c = prefix_noise(50, std=0.3, keys=keys, tree=2, leaf=1)  # node (0, 0), not (0, 12)
    assert not torch.allclose(a - b, c)
    assert not torch.equal(a, prefix_noise(50, std=0.3, keys=keys, tree=3, leaf=13))
    assert not torch.equal(a, prefix_noise(50, std=0.3, keys=(8, "dp_ftrl"), tree=2, leaf=13))
    assert torch.equal(prefix_noise(5, std=0.0, keys=keys, tree=0, leaf=7), torch.zeros(5))


@pytest.mark.parametrize("leaf", [1, 6, 7, 16, 31])
def test_prefix_noise_variance_is_std2_times_node_count(leaf: int) -> None:
    std, dim, seeds = 0.5, 4000, 40
    draws = torch.stack(
        [prefix_noise(dim, std=std, keys=(s, "v"), tree=0, leaf=leaf) for s in range(seeds)]
    )
    want = std**2 * node_count(leaf)
    # 160k draws: the sample variance's relative standard error is √(2/n) ≈ 0.35 %
    assert float(draws.var()) == pytest.approx(want, rel=0.02)
    assert abs(float(draws.mean())) < 4 * math.sqrt(want / draws.numel())


def _brute_force_sq(pattern: list[set[int]], num_clients: int, tree_rounds: int) -> np.ndarray:
    """Σ over every completed node of every tree of (participations in the node)²."""
    sq = np.zeros(num_clients, dtype=np.int64)
    for start in range(0, len(pattern), tree_rounds):
        tree = pattern[start : start + tree_rounds]
        for h in range(tree_rounds.bit_length()):
            size = 2**h
            for j in range(len(tree) // size):  # completed nodes only
                leaves = tree[j * size : (j + 1) * size]
                counts = np.array([sum(k in s for s in leaves) for k in range(num_clients)])
                sq += counts**2
    return sq


@pytest.mark.parametrize(("rounds", "tree_rounds"), [(20, 20), (20, 6), (13, 4), (9, 1)])
def test_participation_counter_matches_brute_force(rounds: int, tree_rounds: int) -> None:
    rng = np.random.default_rng(rounds * 100 + tree_rounds)
    n = 7
    pattern = [set(np.flatnonzero(rng.random(n) < 0.4).tolist()) for _ in range(rounds)]
    counter = TreeParticipation(n, tree_rounds)
    for r, who in enumerate(pattern, start=1):
        leaf = (r - 1) % tree_rounds + 1
        if leaf == 1:
            counter.restart()
        counter.step(leaf, sorted(who))
    assert counter.sq.tolist() == _brute_force_sq(pattern, n, tree_rounds).tolist()
    restored = TreeParticipation(n, tree_rounds)
    restored.load_state_dict(counter.state_dict())
    assert torch.equal(restored.sq, counter.sq) and torch.equal(restored.open, counter.open)


@pytest.mark.parametrize("rounds", [1, 2, 3, 4, 7, 8, 20, 100])
def test_once_per_tree_worst_leaf_is_the_tree_depth(rounds: int) -> None:
    worst = 0
    for leaf in range(1, rounds + 1):
        pattern = [{0} if r == leaf else set() for r in range(1, rounds + 1)]
        worst = max(worst, int(_brute_force_sq(pattern, 1, rounds)[0]))
    assert worst == math.ceil(math.log2(rounds + 1))


@pytest.mark.parametrize(
    ("sigma", "rounds"), list(itertools.product([0.5, 1.0, 2.0, 4.0], [1, 5, 20, 100]))
)
def test_epsilon_equals_dp_accounting_single_epoch_tree(sigma: float, rounds: int) -> None:
    # a client in leaf 1 only: S = ⌈log2(T+1)⌉, dp_accounting's tree event (App. D)
    counter = TreeParticipation(3, rounds)
    for leaf in range(1, rounds + 1):
        counter.step(leaf, [0] if leaf == 1 else [])
    got = tree_epsilon(sigma, int(counter.sq.max()), DELTA)
    want = _rdp_epsilon(dpa.SingleEpochTreeAggregationDpEvent(sigma, rounds))
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(("sigma", "trees", "tree_rounds"), [(1.0, 4, 5), (2.0, 10, 8)])
def test_restarted_trees_compose_like_dp_accounting(
    sigma: float, trees: int, tree_rounds: int
) -> None:
    # once per tree, in each tree's first leaf: the self-composition of single-epoch trees
    counter = TreeParticipation(2, tree_rounds)
    for _ in range(trees):
        counter.restart()
        for leaf in range(1, tree_rounds + 1):
            counter.step(leaf, [1] if leaf == 1 else [])
    got = tree_epsilon(sigma, int(counter.sq[1]), DELTA)
    tree = dpa.SingleEpochTreeAggregationDpEvent(sigma, tree_rounds)
    event = dpa.SelfComposedDpEvent(tree, trees)
    assert got == pytest.approx(_rdp_epsilon(event), rel=1e-12)


@pytest.mark.parametrize("rounds", [1, 3, 20])
def test_one_round_trees_in_every_round_are_composed_gaussians(rounds: int) -> None:
    counter = TreeParticipation(1, 1)
    for _ in range(rounds):
        counter.restart()
        counter.step(1, [0])
    assert int(counter.sq[0]) == rounds
    want = _rdp_epsilon(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1.3), rounds))
    assert tree_epsilon(1.3, rounds, DELTA) == pytest.approx(want, rel=1e-12)


def test_every_round_in_one_tree_costs_the_sum_of_squared_node_sizes() -> None:
    counter = TreeParticipation(1, 20)
    for leaf in range(1, 21):
        counter.step(leaf, [0])
    # completed nodes of 20 leaves: 20 of size 1, 10 of 2, 5 of 4, 2 of 8, 1 of 16
    assert int(counter.sq[0]) == 20 + 10 * 4 + 5 * 16 + 2 * 64 + 256


def test_epsilon_is_monotone_in_sigma_and_sensitivity() -> None:
    sigmas = [0.3, 0.5, 1.0, 2.0, 5.0]
    by_sigma = [tree_epsilon(s, 5, DELTA) for s in sigmas]
    assert all(a > b for a, b in itertools.pairwise(by_sigma))
    by_rounds = [tree_epsilon(1.0, math.ceil(math.log2(t + 1)), DELTA) for t in (1, 3, 7, 15)]
    assert all(a < b for a, b in itertools.pairwise(by_rounds))
    assert tree_epsilon(1.0, 0, DELTA) == 0.0
    assert tree_epsilon(0.0, 1, DELTA) == math.inf
