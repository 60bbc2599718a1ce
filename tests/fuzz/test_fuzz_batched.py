"""Fuzzing the batched client step (issue 36): for any cohort of unequal clients — data
sizes 1 to 13 (batches padded, step counts unequal), batch size, epochs or fixed steps,
SGD with or without momentum and weight decay, Adam, a FedProx μ, DP-SGD with any σ and
C — the batched step's uploads equal the sequential step's to float32 tolerance, with the
same step counts, ledgers and ε; a chunk size that splits the cohort anywhere changes
nothing.

The runs are derandomized (the same examples in CI every time) and take a few seconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geofl.algorithms.fedavg import FedProxClient
from geofl.client.batched import BatchedClients, BatchJob
from geofl.client.data import ClientData
from geofl.client.dpsgd import DpSgd, DpSgdParams
from geofl.client.state import ClientState
from geofl.client.step import ClientPrivacy, ClientProgram, ClientStreams, PlainClient, client_step
from geofl.client.trainer import LocalSGD, LocalTrainParams
from geofl.models.base import FlatModel
from geofl.privacy.budget import ledger_epsilon
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives

FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
C, F = 3, 4


def _workspace() -> FlatModel:
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(F, 5), torch.nn.Tanh(), torch.nn.Linear(5, C))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return FlatModel(model)


def _epsilon(events: Any) -> float:
    return ledger_epsilon(events, accountant="rdp", params={}, delta=1e-5)


def _jobs(sizes: list[int], dim: int) -> list[BatchJob]:
    jobs = []
    for k, n in enumerate(sizes):
        g = torch.Generator().manual_seed(100 + k)
        x, y = torch.randn(n, F, generator=g), torch.randint(0, C, (n,), generator=g)
        data = ClientData(k, x, y, np.bincount(y.numpy(), minlength=C))
        params = 0.3 * torch.randn(dim, generator=g)
        d = ClientDirectives(2, k, {}, {})
        streams = ClientStreams((5, "round", 2, "client", k))
        jobs.append(BatchJob(params, data, ClientState({}, ()), d, streams))
    return jobs


TRAIN = st.builds(
    LocalTrainParams,
    optimizer=st.sampled_from(["sgd", "adam"]),
    lr=st.sampled_from([0.01, 0.1]),
    momentum=st.sampled_from([0.0, 0.9]),
    weight_decay=st.sampled_from([0.0, 1e-2]),
    batch_size=st.integers(1, 6),
    local_epochs=st.integers(1, 2),
    local_steps=st.one_of(st.none(), st.integers(1, 4)),
)
DP = st.one_of(
    st.none(),
    st.builds(
        DpSgdParams,
        noise_multiplier=st.sampled_from([0.5, 2.0]),
        clip=st.sampled_from([0.1, 1.0, 10.0]),
        micro_batch=st.integers(1, 4),
    ),
)


@FUZZ
@given(
    sizes=st.lists(st.integers(1, 13), min_size=1, max_size=6),
    train=TRAIN,
    dp=DP,
    mu=st.sampled_from([0.0, 0.3]),
    max_bytes=st.sampled_from([1, 2**30]),
)
def test_batched_step_equals_sequential(
    sizes: list[int], train: LocalTrainParams, dp: DpSgdParams | None, mu: float, max_bytes: int
) -> None:
    ws, task = _workspace(), ClassificationTask(C)
    trainer = LocalSGD(ws, train, task) if dp is None else DpSgd(ws, train, task, dp)
    program = ClientProgram(
        trainer=trainer,
        train=train,
        algorithm=FedProxClient(mu) if mu else PlainClient(),
        privacy=ClientPrivacy(_epsilon),
    )
    jobs = _jobs(sizes, ws.spec.numel)
    seq = [client_step(program, j.params, j.data, j.state, j.directives, j.streams) for j in jobs]
    bat = BatchedClients(program, ws, task, max_bytes=max_bytes).run(jobs)
    for a, b in zip(seq, bat, strict=True):
        assert not isinstance(b, Exception)
        torch.testing.assert_close(b.update.delta, a.update.delta, atol=5e-5, rtol=1e-4)
        assert b.update.meta.steps == a.update.meta.steps
        assert b.state.dp_events == a.state.dp_events
        assert b.epsilon == a.epsilon
