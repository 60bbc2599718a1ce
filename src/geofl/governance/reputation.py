"""Node reputation: contribution, participation and behavioural consistency (000 Eq. 18–22).

The paper defines the three sub-indicators and their weighted sum but leaves the inputs'
scales, the participation formula and the variance of a set of behaviour vectors open.
geofl makes them explicit; every constant below is a field of :class:`ReputationParams`.

Inputs, per node ``i`` and round ``t`` (one :class:`NodeObservation`):

* ``ΔAcc_i^(t)`` — the update's marginal effect on global validation accuracy, as a
  fraction (0.01 = one accuracy point). The intended definition is leave-one-out::

      ΔAcc_i^(t) = acc_val(aggregate of round t) − acc_val(aggregate of round t without i)

  (positive = the update helped); any cheaper proxy on the same scale works. The engine's
  governance process passes the weight-attributed change α_i·|P|·ΔAcc_val, computable
  from the round log (:mod:`geofl.governance.process`).
* ``S_i^(t)`` — the spatial consistency score of 000 Eq. 15, in (0, 1].
* participation — ``True`` if the node's update was accepted, ``False`` if it was expected
  but failed, was missing or was rejected; ``None`` (or the node absent from the round's
  observations) if the node was not expected this round.
* the update's L2 norm ``‖Δw̃_i^(t)‖`` and its perturbation intensity ``σ_i^(t)``.

Sub-indicators (all in [0, 1]):

* **Contribution** (Eq. 18–19): ``Rep_contrib,i = mean_t Quality_i^(t)`` over the rounds of
  the last ``T`` in which node ``i`` delivered an update, with
  ``Quality = λ1·g(ΔAcc) + λ2·S`` and ``g`` mapping ΔAcc into [0, 1] (``delta_acc_map``):
  ``linear``: ``clip(½ + ΔAcc/(2s), 0, 1)`` (±s ↦ 1/0, no effect ↦ ½); ``tanh``:
  ``½(1 + tanh(ΔAcc/s))``; ``clip``: ``clip(ΔAcc, 0, 1)`` for proxies already in [0, 1].
  If only one of ΔAcc and S is given, Quality is that term alone. Failed rounds are skipped
  (or count as ``missing_quality``); a window without any quality gives
  ``contribution_default``.
* **Participation** (§3.5.2 item 2, §4.7 "smoothed ratio"): an asymmetric exponential
  moving average of the participation indicator ``x ∈ {0, 1}`` over the rounds the node
  was expected in, times a penalty for the current run of consecutive misses ``m``::

      r ← r + ρ_up·(1 − r)     if x = 1        (recovery)
      r ← (1 − ρ_down)·r       if x = 0        (exponential decay)
      Rep_part = r · exp(−κ·m)

  With ``ρ_up = ρ_down = ρ`` and ``κ = 0`` this is the exponentially weighted ratio of
  actual to expected participations. ``r`` starts at ``participation_init`` and rounds in
  which the node was not expected change neither ``r`` nor ``m``. ``r`` has memory beyond
  the window ``T``, which is what makes a node's reputation recover only slowly after an
  outage (000 Fig. 13); set ``participation_recovery = 1`` for an immediate recovery.
* **Consistency** (Eq. 20–21): the behaviour vector of round ``r`` is
  ``b_i^(r) = (‖Δw̃‖, σ, x)``; in a failed round the node released nothing, so
  ``‖Δw̃‖ = σ = 0``; rounds the node was not expected in are left out. Each feature is divided
  by its largest absolute value over all nodes × window rounds (so features lie in [0, 1]
  and are comparable), and ``Var(Behavior_i)`` is the ``behavior_weights``-weighted mean of
  the per-feature population variances over the window. Then::

      Rep_consist,i = (1 − Var_i / max(max_j Var_j, v_floor)) · (1 − π·miss_i)

  where ``miss_i`` is the fraction of the node's expected rounds in the window that failed
  (the §4.7 prototype's inactivity penalty: a node that fails every round has zero
  variance but must not look stable). If all variances are 0 (and ``v_floor = 0``) the
  first factor is 1 for every node. ``v_floor > 0`` keeps Eq. 21 from giving the least
  stable node 0 when every node is in fact stable; ``v_floor = 0`` is Eq. 21 as printed.
* **Total** (Eq. 22): ``Rep_i = w1·contrib + w2·part + w3·consist`` with ``w > 0``, Σw = 1.

Use :class:`ReputationTracker` round by round, or the pure per-equation functions on
``[N, T]`` arrays (nodes × window; NaN marks "no value").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from geofl.errors import GovernanceError
from geofl.governance.reputation_terms import (
    BEHAVIOR_FEATURES,
    FloatArray,
    behavior_matrix,
    behavior_variance,
    consistency_reputation,
    contribution_reputation,
    normalize_behavior,
    normalize_delta_acc,
    participation_reputation,
    participation_step,
    total_reputation,
    update_quality,
)
from geofl.governance.reputation_types import (
    NodeObservation,
    ReputationComponents,
    ReputationParams,
)

__all__ = [
    "BEHAVIOR_FEATURES",
    "NodeObservation",
    "ReputationComponents",
    "ReputationParams",
    "ReputationTracker",
    "behavior_matrix",
    "behavior_variance",
    "consistency_reputation",
    "contribution_reputation",
    "normalize_behavior",
    "normalize_delta_acc",
    "participation_reputation",
    "participation_step",
    "total_reputation",
    "update_quality",
]


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


class ReputationTracker:
    """Round-by-round reputation of every node seen so far (000 Eq. 18–22).

    Keeps the last ``T`` rounds of observations and each node's participation state.
    A node enters at its first observation and is then scored every round; in rounds it
    is absent from it counts as not expected.

    Example:
        >>> tr = ReputationTracker(ReputationParams())
        >>> out = tr.update(1, {7: NodeObservation(True, 0.0, 1.0, 1.0, 0.1)})
        >>> round(out[7].participation, 3)
        1.0
    """

    def __init__(self, params: ReputationParams | None = None) -> None:
        self.params = params or ReputationParams()
        self._window: deque[tuple[int, dict[int, NodeObservation]]] = deque(
            maxlen=self.params.window
        )
        self._nodes: list[int] = []
        self._ratio: dict[int, float] = {}
        self._streak: dict[int, int] = {}
        self._history: list[ReputationComponents] = []
        self._last_round: int | None = None

    @property
    def nodes(self) -> tuple[int, ...]:
        """Nodes seen so far, sorted."""
        return tuple(self._nodes)

    @property
    def history(self) -> tuple[ReputationComponents, ...]:
        """Every component record so far, in round then node order."""
        return tuple(self._history)

    def series(self, node: int) -> dict[str, FloatArray]:
        """Per-round arrays of one node (keys: round_id and the four components)."""
        rows = [c for c in self._history if c.node == node]
        keys = ("round_id", "contribution", "participation", "consistency", "reputation")
        return {k: np.array([float(getattr(c, k)) for c in rows]) for k in keys}

    def update(
        self, round_id: int, observations: Mapping[int, NodeObservation]
    ) -> dict[int, ReputationComponents]:
        """Add one round's observations and return every known node's components.

        Args:
            round_id: Strictly increasing round number.
            observations: node id → observation; nodes left out were not expected.

        Returns:
            node id → :class:`ReputationComponents` after this round.

        Raises:
            GovernanceError: on a non-increasing round id or an out-of-range observation.
        """
        p = self.params
        self._admit_round(round_id, observations)
        nodes = self._nodes
        if not nodes:  # nothing observed yet (e.g. every client of round 1 dropped)
            return {}
        r, m, part = self._step_participation(observations)
        x = np.array([[self._participation(obs.get(n)) for _, obs in self._window] for n in nodes])
        contrib = self._window_contribution(x)
        var, consist = self._window_consistency(x)
        rep = total_reputation(
            contribution=contrib,
            participation=part,
            consistency=consist,
            weights=(p.w_contribution, p.w_participation, p.w_consistency),
        )
        out = {
            n: ReputationComponents(
                node=n,
                round_id=round_id,
                contribution=float(contrib[k]),
                participation=float(part[k]),
                consistency=float(consist[k]),
                reputation=float(rep[k]),
                participation_ratio=float(r[k]),
                miss_streak=int(m[k]),
                behavior_variance=float(var[k]),
            )
            for k, n in enumerate(nodes)
        }
        self._history.extend(out.values())
        return out

    def _admit_round(self, round_id: int, observations: Mapping[int, NodeObservation]) -> None:
        """Check the round and its observations, register new nodes, push the window.

        Nothing changes if a check fails.

        Raises:
            GovernanceError: on a non-increasing round id or an out-of-range observation.
        """
        if self._last_round is not None and round_id <= self._last_round:
            raise GovernanceError(
                f"round_id {round_id} must exceed the previous round {self._last_round}"
            )
        for node, obs in observations.items():
            obs.check(node)
        self._last_round = round_id
        for node in observations:
            if node not in self._ratio:
                self._ratio[node] = self.params.participation_init
                self._streak[node] = 0
        self._nodes = sorted(self._ratio)
        self._window.append((round_id, dict(observations)))

    def _step_participation(
        self, observations: Mapping[int, NodeObservation]
    ) -> tuple[FloatArray, npt.NDArray[np.int64], FloatArray]:
        """One participation EMA step for every known node; stores the new state.

        Args:
            observations: This round's node id → observation.

        Returns:
            ``(r, m, Rep_part)``, each ``[N]`` in :attr:`nodes` order: the smoothed ratio,
            the consecutive-miss streak and ``r·exp(−κ·m)``.
        """
        p = self.params
        nodes = self._nodes
        x_now = np.array([self._participation(observations.get(n)) for n in nodes])
        r, m, part = participation_step(
            ratio=np.array([self._ratio[n] for n in nodes]),
            streak=np.array([self._streak[n] for n in nodes], dtype=np.int64),
            participated=x_now,
            recovery=p.participation_recovery,
            decay=p.participation_decay,
            streak_penalty=p.miss_streak_penalty,
        )
        for k, n in enumerate(nodes):
            self._ratio[n] = float(r[k])
            self._streak[n] = int(m[k])
        return r, m, part

    def _grid(self, field: str) -> FloatArray:
        """``[N, T]`` values of one :class:`NodeObservation` field over the window (NaN =
        not observed)."""
        return np.array(
            [
                [_nan(getattr(obs.get(n), field, None)) for _, obs in self._window]
                for n in self._nodes
            ]
        )

    def _window_contribution(self, x: FloatArray) -> FloatArray:
        """Rep_contrib of every node (000 Eq. 18–19) over the window.

        Args:
            x: ``[N, T]`` participation indicators (1 delivered, 0 failed, NaN not expected).

        Returns:
            ``[N]`` mean update quality of the rounds with a quality, or the default.
        """
        p = self.params
        delivered = x == 1.0
        quality = update_quality(
            delta_acc=np.where(delivered, self._grid("delta_acc"), np.nan),
            consistency=np.where(delivered, self._grid("consistency"), np.nan),
            lambda_acc=p.lambda_acc,
            lambda_consistency=p.lambda_consistency,
            mapping=p.delta_acc_map,
            scale=p.delta_acc_scale,
        )
        if p.missing_quality is not None:
            quality = np.where(x == 0.0, p.missing_quality, quality)
        return contribution_reputation(quality=quality, default=p.contribution_default)

    def _window_consistency(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Var(Behavior_i) and Rep_consist of every node (000 Eq. 20–21) over the window.

        Args:
            x: ``[N, T]`` participation indicators (1 delivered, 0 failed, NaN not expected).

        Returns:
            ``(variance, Rep_consist)``, each ``[N]``; Rep_consist carries the
            inactivity penalty for the failed fraction of the expected rounds.
        """
        p = self.params
        behavior = normalize_behavior(
            behavior=behavior_matrix(
                update_norm=self._grid("update_norm"),
                noise_sigma=self._grid("noise_sigma"),
                participated=x,
            )
        )
        var = behavior_variance(behavior=behavior, weights=p.behavior_weights)
        expected = (~np.isnan(x)).sum(axis=1)
        misses = (x == 0.0).sum(axis=1)
        miss_frac = np.where(expected > 0, misses / np.maximum(expected, 1), 0.0)
        consist = consistency_reputation(
            variance=var,
            miss_fraction=miss_frac,
            variance_floor=p.variance_floor,
            inactivity_penalty=p.inactivity_penalty,
        )
        return var, consist

    @staticmethod
    def _participation(obs: NodeObservation | None) -> float:
        if obs is None or obs.participated is None:
            return math.nan
        return 1.0 if obs.participated else 0.0
