"""DUAL-SHIELD's server side (paper 004, §2.5–2.6, Alg. 1 steps 3–6): CGF + HRA.

Ablations (004 Table 4): ``cgf_filter: false`` keeps every update (HRA only: the evidence of
Eq. 8 is the soft mask m̃ alone, weights ∝ r); ``hra_weighting: false`` averages CGF's
survivors plainly (CGF only); both false with the ``adaptive_dp`` release step is ADP only
(a plain mean; reputations are still tracked, ADP's budget needs them).

Per round: the method's own defenses (if any) first, then the cosine-guided filter
(:mod:`geofl.server.cgf`, Eq. 6–7) on the updates they kept, then the reputation update
(:mod:`geofl.server.reputation`, Eq. 8) of every update that arrived — rows a defense or
CGF rejected get evidence 0 — and the survivors' weighted mean with ω ∝ r (Eq. 9), then
the plain server step. ADP (§2.7) is client-side (:mod:`geofl.privacy.adaptive`, release
step ``adaptive_dp``); this strategy only schedules it: :meth:`DualShieldStrategy.configure`
sends each selected client its reputation r_j from before the round, T, and the norms of the
last global model changes (public: every client receives the models).

Design: one algorithm whose strategy composes two stateful components, not stateful
defense/weighting plug-ins inside the tier, because

* CGF's soft mask must reach HRA, and HRA must also see the updates CGF *rejected* (their
  evidence lowers r): the tier's defense → weighting seam passes only a keep-mask and
  weighs only kept rows, so plug-ins would need a side channel and a new tier protocol that
  every algorithm shares;
* defenses and weightings stay pure functions of one round — what a stacked tier (003's
  cluster → LEO → GEO hierarchy) reuses at every level — and the cross-round state (the
  previous survivors' mean, the trusted history, every client's r) lives in one place that
  is already checkpointed: this strategy's :meth:`state_dict`;
* :class:`~geofl.server.cgf.CosineFilter` and :class:`~geofl.server.reputation.ReputationBook`
  are standalone (explicit ``[K, D]`` updates and client ids in, state_dict out), so a 003
  strategy can hold one per tier, and detection work reads one per-round result
  (:attr:`DualShieldStrategy.last`: scores, z, hard and soft masks, reputations).

Recorded per round (the round record's ``strategy`` scalars): ``cgf.survivors``,
``cgf.flagged``, ``cgf.fallback`` (1 when the K_min fallback fired), ``cgf.mad``, the score
``cgf.z.<client>`` of each update CGF scored, and ``hra.reputation.<client>`` of every client
of the federation (read them back with :meth:`geofl.records.RoundRecord.client_scalars`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext, fail_method_field
from geofl.privacy.adaptive import PUBLIC_NORMS, REPUTATION_KEY, ROUNDS_KEY, public_norm_key
from geofl.registry import CheckContext
from geofl.server.cgf import EPS_MAD, CgfResult, CgfSettings, CosineFilter, Reference
from geofl.server.columns import EPILOGUE_COLUMNS, linear_combinations, squared_norm
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.reputation import HraSettings, ReputationBook, reputation_weights
from geofl.server.strategy import ComposedStrategy, RoundPlan, StrategyResult, UpdateBatch
from geofl.server.tier import FlatTier

__all__ = ["DualShieldParams", "DualShieldStrategy", "ShieldRound", "survivor_products"]


class DualShieldParams(BaseModel):
    """CGF and HRA parameters (defaults: 004 Appendix A, Table A, and §2.5–2.6)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lam: float = Field(1.0, gt=0.0, allow_inf_nan=False, description="λ: CGF threshold on z")
    slope: float = Field(1.0, gt=0.0, allow_inf_nan=False, description="k of the soft mask φ")
    k_min: int = Field(5, ge=1, description="K_min: fewest survivors before the fallback")
    reference: Reference = Field("previous_mean", description="CGF reference direction")
    trim_fraction: float = Field(0.1, ge=0.0, lt=0.5, description="β of the trimmed_mean ref")
    history_decay: float = Field(0.9, ge=0.0, lt=1.0, description="η of the trusted history")
    eps_mad: float = Field(EPS_MAD, gt=0.0, allow_inf_nan=False, description="ε_MAD")
    beta: float = Field(0.92, gt=0.0, lt=1.0, description="β: reputation momentum (Eq. 8)")
    r_min: float = Field(0.1, ge=0.0, lt=1.0, description="reputation floor r_min")
    r_init: float = Field(0.5, gt=0.0, le=1.0, description="r_j(0)")
    absent: Literal["hold", "decay"] = Field("hold", description="rule for absent clients")
    absent_decay: float = Field(
        0.99, gt=0.0, le=1.0, description="γ of absent: decay, r ← max(r_min, γ r)"
    )
    cgf_filter: bool = Field(
        True,
        description="drop updates with z > λ (false, ablation 'HRA only': every update is "
        "kept, Eq. 8's evidence is m̃ alone)",
    )
    hra_weighting: bool = Field(
        True,
        description="ω ∝ r (Eq. 9; false, ablation 'CGF only': the survivors' plain mean, "
        "reputation still tracked for ADP and the records)",
    )

    def cgf(self) -> CgfSettings:
        return CgfSettings(
            self.lam,
            self.slope,
            self.k_min,
            self.reference,
            self.trim_fraction,
            self.history_decay,
            self.eps_mad,
        )

    def hra(self) -> HraSettings:
        return HraSettings(self.beta, self.r_min, self.r_init, self.absent, self.absent_decay)


@dataclass(frozen=True)
class ShieldRound:
    """What CGF and HRA decided in one round (all ``[K]``, aligned with the batch).

    Attributes:
        clients: int64 client ids.
        screened: bool, rows the method's own defenses kept (CGF scored these).
        cgf: CGF's result over the screened rows (None when no row was screened).
        hard: bool m_j (False for rows a defense dropped).
        soft: float64 m̃_j (0 for rows a defense dropped).
        reputation: float64 r_j(t) after Eq. 8.
        weights: float64 ω_j (Eq. 9).
    """

    clients: torch.Tensor
    screened: torch.Tensor
    cgf: CgfResult | None
    hard: torch.Tensor
    soft: torch.Tensor
    reputation: torch.Tensor
    weights: torch.Tensor


def survivor_products(
    weights: torch.Tensor, survivors: torch.Tensor, updates: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([D] Σ ω_j Δw_j, [D] survivors' mean)`` from one read of ``[K, D]``.

    Both rows of a ``[2, K] × [K, D]`` product in cache-sized column blocks
    (:func:`geofl.server.columns.linear_combinations`).
    """
    n = int(survivors.sum())
    coeffs = torch.stack([weights.to(torch.float64), survivors.to(torch.float64) / n])
    delta, mean = linear_combinations(coeffs, updates)
    return delta, mean


class DualShieldStrategy(ComposedStrategy):
    """CGF (Eq. 6–7) → HRA (Eq. 8) → ω ∝ r over the survivors (Eq. 9) → server step.

    Args:
        tier: The method's tier: its defenses run before CGF; its weighting and aggregator
            are replaced by Eq. 9's weighted mean (the load-time check allows only
            ``mean`` and the default weightings).
        server_lr: η_s of the plain server step.
        params: CGF and HRA settings.
        num_clients: N.
        rounds: T, sent to the clients for ADP's g(r, t) (004 Eq. 12).
    """

    def __init__(
        self,
        tier: FlatTier,
        server_lr: float,
        params: DualShieldParams,
        num_clients: int,
        rounds: int = 0,
    ) -> None:
        self.plain = PlainServerOptimizer(server_lr)
        super().__init__(tier, self.plain)
        self.params = params
        self.filter = CosineFilter(params.cgf())
        self.book = ReputationBook(params.hra(), num_clients)
        self.rounds = rounds
        self.public_norms: list[float] = []  # ‖w(s) − w(s − 1)‖, most recent first
        self.last: ShieldRound | None = None

    def configure(self, round_idx: int, cohort: Sequence[int]) -> RoundPlan:
        """Per client: r_j before this round, T and the public norms (ADP, 004 Alg. 1 step 1)."""
        shared: dict[str, float] = {ROUNDS_KEY: float(self.rounds)}
        shared.update({public_norm_key(i + 1): n for i, n in enumerate(self.public_norms)})
        r = self.book.r.tolist()
        return RoundPlan(extra={k: {**shared, REPUTATION_KEY: float(r[k])} for k in cohort})

    def shield(self, round_idx: int, batch: UpdateBatch) -> ShieldRound:
        """Defenses, CGF and the reputation update for ``batch`` (mutates the reputations)."""
        updates, k = batch.deltas, batch.deltas.shape[0]
        screened, _ = self.tier.select(updates, batch.metas, round_idx)
        idx = torch.nonzero(screened).flatten()
        hard = torch.zeros(k, dtype=torch.bool)
        soft = torch.zeros(k, dtype=torch.float64)
        res = None
        if idx.numel():  # the unscreened rows are skipped by index, not copied out
            res = self.filter.scores(updates, None if idx.numel() == k else idx)
            hard[idx] = res.hard if self.params.cgf_filter else True
            soft[idx] = res.soft
        clients = torch.tensor([m.client_id for m in batch.metas], dtype=torch.int64)
        r = self.book.update(clients, hard, soft)
        if self.params.hra_weighting:
            weights = reputation_weights(r, hard)
        else:
            weights = hard.to(torch.float64) / max(int(hard.sum()), 1)
        return ShieldRound(clients, screened, res, hard, soft, r, weights)

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        """One round in two reads of ``[K, D]``: CGF's scores, then Eq. 9's weighted mean
        and the survivors' mean together, with the server step, ‖w(t) − w(t−1)‖ and the
        trusted-history update fused into that second pass (:meth:`_combine`)."""
        sr = self.shield(round_idx, batch)
        self.last = sr
        if bool(sr.hard.any()):
            assert sr.cgf is not None
            params, delta, change = self._combine(sr, sr.cgf, global_params, batch.deltas)
        else:  # every update dropped by the method's defenses: the model stays
            delta = torch.zeros_like(global_params)
            params = self.optimizer.step(global_params, delta)
            change = math.sqrt(squared_norm(params - global_params))
        self.public_norms = [change, *self.public_norms][:PUBLIC_NORMS]
        return StrategyResult(params, delta, sr.weights, sr.hard, self._info(sr))

    def _combine(
        self, sr: ShieldRound, res: CgfResult, global_params: torch.Tensor, updates: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """``(w(t+1), Δ, ‖w(t+1) − w(t)‖)`` from one blocked read of ``updates``.

        Δ and the survivors' mean (written into the filter's previous-mean buffer) column
        block by column block; on each finished chunk, still in cache: w + η_s Δ (the plain
        server step, elementwise, so chunk by chunk is the same rounding as whole), the
        float64 squared change, and the trusted-history blend. No ``[D]`` temporary.
        """
        n = int(sr.hard.sum())
        coeffs = torch.stack([sr.weights, sr.hard.to(torch.float64) / n])
        d = updates.shape[1]
        delta = torch.empty(d, dtype=updates.dtype, device=updates.device)
        mean = self.filter.mean_buffer(delta)
        dtype = torch.promote_types(global_params.dtype, delta.dtype)
        params = torch.empty(d, dtype=dtype, device=updates.device)
        blends = self.filter.blends(res)
        change_sq: dict[int, float] = {}
        scratch = threading.local()  # one float64 chunk per worker thread, reused

        def epilogue(lo: int, hi: int) -> None:
            self.plain.step_into(global_params[lo:hi], delta[lo:hi], params[lo:hi])
            if getattr(scratch, "diff", torch.empty(0)).numel() < hi - lo:
                scratch.diff = torch.empty(max(hi - lo, EPILOGUE_COLUMNS), dtype=torch.float64)
            diff = scratch.diff[: hi - lo]
            torch.sub(params[lo:hi], global_params[lo:hi], out=diff)
            change_sq[lo] = float(torch.dot(diff, diff))
            if blends:
                self.filter.blend(mean, lo, hi)

        linear_combinations(coeffs, updates, [delta, mean], epilogue)
        self.filter.adopt(mean)
        return params, delta, math.sqrt(sum(change_sq[lo] for lo in sorted(change_sq)))

    def _info(self, sr: ShieldRound) -> dict[str, float]:
        survivors = int(sr.hard.sum())
        info = {
            "cgf.survivors": float(survivors),
            "cgf.flagged": float(int(sr.screened.sum()) - survivors),
            "cgf.fallback": float(sr.cgf is not None and sr.cgf.fallback),
            "cgf.mad": sr.cgf.mad if sr.cgf is not None else 0.0,
        }
        if sr.cgf is not None:
            ids, zs = sr.clients[sr.screened].tolist(), sr.cgf.z.tolist()
            info.update({f"cgf.z.{c}": float(z) for c, z in zip(ids, zs, strict=True)})
        info.update({f"hra.reputation.{c}": float(r) for c, r in enumerate(self.book.r.tolist())})
        return info

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "cgf": self.filter.state_dict(),
            "hra": self.book.state_dict(),
            "public_norms": list(self.public_norms),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.filter.load_state_dict(state["cgf"])
        self.book.load_state_dict(state["hra"])
        self.public_norms = [float(n) for n in state.get("public_norms", [])]


#: Weightings Eq. 9 replaces (data_size is the method default, indistinguishable from unset).
_WEIGHTINGS = ("data_size", "uniform")


def check_mean_and_weighting(name: str, rule: str, ctx: CheckContext) -> None:
    """Refuse an aggregator (and a weighting) that the strategy would silently replace."""
    method = ctx.method or {}
    agg = (method.get("aggregator") or {}).get("name", "mean")
    if agg != "mean":
        fail_method_field(
            ctx,
            "aggregator.name",
            f"{name} combines the survivors itself ({rule}); the {agg!r} aggregator would "
            "not be used — use aggregator: {name: mean}",
        )


def _check(params: DualShieldParams, ctx: CheckContext) -> None:
    check_mean_and_weighting("dual_shield", "ω ∝ reputation, 004 Eq. 9", ctx)
    weighting = ((ctx.method or {}).get("weighting") or {}).get("name", "data_size")
    if weighting not in _WEIGHTINGS:
        fail_method_field(
            ctx,
            "weighting.name",
            f"dual_shield weighs the survivors by reputation (004 Eq. 9); the {weighting!r} "
            "weighting would not be used — use weighting: {name: uniform}",
        )
    if params.r_init < params.r_min:
        ctx.fail("r_init", f"r_j(0) = {params.r_init} is below the floor r_min = {params.r_min}")


@ALGORITHMS.register("dual_shield", params=DualShieldParams, check=_check)
def build_dual_shield(params: DualShieldParams, *, ctx: AlgorithmContext) -> Algorithm:
    """DUAL-SHIELD server (004 §2.5–2.6): cosine-MAD filter, momentum reputation weights."""
    strategy = DualShieldStrategy(ctx.tier, ctx.server_lr, params, ctx.num_clients, ctx.rounds)
    return Algorithm(strategy)
