"""DP-FTRL for federated learning (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, ICML 2021,
"Practical and Private (Deep) Learning without Sampling or Shuffling", Alg. 1 and §5).

Client k clips its model change to L2 norm C, Δ̄_k = Δw_k · min(1, C/‖Δw_k‖₂), and uploads
it; the server clips every row again (so the bound holds whatever the release steps or an
attack did after the client's clip) and sums the round's rows, x_t = Σ_k Δ̄_k (``[D]``,
one vector–matrix product over the ``[K, D]`` batch). A binary tree over the rounds
(:mod:`geofl.privacy.tree`) releases the noisy prefix sum S̃_t ≈ Σ_{s≤t} x_s with
N(0, σ²C²) per tree node (plain estimator), and the model follows the FTRL form with
optional momentum (DP-FTRLM, Alg. 1 with γ > 0):

    v_t = β v_{t−1} + S̃_t / m,        θ_t = θ_0 + η v_t,

m the expected number of participants (a fixed, data-independent divisor), η the server
learning rate, θ_0 the initial model. (The paper writes gradients, θ = θ_0 − η v; geofl
uploads Δw = −(the descent direction), hence the sign.)

Tree restarts (Kairouz et al. App. D, "tree restart"): every R rounds (``tree_rounds``;
default one epoch, ⌈N/m⌉ rounds) a new tree starts; the released final prefix of each
closed tree is carried, so S̃_t = Σ_{closed trees} S̃(tree) + S̃_current(t) and the FTRL
form continues across restarts.

With σ = 0 and no clipping (C = ∞), S̃_t = Σ_{s≤t} x_s exactly, and θ_t = θ_0 + η Σ_{s≤t}
u_s with u_s = β u_{s−1} + x_s/m (since V_t = Σ_{s≤t} u_s satisfies V_t = βV_{t−1} +
Σ_{s≤t} x_s): FedAvgM with server lr η, momentum β and uniform weights 1/m — FedAvg when
β = 0 and m is the cohort size.

Privacy: client-level (ε, δ)-DP for adding/removing one client's whole data, the
participation pattern drawn from the seed independently of the data, no amplification by
sampling; accounted exactly from the realised pattern (:class:`TreeParticipation`), and
reported per round (``dp_ftrl.epsilon`` in the round record) and at the end
(``final.json["server_privacy"]``). The bound needs every update to reach the model only
through the clipped sum, so server defenses, robust aggregators, other weightings and
governance gates (they let one client's update decide whether others count, or who
takes part later) are refused at load time.

Where the tree noise comes from (``privacy.randomness``): ``seeded`` derives it from the
run's seed, which every client holding the config knows — a client could regenerate and
subtract it, so the guarantee then holds only against parties without the config.
``secure`` keys it by a 256-bit secret the server draws from the OS CSPRNG when the strategy
is built; the secret is never in the config or in anything sent to clients. It is kept in
the strategy's checkpoint state (which already holds the noiseless Σ x_s, so it is exactly
as private): a resumed run must redraw no tree node, since a node's noise is released in
many prefixes but accounted once. Resuming with the other mode is refused.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext
from geofl.client.release import l2_clip
from geofl.client.state import ClientState
from geofl.client.step import PlainClient
from geofl.client.trainer import LocalTrainParams
from geofl.errors import ConfigError
from geofl.privacy.tree import TreeParticipation, node_count, prefix_noise, tree_epsilon
from geofl.registry import CheckContext
from geofl.rng import SEEDED, RandomSource, SecretSource
from geofl.server.strategy import RoundPlan, StrategyResult, UpdateBatch
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["DpFtrlClient", "DpFtrlParams", "DpFtrlStrategy", "FtrlSettings", "clipped_sum"]

log = logging.getLogger("geofl")


class DpFtrlParams(BaseModel):
    """DP-FTRL's parameters (Kairouz et al. 2021, Alg. 1; §5 for the federated setting)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_multiplier: float = Field(
        ..., gt=0.0, allow_inf_nan=False, description="σ: per-tree-node noise std / C"
    )
    clip: float = Field(..., gt=0.0, allow_inf_nan=False, description="C: L2 bound of each Δw")
    server_lr: float | None = Field(
        None, gt=0.0, allow_inf_nan=False, description="η (default federation.server_lr)"
    )
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="β of DP-FTRLM (0: plain DP-FTRL)")
    expected_clients: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="m, the fixed divisor of the noisy sum (default: the fixed sampler's "
        "clients per round; required with other samplers)",
    )
    tree_rounds: int | None = Field(
        None, ge=1, description="R, rounds per tree before a restart (default ⌈N/m⌉, an epoch)"
    )


@dataclass(frozen=True)
class FtrlSettings:
    """Resolved DP-FTRL settings.

    Attributes:
        noise_multiplier: σ ≥ 0 (0 only for non-private reference runs and tests).
        clip: C > 0 (``math.inf``: no clipping).
        server_lr: η.
        momentum: β ∈ [0, 1).
        expected_clients: m > 0.
        tree_rounds: R ≥ 1.
        delta: δ of the reported ε.
    """

    noise_multiplier: float
    clip: float
    server_lr: float
    momentum: float
    expected_clients: float
    tree_rounds: int
    delta: float = 1e-5


def clipped_sum(deltas: torch.Tensor, clip: float) -> tuple[torch.Tensor, int]:
    """Σ_k Δw_k · min(1, C/‖Δw_k‖₂) over the rows of ``deltas`` (Kairouz et al. §5).

    Args:
        deltas: ``[K, D]`` updates (not modified).
        clip: C > 0, or ``math.inf``.

    Returns:
        ``[D]`` float64 sum of the clipped rows, and how many rows were scaled down.
    """
    norms = torch.linalg.vector_norm(deltas, dim=1)
    scale = torch.clamp(clip / norms, max=1.0)  # C/0 = inf → 1
    return (scale.to(deltas.dtype) @ deltas).to(torch.float64), int((scale < 1.0).sum())


class DpFtrlStrategy:
    """Server half: tree-aggregated noisy prefix sums in the FTRL(M) form.

    Args:
        settings: σ, C, η, β, m, R, δ.
        num_clients: N.
        dim: D.
        seed: Run seed; node noise comes from generators ``(seed, "dp_ftrl", "tree", b,
            "level", h, "node", j)`` of ``source``.
        source: Seeded, or a :class:`~geofl.rng.SecretSource` holding the server's secret.
    """

    uploads: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()

    def __init__(
        self,
        settings: FtrlSettings,
        *,
        num_clients: int,
        dim: int,
        seed: int,
        source: RandomSource = SEEDED,
    ) -> None:
        self.s, self.dim, self.keys, self.source = settings, dim, (seed, "dp_ftrl"), source
        self.participation = TreeParticipation(num_clients, settings.tree_rounds)
        self.accounted = 0  # last round whose leaf the accounting has taken
        self.theta0: torch.Tensor | None = None  # [D], the model before the first step
        self.true_sum = torch.zeros(dim, dtype=torch.float64)  # Σ_s x_s so far
        self.carried_noise = torch.zeros(dim, dtype=torch.float64)  # of closed trees
        self.closed_trees = 0
        self.velocity = torch.zeros(dim, dtype=torch.float64)  # v_t
        self._eps: dict[int, float] = {}

    @property
    def node_std(self) -> float:
        """σC, the standard deviation of each tree node's noise."""
        return self.s.noise_multiplier * self.s.clip if self.s.noise_multiplier else 0.0

    def position(self, round_idx: int) -> tuple[int, int]:
        """``(tree b ≥ 0, leaf i ≥ 1)`` of round ``round_idx`` (≥ 1)."""
        tree, offset = divmod(round_idx - 1, self.s.tree_rounds)
        return tree, offset + 1

    def configure(self, round_idx: int, cohort: Sequence[int]) -> RoundPlan:
        """Account the round's leaf with everyone asked to train (a superset of the
        updates that will count); rounds never configured enter as empty leaves."""
        for r in range(self.accounted + 1, round_idx + 1):
            _, leaf = self.position(r)
            if leaf == 1:
                self.participation.restart()
            self.participation.step(leaf, cohort if r == round_idx else ())
        self.accounted = max(self.accounted, round_idx)
        return RoundPlan()

    def released_noise(self, round_idx: int) -> torch.Tensor:
        """``[D]`` float64 noise on S̃ at ``round_idx`` (closes the trees before its own)."""
        tree, leaf = self.position(round_idx)
        std, r_max = self.node_std, self.s.tree_rounds
        while self.closed_trees < tree:  # the final prefix of each closed tree is carried
            closed = self.closed_trees
            self.carried_noise += prefix_noise(
                self.dim, std=std, keys=self.keys, tree=closed, leaf=r_max, source=self.source
            )
            self.closed_trees += 1
        own = prefix_noise(
            self.dim, std=std, keys=self.keys, tree=tree, leaf=leaf, source=self.source
        )
        return self.carried_noise + own

    def nodes_summed(self, round_idx: int) -> int:
        """Noisy nodes in S̃ at ``round_idx``: popcount(R) per closed tree + popcount(i)."""
        tree, leaf = self.position(round_idx)
        return tree * node_count(self.s.tree_rounds) + node_count(leaf)

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        """θ_t = θ_0 + η v_t, v_t = β v_{t−1} + S̃_t/m (Kairouz et al. 2021, Alg. 1)."""
        if self.theta0 is None:
            self.theta0 = global_params.to(torch.float64).clone()
        x, n_clipped = clipped_sum(batch.deltas, self.s.clip)
        self.true_sum += x
        noisy = self.true_sum + self.released_noise(round_idx)
        self.velocity.mul_(self.s.momentum).add_(noisy, alpha=1.0 / self.s.expected_clients)
        params = (self.theta0 + self.s.server_lr * self.velocity).to(global_params.dtype)
        k = batch.deltas.shape[0]
        weights = torch.full((k,), 1.0 / self.s.expected_clients, dtype=torch.float64)
        info = self._info(round_idx, n_clipped / max(k, 1))
        kept = torch.ones(k, dtype=torch.bool)
        return StrategyResult(params, params - global_params, weights, kept, info)

    def epsilon(self, sq_sensitivity: int) -> float:
        """ε(δ) for squared sensitivity S (cached: S takes few distinct values)."""
        if sq_sensitivity not in self._eps:
            self._eps[sq_sensitivity] = tree_epsilon(
                self.s.noise_multiplier, sq_sensitivity, self.s.delta
            )
        return self._eps[sq_sensitivity]

    def _info(self, round_idx: int, clipped_fraction: float) -> dict[str, float]:
        sq_max = int(self.participation.sq.max()) if self.participation.sq.numel() else 0
        nodes = self.nodes_summed(round_idx)
        return {
            "dp_ftrl.epsilon": self.epsilon(sq_max),
            "dp_ftrl.noise_std": self.node_std * math.sqrt(nodes) / self.s.expected_clients,
            "dp_ftrl.tree_nodes": float(nodes),
            "dp_ftrl.sq_sensitivity": float(sq_max),
            "dp_ftrl.clipped_fraction": clipped_fraction,
        }

    def privacy_summary(self) -> dict[str, Any]:
        """The run's client-level (ε, δ) of everything released, JSON-ready."""
        sq = [int(v) for v in self.participation.sq.tolist()]
        per_client = {str(k): self.epsilon(v) for k, v in enumerate(sq) if v > 0}
        s = self.s
        return {
            "mechanism": "dp_ftrl",
            "accountant": "rdp",
            "delta": s.delta,
            "epsilon": self.epsilon(max(sq, default=0)),
            "epsilon_per_client": per_client,
            "noise_multiplier": s.noise_multiplier,
            "clip": s.clip,
            "expected_clients": s.expected_clients,
            "tree_rounds": s.tree_rounds,
            "sq_sensitivity_max": max(sq, default=0),
            "estimator": "plain binary-tree prefix sums (Kairouz et al. 2021)",
            "randomness": self.source.mode,
            "neighbouring": (
                "add/remove one client's whole data (client-level DP); participation drawn "
                "independently of the data; no amplification by sampling"
            ),
            "participation": (
                "accounted from the realised pattern: S_k = Σ over released tree nodes of "
                "(client k's participations in the node)², noise multiplier σ/√S_k; once "
                "per tree gives S_k ≤ ⌈log2(R+1)⌉ per tree (Kairouz et al. App. D)"
            ),
        }

    def state_dict(self) -> dict[str, Any]:
        """Tree, FTRL and accounting state; the node noise is regenerated, not stored (in
        secure mode from the server's secret, which is stored: the state is server-private,
        it already holds the noiseless sum)."""
        theta0 = None if self.theta0 is None else self.theta0.clone()
        secret = self.source.key if isinstance(self.source, SecretSource) else None
        return {
            "secret": secret,
            "theta0": theta0,
            "true_sum": self.true_sum.clone(),
            "carried_noise": self.carried_noise.clone(),
            "closed_trees": self.closed_trees,
            "velocity": self.velocity.clone(),
            "accounted": self.accounted,
            "participation": self.participation.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (in secure mode, with the checkpoint's secret).

        Raises:
            ConfigError: naming ``privacy.randomness`` when the checkpoint was written in
                the other mode (resuming would redraw released tree nodes).
        """
        self.source = _resumed_source(self.source, state.get("secret"))
        theta0 = state["theta0"]
        self.theta0 = None if theta0 is None else theta0.clone()
        self.true_sum = state["true_sum"].clone()
        self.carried_noise = state["carried_noise"].clone()
        self.closed_trees = int(state["closed_trees"])
        self.velocity = state["velocity"].clone()
        self.accounted = int(state["accounted"])
        self.participation.load_state_dict(state["participation"])


def _resumed_source(current: RandomSource, secret: bytes | None) -> RandomSource:
    """The tree's source after a resume: the checkpoint's secret, in the same mode."""
    was = "seeded" if secret is None else "secure"
    if was != current.mode:
        raise ConfigError(
            "privacy.randomness",
            f"the checkpoint's dp_ftrl tree noise is {was} but this run is {current.mode}; "
            f"resume with privacy.randomness: {was} (a new source would redraw noise of tree "
            "nodes already released), or start a new run",
        )
    return current if secret is None else SecretSource(secret)


class DpFtrlClient(PlainClient):
    """Client half: plain local training, then Δw clipped to L2 norm C (Kairouz et al. §5)."""

    def __init__(self, clip: float) -> None:
        self.clip = clip

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        clipped, norm = l2_clip(update.delta, self.clip)
        report = {"norm": norm, "bound": self.clip, "clipped": norm > self.clip}
        local_log = {**update.local_log, "dp_ftrl_clip": report}
        return replace(update, delta=clipped, local_log=local_log), {}


def _method_fail(ctx: CheckContext, field_name: str, message: str) -> None:
    """Raise the one-line ConfigError for a field of the method (``methods.<i>.<field>``)."""
    method_path = ctx.path.rsplit(".", 1)[0] if "." in ctx.path else ctx.path
    raise ConfigError(".".join(p for p in (method_path, field_name) if p), message)


#: Weightings DP-FTRL accepts: both are replaced by its own uniform 1/m (data_size is the
#: method default, so it cannot be told apart from an unset weighting).
_WEIGHTINGS = ("uniform", "data_size")


def _check_composition(ctx: CheckContext) -> None:
    """Refuse what would let one client's update change how others count."""
    method = ctx.method or {}
    if method.get("defenses"):
        _method_fail(
            ctx,
            "defenses",
            "dp_ftrl sums every clipped update; a server defense lets one client's update "
            "decide whether others count, which breaks the per-round sensitivity C — remove it",
        )
    agg = (method.get("aggregator") or {}).get("name", "mean")
    if agg != "mean":
        _method_fail(
            ctx,
            "aggregator.name",
            f"dp_ftrl sums the clipped updates itself; the {agg!r} aggregator would not be "
            "used — use aggregator: {name: mean}",
        )
    weighting = (method.get("weighting") or {}).get("name", "data_size")
    if weighting not in _WEIGHTINGS:
        _method_fail(
            ctx,
            "weighting.name",
            f"dp_ftrl weighs every clipped update 1/m; the {weighting!r} weighting would not "
            "be used — use weighting: {name: uniform}",
        )
    if ctx.experiment.get("governance") is not None:
        raise ConfigError(
            "governance",
            "dp_ftrl's privacy bound needs a participation pattern independent of the data; "
            "governance gates exclude clients by reputation earned from their updates — "
            "drop governance or the dp_ftrl method",
        )


def _check(params: DpFtrlParams, ctx: CheckContext) -> None:
    _check_composition(ctx)
    m = params.expected_clients or ctx.clients_per_round
    if m is None:
        ctx.fail(
            "expected_clients",
            "required unless federation.sampling is fixed: the noisy sum is divided by a "
            "fixed, data-independent count (e.g. rate·N for Poisson sampling)",
        )
    fed = ctx.experiment.get("federation") or {}
    n = int(fed.get("num_clients", 0))
    rounds = params.tree_rounds or math.ceil(n / m)
    if ctx.clients_per_round is not None and ctx.clients_per_round * rounds > n:
        log.warning(
            "%s: dp_ftrl trains %d clients in each of the %d rounds of a tree but there are "
            "only %d clients, so some take part more than once per tree: their sensitivity "
            "grows like the square of their participations per tree node (accounted exactly; "
            "ε is larger than the once-per-tree bound of Kairouz et al. App. D) — fewer "
            "tree_rounds or a lower participation keep ε small",
            ctx.path,
            ctx.clients_per_round,
            rounds,
            n,
        )


@ALGORITHMS.register("dp_ftrl", params=DpFtrlParams, traits=("central_dp",), check=_check)
def build_dp_ftrl(params: DpFtrlParams, *, ctx: AlgorithmContext) -> Algorithm:
    """DP-FTRL (Kairouz et al. 2021): clipped client deltas, tree-aggregated noisy FTRL."""
    m = params.expected_clients or ctx.clients_per_round
    if m is None:
        raise ConfigError("expected_clients", "dp_ftrl needs expected_clients with this sampler")
    settings = FtrlSettings(
        noise_multiplier=params.noise_multiplier,
        clip=params.clip,
        server_lr=params.server_lr if params.server_lr is not None else ctx.server_lr,
        momentum=params.momentum,
        expected_clients=float(m),
        tree_rounds=params.tree_rounds or math.ceil(ctx.num_clients / m),
        delta=ctx.delta,
    )
    strategy = DpFtrlStrategy(
        settings,
        num_clients=ctx.num_clients,
        dim=ctx.dim,
        seed=ctx.seed,
        source=ctx.randomness,
    )
    return Algorithm(strategy, DpFtrlClient(params.clip))
