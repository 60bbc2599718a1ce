"""Tree aggregation of a stream of clipped sums and its client-level privacy accounting.

The binary-tree mechanism of DP-FTRL (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu 2021,
"Practical and Private (Deep) Learning without Sampling or Shuffling", §3 and App. D;
Dwork et al. 2010, Chan et al. 2011): leaves are the rounds ``1..R`` of one tree; the node
(h, j) at level h covers leaves ``j·2^h + 1 … (j+1)·2^h`` and carries its leaves' sum plus
its own noise N(0, σ²C² I) (σ = ``noise_multiplier``, C the clip bound). The *plain*
estimator releases the prefix sum Σ_{s≤i} x_s as the sum of the noisy nodes of the binary
decomposition of i (:func:`prefix_nodes`), so its noise has variance σ²C² · popcount(i) per
coordinate. (Honaker's estimator, which averages every node's two readings, lowers that
variance by up to ~2×; it needs every node's value, the plain one only the current
decomposition — so here a node's noise is never stored but regenerated from its generator.)

Node noise comes from the generator of ``(*keys, "tree", b, "level", h, "node", j)`` of a
:class:`~geofl.rng.RandomSource`: the same node always gets the same noise, whatever ran
before, so a run resumed from a checkpoint releases exactly what an uninterrupted one does.
That is also a privacy requirement: a node's noise is released many times (in every prefix
whose decomposition holds the node) and the accounting counts it once, so it must never be
redrawn. With the seeded source anyone who knows the keys (the config's seed) regenerates
the noise; the secret source (``privacy.randomness: secure``) keys it by the server's
secret.

Accounting (:class:`TreeParticipation`). Neighbouring datasets add or remove one client's
whole data; the participation pattern (who is asked to train in which round) is drawn from
the seed independently of any data, so the analysis conditions on it. Removing client k
changes each node v by at most n_v(k)·C in L2, n_v(k) the number of its participations
among v's leaves. Releasing every completed node (a superset of what the prefix sums use)
is then one Gaussian mechanism with L2 sensitivity C·√S_k, S_k = Σ_v n_v(k)² over the
completed nodes of every tree, and noise σC: its RDP is α·S_k/(2σ²) (Mironov 2017, Prop. 7),
a Gaussian of noise multiplier σ/√S_k. When each client takes part at most once per tree
of R rounds, S_k ≤ ⌈log₂(R+1)⌉ per tree — the bound of Kairouz et al. App. D, which
``dp_accounting.SingleEpochTreeAggregationDpEvent`` implements; with more participations
per tree it is the exact generalisation (S_k grows like n², so a client in every round of
a long tree is accounted far worse than one in every round of one-round trees).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import dp_accounting as dpa
import torch
from dp_accounting.rdp import rdp_privacy_accountant

from geofl.rng import SEEDED, Key, RandomSource

__all__ = [
    "RDP_ORDERS",
    "TreeParticipation",
    "node_count",
    "prefix_nodes",
    "prefix_noise",
    "tree_epsilon",
]

#: RDP orders: dp_accounting's defaults plus 1.05 (it helps when ε is in the hundreds).
#: Orders ≤ 1.01 are left out: they only tighten ε above ~10⁴ (−ln δ/(α−1) alone exceeds
#: 1,150 at α = 1.01, δ = 1e-5), and dp_accounting drops them for sampled mechanisms
#: whose series does not converge.
RDP_ORDERS: tuple[float, ...] = tuple(
    sorted(set(rdp_privacy_accountant.DEFAULT_RDP_ORDERS) | {1.05})
)


def prefix_nodes(leaf: int) -> list[tuple[int, int]]:
    """The nodes ``(level h, index j)`` whose sums add up to the prefix ``[1, leaf]``.

    One node per set bit h of ``leaf``: j = (leaf >> h) − 1 covers leaves
    ``j·2^h + 1 … (j+1)·2^h`` (the ``GetSum`` of Kairouz et al. 2021's tree aggregation).
    Highest level first.

    Example:
        >>> prefix_nodes(5)
        [(2, 0), (0, 4)]
    """
    if leaf < 1:
        raise ValueError(f"leaf must be ≥ 1, got {leaf}")
    return [(h, (leaf >> h) - 1) for h in reversed(range(leaf.bit_length())) if leaf >> h & 1]


def node_count(leaf: int) -> int:
    """Number of noisy nodes the plain estimator sums for prefix ``[1, leaf]`` (popcount)."""
    return len(prefix_nodes(leaf))


def prefix_noise(
    dim: int,
    *,
    std: float,
    keys: tuple[Key, ...],
    tree: int,
    leaf: int,
    source: RandomSource = SEEDED,
) -> torch.Tensor:
    """The noise on the released prefix ``[1, leaf]`` of tree ``tree``: Σ of its nodes' noise.

    Args:
        dim: D.
        std: σC, the per-node standard deviation.
        keys: Generator key prefix (e.g. ``(seed, "dp_ftrl")``).
        tree: Index b ≥ 0 of the tree (restarts count up).
        leaf: Position i ≥ 1 of the round in its tree.
        source: Where the node generators come from (seeded, or the server's secret).

    Returns:
        ``[D]`` float64 noise, variance std² · :func:`node_count` per coordinate.
    """
    out = torch.zeros(dim, dtype=torch.float64)
    if std == 0.0:
        return out
    for h, j in prefix_nodes(leaf):
        gen = source.torch(*keys, "tree", tree, "level", h, "node", j)
        out.add_(torch.randn(dim, generator=gen, dtype=torch.float64), alpha=std)
    return out


class TreeParticipation:
    """Per-client squared sensitivity S_k of the completed nodes of a tree stream.

    Keeps ``open`` (``[L, N]`` int64), client k's participations in the node still open at
    each level of the current tree, and ``sq`` (``[N]`` int64), S_k = Σ n_v(k)² over every
    node completed so far (all trees). Vectorised over clients.

    Args:
        num_clients: N.
        tree_rounds: R, the leaves per tree (L = bit length of R levels).
    """

    def __init__(self, num_clients: int, tree_rounds: int) -> None:
        self.levels = tree_rounds.bit_length()
        self.open = torch.zeros(self.levels, num_clients, dtype=torch.int64)
        self.sq = torch.zeros(num_clients, dtype=torch.int64)

    def restart(self) -> None:
        """Start a new tree: nodes left open were never released, so they are dropped."""
        self.open.zero_()

    def step(self, leaf: int, participants: Sequence[int]) -> None:
        """Add leaf ``leaf`` (≥ 1) with its distinct ``participants``; close its nodes."""
        if participants:
            idx = torch.as_tensor(list(participants), dtype=torch.int64)
            self.open[:, idx] += 1
        done = min((leaf & -leaf).bit_length(), self.levels)  # levels h with 2^h | leaf
        self.sq += (self.open[:done] ** 2).sum(dim=0)
        self.open[:done] = 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The counters (copies)."""
        return {"open": self.open.clone(), "sq": self.sq.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.open = state["open"].clone()
        self.sq = state["sq"].clone()


def tree_epsilon(noise_multiplier: float, sq_sensitivity: float, delta: float) -> float:
    """ε(δ) of releasing the nodes of a client with squared sensitivity S (in units of C²).

    The Gaussian mechanism of L2 sensitivity C√S and noise σC, i.e. dp_accounting's
    ``GaussianDpEvent(σ/√S)`` under the RDP accountant (replace-with-zero neighbours,
    ``REPLACE_SPECIAL``, the relation of the tree event). 0 when S = 0; inf when σ = 0 < S.

    Args:
        noise_multiplier: σ ≥ 0 (per-node std / C).
        sq_sensitivity: S ≥ 0.
        delta: δ ∈ (0, 1).
    """
    if sq_sensitivity <= 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    acc = rdp_privacy_accountant.RdpAccountant(
        list(RDP_ORDERS), dpa.NeighboringRelation.REPLACE_SPECIAL
    )
    acc.compose(dpa.GaussianDpEvent(noise_multiplier / math.sqrt(sq_sensitivity)))
    return float(acc.get_epsilon(delta))
