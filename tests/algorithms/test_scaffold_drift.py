"""Client drift: on heterogeneous quadratics FedAvg stalls away from the optimum, SCAFFOLD
(and FedDyn) reach it (Karimireddy et al. 2020, §3–5; Acar et al. 2021).

Client k minimises f_k(w) = ½ (w − o_k)ᵀ H_k (w − o_k) with H_k = R(θ_k) diag(1, 0.05) R(θ_k)ᵀ,
its own stiff direction and optimum; the global objective is f = (1/K) Σ f_k, with optimum
w* = (Σ H_k)⁻¹ Σ H_k o_k. With τ = 50 full-gradient local steps every client nearly reaches
its own optimum, so FedAvg converges to a point well away from w*.

Everything but the loss is the real engine: the SyncScheduler drives the real samplers,
ClientProgram/client_step (with the algorithm's GradCorrection and finish), the client-state
store and the strategies; only the local trainer is a least-squares one (the library's
LocalSGD is cross-entropy only).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import geofl.algorithms.fedavg
import geofl.algorithms.feddyn
import geofl.algorithms.scaffold  # noqa: F401  (registers the algorithms)
from geofl.algorithms import ALGORITHMS, AlgorithmContext
from geofl.client.data import ClientData
from geofl.client.state import ClientStateStore
from geofl.client.step import ClientProgram
from geofl.client.trainer import GradCorrection, LocalTrainParams, StatelessTrainer
from geofl.engine.components import RunComponents
from geofl.engine.scheduler import SyncScheduler
from geofl.models.base import FlatModel
from geofl.network.links import NETWORK_MODELS
from geofl.registry import NoParams
from geofl.server.aggregators import build_mean
from geofl.server.sampling import SAMPLERS
from geofl.server.tier import FlatTier
from geofl.server.weighting import data_size_weights
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

K, D, TAU, LR = 4, 2, 50, 0.1


def _rot(a: float) -> torch.Tensor:
    return torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


ANGLES = [k * math.pi / K for k in range(K)]
HESS = [_rot(a) @ torch.diag(torch.tensor([1.0, 0.05])) @ _rot(a).T for a in ANGLES]
OPTIMA = [2.0 * torch.tensor([math.cos(a + 1.0), math.sin(a + 1.0)]) for a in ANGLES]
W_STAR = torch.linalg.solve(sum(HESS), sum(h @ o for h, o in zip(HESS, OPTIMA, strict=True)))


def global_loss(w: torch.Tensor) -> float:
    """f(w) = (1/K) Σ ½ (w − o_k)ᵀ H_k (w − o_k), in float64."""
    w = w.double()
    return (
        sum(
            0.5 * float((w - o.double()) @ h.double() @ (w - o.double()))
            for h, o in zip(HESS, OPTIMA, strict=True)
        )
        / K
    )


class QuadraticTrainer(StatelessTrainer):
    """τ full-gradient steps on f_k, with the algorithm's gradient correction."""

    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
        correction: GradCorrection | None = None,
    ) -> ClientUpdate:
        k = data.client_id
        w = global_params.clone()
        for _ in range(TAU):
            grad = HESS[k] @ (w - OPTIMA[k])
            if correction is not None:
                correction.apply(grad, w, None)
            w = w - LR * grad
        meta = UpdateMeta(client_id=k, num_samples=len(data), round=directives.round, steps=TAU)
        return ClientUpdate(w - global_params, meta)


def train(
    algorithm: str, params: dict[str, object], participation: float, rounds: int
) -> torch.Tensor:
    """Run ``rounds`` rounds of ``algorithm`` through the real scheduler; the final model."""
    workspace = FlatModel(nn.Linear(D, 1, bias=False))  # any model with D parameters
    assert workspace.spec.numel == D
    local = LocalTrainParams(lr=LR, momentum=0.0, weight_decay=0.0)
    tier = FlatTier(data_size_weights, build_mean(NoParams()))
    alg = ALGORITHMS.build(algorithm, params, ctx=AlgorithmContext(tier, 1.0, K, D, local))
    clients = [
        ClientData(k, torch.zeros(10, 1, 1, 1), torch.zeros(10, dtype=torch.long), np.array([10]))
        for k in range(K)
    ]
    comps = RunComponents(
        task=ClassificationTask(1),
        workspace=workspace,
        program=ClientProgram(QuadraticTrainer(), local, alg.client),
        strategy=alg.strategy,
        store=ClientStateStore(K, alg.client.state_specs(D)),
        sampler=SAMPLERS.build("fixed", {}, participation=participation),
        network=NETWORK_MODELS.build("ideal", {}),
        clients=clients,
    )
    scheduler = SyncScheduler(comps, seed=0)
    w = torch.zeros(D)
    for r in range(1, rounds + 1):
        out = scheduler.round(w, r)
        comps.store.commit()
        assert out.record.status == "aggregated"
        w = out.params
    return w


def _report(name: str, w: torch.Tensor) -> tuple[float, float, str]:
    gap = global_loss(w) - global_loss(W_STAR)
    dist = float(torch.linalg.vector_norm(w.double() - W_STAR.double()))
    return gap, dist, f"{name}: f(w) − f(w*) = {gap:.3g}, ‖w − w*‖ = {dist:.3g}"


def test_each_client_optimum_is_far_from_the_global_one() -> None:
    # Sanity of the construction: every client alone reaches its own optimum, far from w*.
    for o in OPTIMA:
        assert float(torch.linalg.vector_norm(o - W_STAR)) > 0.5


@pytest.mark.parametrize(("participation", "rounds"), [(1.0, 40), (0.5, 40)])
def test_scaffold_beats_fedavg_under_client_drift(participation: float, rounds: int) -> None:
    gap_avg, dist_avg, avg = _report("FedAvg", train("fedavg", {}, participation, rounds))
    gap_sc, dist_sc, sc = _report("SCAFFOLD", train("scaffold", {}, participation, rounds))
    msg = f"q={participation}: {avg}; {sc}"
    assert gap_avg > 1e-2, msg  # FedAvg stalls at its drifted fixed point
    assert gap_sc < 1e-3 * gap_avg, msg  # SCAFFOLD's loss is orders of magnitude lower
    assert dist_sc < 0.05 * dist_avg, msg
    if participation == 1.0:
        assert dist_sc < 1e-4, msg  # full participation: the exact optimum


def test_feddyn_also_removes_the_drift() -> None:
    gap_avg, _, avg = _report("FedAvg", train("fedavg", {}, 1.0, 40))
    gap_dyn, dist_dyn, dyn = _report("FedDyn", train("feddyn", {"alpha": 0.1}, 1.0, 40))
    assert gap_dyn < 1e-3 * gap_avg and dist_dyn < 1e-3, f"{avg}; {dyn}"
