"""The scheduler's round statuses, exclusions and byte counts, on a trivial client program.

Each client k uploads Δ_k = (k + 1)·[1, 0, 0] so the numbers are easy to follow; the
algorithms, store, network models and scheduler are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

import geofl.algorithms.fedavg
import geofl.algorithms.fednova
import geofl.algorithms.scaffold  # noqa: F401  (registers the algorithms)
from geofl.algorithms import ALGORITHMS, AlgorithmContext
from geofl.algorithms.fednova import A_NORM, FedNovaClient
from geofl.client.data import ClientData
from geofl.client.state import ClientState, ClientStateStore
from geofl.client.step import ClientAlgorithm, ClientProgram
from geofl.client.trainer import GradCorrection, LocalTrainParams, StatelessTrainer
from geofl.engine.components import RunComponents
from geofl.engine.scheduler import SyncScheduler
from geofl.errors import AggregationError
from geofl.hashing import params_sha256
from geofl.models.base import FlatModel
from geofl.network.links import NETWORK_MODELS
from geofl.records import RejectionReason, RoundStatus
from geofl.registry import NoParams
from geofl.server.aggregators import Aggregate, Aggregator, build_mean
from geofl.server.sampling import Cohort
from geofl.server.tier import FlatTier
from geofl.server.weighting import data_size_weights
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

K, D = 4, 3
TRAIN = LocalTrainParams(lr=0.1, momentum=0.0, weight_decay=0.0)


class _FixedDelta(StatelessTrainer):
    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
        correction: GradCorrection | None = None,
    ) -> ClientUpdate:
        k = data.client_id
        delta = torch.tensor([k + 1.0, 0.0, 0.0])
        return ClientUpdate(
            delta, UpdateMeta(client_id=k, num_samples=5, round=directives.round, steps=2)
        )


def _scheduler(
    cohort: Sequence[int],
    *,
    algorithm: str = "fedavg",
    network: tuple[str, dict[str, object]] = ("ideal", {}),
    allowed: Callable[[int, int], bool] = lambda k, r: True,
    aggregator: Aggregator | None = None,
    client: ClientAlgorithm | None = None,
) -> SyncScheduler:
    tier = FlatTier(data_size_weights, aggregator or build_mean(NoParams()))
    alg = ALGORITHMS.build(algorithm, {}, ctx=AlgorithmContext(tier, 1.0, K, D, TRAIN))
    clients = [
        ClientData(k, torch.zeros(5, 1, 1, 1), torch.zeros(5, dtype=torch.long), np.array([5]))
        for k in range(K)
    ]
    comps = RunComponents(
        task=ClassificationTask(1),
        workspace=FlatModel(nn.Linear(D, 1, bias=False)),
        program=ClientProgram(_FixedDelta(), TRAIN, client or alg.client),
        strategy=alg.strategy,
        store=ClientStateStore(K, alg.client.state_specs(D)),
        sampler=lambda n, r, rng: Cohort(list(cohort), "test", None),
        network=NETWORK_MODELS.build(*network),
        clients=clients,
    )
    return SyncScheduler(comps, seed=0, allowed=allowed)


W0 = torch.tensor([1.0, 2.0, 3.0])


def test_aggregated_round() -> None:
    out = _scheduler([1, 3]).round(W0, 1)
    rec = out.record
    # Δ = mean([2, 0, 0], [4, 0, 0]) = [3, 0, 0]
    assert rec.status is RoundStatus.AGGREGATED
    assert torch.equal(out.params, torch.tensor([4.0, 2.0, 3.0]))
    assert rec.participants == [1, 3] and rec.weights == [0.5, 0.5] and rec.cohort == [1, 3]
    assert rec.model_sha256 == params_sha256(out.params)
    assert rec.sampling == {"scheme": "test", "rate": None}


def test_empty_cohort_keeps_the_model() -> None:
    out = _scheduler([]).round(W0, 1)
    assert out.record.status is RoundStatus.EMPTY_COHORT
    assert torch.equal(out.params, W0) and out.record.model_sha256 == params_sha256(W0)
    assert out.record.participants == [] and out.record.weights == []


def test_all_uploads_lost_is_no_updates() -> None:
    outage = ("scripted_outage", {"outages": {1: [1], 2: [1]}})
    out = _scheduler([1, 2], network=outage).round(W0, 1)
    rec = out.record
    assert rec.status is RoundStatus.NO_UPDATES
    assert [(r.client, r.reason) for r in rec.rejected] == [
        (1, RejectionReason.LOST_IN_TRANSIT),
        (2, RejectionReason.LOST_IN_TRANSIT),
    ]
    assert torch.equal(out.params, W0) and rec.bytes_up == 0


def test_aggregation_failure_keeps_the_model() -> None:
    def refuse(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        raise AggregationError("too few updates for this aggregator")

    out = _scheduler([0, 1], aggregator=refuse).round(W0, 1)
    assert out.record.status is RoundStatus.AGGREGATION_FAILED
    assert out.record.aggregation_error == "too few updates for this aggregator"
    assert torch.equal(out.params, W0) and out.record.weights == []
    assert out.record.participants == [0, 1]  # the updates arrived; the aggregator refused


def test_gate_excludes_some_clients() -> None:
    out = _scheduler([0, 1, 2], allowed=lambda k, r: k != 1).round(W0, 1)
    rec = out.record
    assert rec.cohort == [0, 1, 2] and rec.excluded == [1] and rec.participants == [0, 2]
    assert rec.status is RoundStatus.AGGREGATED
    assert rec.bytes_down == 2 * D * 4  # only the trained clients receive the model


def test_gate_excluding_the_whole_cohort_is_not_an_empty_cohort() -> None:
    out = _scheduler([0, 2], allowed=lambda k, r: False).round(W0, 1)
    rec = out.record
    assert rec.cohort == [0, 2] and rec.excluded == [0, 2] and rec.participants == []
    assert torch.equal(out.params, W0)
    # the sampler did draw clients: RoundStatus.EMPTY_COHORT means "the sampler drew no client"
    assert rec.status is RoundStatus.NO_UPDATES


@pytest.mark.parametrize(("algorithm", "factor"), [("fedavg", 1), ("scaffold", 2)])
def test_bytes_count_extra_tensors_both_ways(algorithm: str, factor: int) -> None:
    # SCAFFOLD uploads Δy and Δc_k and receives x and c: twice FedAvg's bytes each way.
    rec = _scheduler([0, 1, 3], algorithm=algorithm).round(W0, 1).record
    assert rec.status is RoundStatus.AGGREGATED
    assert rec.bytes_up == 3 * factor * D * 4
    assert rec.bytes_down == 3 * factor * D * 4


class _BadANorm(FedNovaClient):
    """Client 1 reports a non-finite ‖a‖₁ (a bug or a malicious client)."""

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        update, new = super().finish(update, state, directives, train, global_params=global_params)
        if directives.client_id == 1:
            meta = replace(update.meta, scalars={**update.meta.scalars, A_NORM: float("nan")})
            update = replace(update, meta=meta)
        return update, new


def test_fednova_honest_a_norms_aggregate() -> None:
    out = _scheduler([0, 1, 2], algorithm="fednova").round(W0, 1)
    # τ = 2 for everyone → FedNova = FedAvg: Δ = mean([1, 2, 3]) = 2 on the first entry
    assert out.record.status is RoundStatus.AGGREGATED
    assert torch.allclose(out.params, torch.tensor([3.0, 2.0, 3.0]))
    assert out.record.strategy == pytest.approx({"tau_eff": 2.0})


def test_a_non_finite_a_norm_is_rejected_not_fatal() -> None:
    # a NaN ‖a‖₁ would poison FedNova's weights; validation refuses it like any bad upload
    out = _scheduler([0, 1, 2], algorithm="fednova", client=_BadANorm()).round(W0, 1)
    rec = out.record
    assert [(r.client, r.reason) for r in rec.rejected] == [(1, RejectionReason.MALFORMED)]
    assert rec.participants == [0, 2] and rec.status is RoundStatus.AGGREGATED
    assert bool(torch.isfinite(out.params).all())
