"""The EMA-proximal regulariser (paper 001, Eq. 12–13) by hand on 2–3 element vectors.

λ‖w − w̄_k‖² has gradient 2λ(w − w̄_k) (Eq. 13 has no ½); w̄_k ← βw̄_k + (1 − β)w^t once per
round in which client k receives w^t. β = 0.5 and dyadic vectors keep every expected number
exact in float32; each is worked out in the comment beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
from torch import nn

import geofl.algorithms.emaprox  # noqa: F401  (registers the algorithm)
from geofl.algorithms import ALGORITHMS, AlgorithmContext
from geofl.algorithms.emaprox import EMA, SEEN, EmaProxClient, EmaProxParams
from geofl.client.data import ClientData
from geofl.client.state import ClientState, ClientStateStore, StateSpec
from geofl.client.step import ClientProgram
from geofl.client.trainer import GradCorrection, LocalTrainParams, StatelessTrainer
from geofl.engine.components import RunComponents
from geofl.engine.scheduler import SyncScheduler
from geofl.models.base import FlatModel
from geofl.network.links import NETWORK_MODELS
from geofl.registry import NoParams
from geofl.server.aggregators import build_mean
from geofl.server.sampling import Cohort
from geofl.server.tier import FlatTier
from geofl.server.weighting import data_size_weights
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

K, D = 3, 2
TRAIN = LocalTrainParams(optimizer="sgd", lr=0.1, momentum=0.0, weight_decay=0.0)


def _t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def _state(ema: Sequence[float], seen: float) -> ClientState:
    return ClientState({EMA: _t(*ema), SEEN: torch.tensor(seen)})


def _grad(corr: GradCorrection | None, w: torch.Tensor) -> torch.Tensor:
    assert corr is not None
    grad = torch.zeros_like(w)
    corr.apply(grad, w, None)
    return grad


def _round(
    client: EmaProxClient, state: ClientState, w_global: torch.Tensor, round_idx: int
) -> tuple[GradCorrection | None, dict[str, torch.Tensor]]:
    """correction → (no training) → finish, as :func:`client_step` calls them."""
    directives = ClientDirectives(round_idx, 0)
    corr = client.correction(w_global, state, directives)
    meta = UpdateMeta(client_id=0, num_samples=1, round=round_idx, steps=1)
    update = ClientUpdate(torch.zeros(D), meta)
    out, new = client.finish(update, state, directives, TRAIN, global_params=w_global)
    assert out is update
    return corr, new


def test_state_specs_and_registry() -> None:
    client = EmaProxClient(EmaProxParams())
    assert client.state_specs(5) == {EMA: StateSpec((5,)), SEEN: StateSpec(())}
    tier = FlatTier(data_size_weights, build_mean(NoParams()))
    alg = ALGORITHMS.build(
        "ema_prox", {"lam": 0.5, "beta": 0.25}, ctx=AlgorithmContext(tier, 1.0, K, D, TRAIN)
    )
    assert isinstance(alg.client, EmaProxClient)
    assert alg.client.params == EmaProxParams(lam=0.5, beta=0.25)


@pytest.mark.parametrize("anchor", ["after_update", "before_update"])
def test_correction_is_two_lambda_times_w_minus_ema(anchor: str) -> None:
    # λ = 0.25, β = 0.5, w̄ = [1, −2] (seen once), w^t = [3, 2], w = [2, 0]
    # after_update:  w̄' = 0.5·[1, −2] + 0.5·[3, 2] = [2, 0];  2λ(w − w̄') = 0.5·[0, 0] = [0, 0]
    # before_update: anchor w̄ = [1, −2];                      2λ(w − w̄)  = 0.5·[1, 2] = [0.5, 1]
    client = EmaProxClient(EmaProxParams(lam=0.25, beta=0.5, anchor=anchor))
    corr, new = _round(client, _state([1, -2], 1), _t(3, 2), 2)
    want = [0.0, 0.0] if anchor == "after_update" else [0.5, 1.0]
    assert torch.equal(_grad(corr, _t(2, 0)), _t(*want))
    assert torch.equal(new[EMA], _t(2, 0)) and float(new[SEEN]) == 2.0
    # a different point w = [4, 4]: after_update 0.5·([4, 4] − [2, 0]) = [1, 2]
    corr, _ = _round(client, _state([1, -2], 1), _t(3, 2), 2)
    want = [1.0, 2.0] if anchor == "after_update" else [1.5, 3.0]  # before: 0.5·[3, 6]
    assert torch.equal(_grad(corr, _t(4, 4)), _t(*want))


def test_lambda_zero_is_no_correction_but_keeps_the_ema() -> None:
    client = EmaProxClient(EmaProxParams(lam=0.0, beta=0.5))
    corr, new = _round(client, _state([1, 1], 1), _t(3, 5), 1)
    assert corr is None  # plain local training
    assert torch.equal(new[EMA], _t(2, 3))  # 0.5·[1, 1] + 0.5·[3, 5]


def test_first_model_initialises_the_ema() -> None:
    # init first: the first w̄ is w^1 = [4, −8] whatever β; init zero: 0.5·0 + 0.5·[4, −8]
    w1 = _t(4, -8)
    first = EmaProxClient(EmaProxParams(lam=1.0, beta=0.5))
    corr, new = _round(first, _state([0, 0], 0), w1, 1)
    assert torch.equal(new[EMA], w1) and float(new[SEEN]) == 1.0
    assert torch.equal(_grad(corr, w1), _t(0, 0))  # the anchor is the broadcast model
    zero = EmaProxClient(EmaProxParams(lam=1.0, beta=0.5, init="zero"))
    corr, new = _round(zero, _state([0, 0], 0), w1, 1)
    assert torch.equal(new[EMA], _t(2, -4))
    assert torch.equal(_grad(corr, w1), _t(4, -8))  # 2·1·([4, −8] − [2, −4])
    # before_update + zero: the first anchor is 0, i.e. λ‖w‖²
    zb = EmaProxClient(EmaProxParams(lam=1.0, beta=0.5, init="zero", anchor="before_update"))
    corr, _ = _round(zb, _state([0, 0], 0), w1, 1)
    assert torch.equal(_grad(corr, w1), _t(8, -16))


def test_the_old_state_is_not_written_in_place() -> None:
    client = EmaProxClient(EmaProxParams(beta=0.5))
    state = _state([1, 1], 3)
    _, new = _round(client, state, _t(3, 3), 4)
    assert torch.equal(state.tensors[EMA], _t(1, 1)) and float(state.tensors[SEEN]) == 3.0
    assert torch.equal(new[EMA], _t(2, 2)) and float(new[SEEN]) == 4.0


def test_finish_alone_gives_the_same_new_average_as_after_correction() -> None:
    # The client half keeps nothing between calls: finish folds w^t in by itself.
    client = EmaProxClient(EmaProxParams(beta=0.5))
    meta = UpdateMeta(client_id=0, num_samples=1, round=1, steps=1)
    _, new = client.finish(
        ClientUpdate(torch.zeros(D), meta),
        _state([1, 1], 3),
        ClientDirectives(1, 0),
        TRAIN,
        global_params=_t(3, 3),
    )
    assert torch.equal(new[EMA], _t(2, 2)) and float(new[SEEN]) == 4.0


# ------------------------------------------------------------------ through the scheduler
class _Step(StatelessTrainer):
    """Every client moves the model by [1, 0] (no real training): w^{t+1} = w^t + [1, 0]."""

    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
        correction: GradCorrection | None = None,
    ) -> ClientUpdate:
        meta = UpdateMeta(client_id=data.client_id, num_samples=5, round=directives.round, steps=1)
        return ClientUpdate(_t(1, 0), meta)


def _scheduler(cohorts: dict[int, list[int]], lost: dict[int, list[int]]) -> SyncScheduler:
    """Round → cohort; client → rounds in which its upload is lost."""
    tier = FlatTier(data_size_weights, build_mean(NoParams()))
    ctx = AlgorithmContext(tier, 1.0, K, D, TRAIN)
    alg = ALGORITHMS.build("ema_prox", {"lam": 0.1, "beta": 0.5}, ctx=ctx)
    clients = [
        ClientData(k, torch.zeros(5, 1, 1, 1), torch.zeros(5, dtype=torch.long), np.array([5]))
        for k in range(K)
    ]
    comps = RunComponents(
        task=ClassificationTask(1),
        workspace=FlatModel(nn.Linear(D, 1, bias=False)),
        program=ClientProgram(_Step(), TRAIN, alg.client),
        strategy=alg.strategy,
        store=ClientStateStore(K, alg.client.state_specs(D)),
        sampler=lambda n, r, rng: Cohort(cohorts[r], "test", None),
        network=NETWORK_MODELS.build("scripted_outage", {"outages": lost}),
        clients=clients,
    )
    return SyncScheduler(comps, seed=0)


def test_ema_over_rounds_sees_only_the_models_a_client_received() -> None:
    # w^1 = [0, 8]; every round moves it by [1, 0]: w^2 = [1, 8], w^3 = [2, 8].
    # round 1: clients 0, 1;  round 2: clients 0, 2 (1 skips);  round 3: clients 0, 1, 2,
    # but client 2's upload in round 3 is lost (it keeps its round-2 state).
    # client 0: w̄ = w^1 = [0, 8] → 0.5·[0, 8] + 0.5·[1, 8] = [0.5, 8]
    #           → 0.5·[0.5, 8] + 0.5·[2, 8] = [1.25, 8];  seen 3
    # client 1: w̄ = w^1 = [0, 8] → (skips w^2) 0.5·[0, 8] + 0.5·[2, 8] = [1, 8];  seen 2
    # client 2: w̄ = w^2 = [1, 8] (first model it received); round 3 lost → stays; seen 1
    sched = _scheduler({1: [0, 1], 2: [0, 2], 3: [0, 1, 2]}, {2: [3]})
    w = _t(0, 8)
    for r in (1, 2, 3):
        out = sched.round(w, r)
        sched.c.store.commit()
        w = out.params
    assert [r.client for r in out.record.rejected] == [2]  # lost in transit
    assert torch.equal(w, _t(3, 8))
    want: dict[int, tuple[list[float], int]] = {0: ([1.25, 8], 3), 1: ([1, 8], 2), 2: ([1, 8], 1)}
    for k, (ema, seen) in want.items():
        state = sched.c.store.get(k)
        assert torch.equal(state.tensors[EMA], _t(*ema)), k
        assert float(state.tensors[SEEN]) == seen, k
