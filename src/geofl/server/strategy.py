"""The strategy: the server half of a federated algorithm, with state it checkpoints.

A strategy configures a round (what each trained client receives besides the model: payload
tensors such as SCAFFOLD's server control variate) and turns the round's accepted updates
and the current global model into the new global model. Inside, pure functions compose —
defenses, weighting and a combiner in a :class:`~geofl.server.tier.FlatTier`, then a
:class:`~geofl.server.optimizers.ServerOptimizer`. Algorithms (:mod:`geofl.algorithms`)
subclass :class:`ComposedStrategy` to add their own server state and rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from geofl.server.optimizers import ServerOptimizer
from geofl.server.tier import AggregationResult, FlatTier
from geofl.update import UpdateMeta

__all__ = ["ComposedStrategy", "RoundPlan", "Strategy", "StrategyResult", "UpdateBatch"]


@dataclass(frozen=True)
class RoundPlan:
    """What the strategy sends with the model in one round.

    Attributes:
        payload: Named ``[D]`` tensors broadcast to every trained client.
        extra: Per-client scalar directives (client id → settings).
    """

    payload: Mapping[str, torch.Tensor] = field(default_factory=dict)
    extra: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class UpdateBatch:
    """The accepted updates of one round, stacked.

    Attributes:
        deltas: ``[K, D]`` Δw of the accepted clients (aggregation order).
        metas: K metadata records, aligned with ``deltas``.
        tensors: Extra uploaded tensors stacked per name, each ``[K, D]``.
        num_clients: N, the size of the whole federation.
    """

    deltas: torch.Tensor
    metas: Sequence[UpdateMeta]
    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict)
    num_clients: int = 0


@dataclass(frozen=True)
class StrategyResult:
    """A round's outcome on the server.

    Attributes:
        params: ``[D]`` the new global model.
        aggregate: ``[D]`` the combined update the server step used.
        weights: ``[K]`` float64 effective weight of each accepted update.
        kept: ``[K]`` bool, updates that passed the defenses.
        info: Scalars worth recording (e.g. FedNova's τ_eff).
    """

    params: torch.Tensor
    aggregate: torch.Tensor
    weights: torch.Tensor
    kept: torch.Tensor
    info: dict[str, float] = field(default_factory=dict)


class Strategy(Protocol):
    """The server half of an algorithm.

    Attributes:
        uploads: Names of the extra tensors each client must upload besides Δw.
        scalars: Names of metadata scalars each update must carry (finite, > 0).
    """

    uploads: tuple[str, ...]
    scalars: tuple[str, ...]

    def configure(self, round_idx: int, cohort: Sequence[int]) -> RoundPlan:
        """Directives and payload for the clients trained in ``round_idx``."""
        ...

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        """The new global model from the accepted updates (may raise AggregationError)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint needs to continue identically."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        ...


class ComposedStrategy:
    """Tier (defenses → weighting → combiner) then a server optimiser: FedAvg and kin.

    Args:
        tier: The aggregation tier.
        optimizer: The server step (plain η_s, momentum, Adam/Yogi/Adagrad).
    """

    uploads: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()

    def __init__(self, tier: FlatTier, optimizer: ServerOptimizer) -> None:
        self.tier = tier
        self.optimizer = optimizer

    def configure(self, round_idx: int, cohort: Sequence[int]) -> RoundPlan:
        return RoundPlan()

    def combine(self, round_idx: int, batch: UpdateBatch) -> AggregationResult:
        """The tier's aggregate of ``batch`` (subclasses reweight here)."""
        return self.tier(batch.deltas, batch.metas, round_idx)

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        res = self.combine(round_idx, batch)
        params = self.optimizer.step(global_params, res.delta)
        return StrategyResult(params, res.delta, res.weights, res.kept)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state.get("optimizer", {}))
