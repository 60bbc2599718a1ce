"""The batched client step (issue 36) gives the sequential step's results.

Each test runs the same cohort twice, once through :func:`client_step` client by client and
once through :class:`BatchedClients`, and compares the uploads, the new client states, the
privacy ledgers and ε. Tolerance: float32, ``atol 2e-5`` on Δw after a few local steps —
the draws (batches, Poisson samples, noise) are the same bits, but the stacked kernels
(batched matmuls, vmapped per-sample gradients) sum in another order than one client's
kernels, so the last bits of each gradient differ and SGD carries them along.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
import pytest
import torch

from geofl.algorithms.fedavg import FedProxClient
from geofl.algorithms.scaffold import ScaffoldClient
from geofl.client.batched import BatchedClients, BatchJob, batch_refusal
from geofl.client.data import ClientData
from geofl.client.dpsgd import CLIP_STATE, AdaptiveClipParams, DpSgd, DpSgdParams
from geofl.client.state import ClientState
from geofl.client.step import (
    ClientPrivacy,
    ClientProgram,
    ClientResult,
    ClientStreams,
    client_step,
)
from geofl.client.trainer import LocalSGD, LocalTrainParams
from geofl.errors import BudgetExhaustedError
from geofl.models import MODELS, FlatModel
from geofl.plugins import load_all
from geofl.privacy.budget import ledger_epsilon
from geofl.rng import random_source, torch_generator
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives

load_all()

C, F = 3, 5
ATOL = 2e-5
SIZES = (7, 12, 3, 20, 9)  # unequal data: unequal batches and step counts


def _workspace(model: str = "mlp", **params: Any) -> FlatModel:
    if model == "mlp":
        params = {"hidden": [6], **params}
        module = MODELS.build(
            "mlp", params, in_channels=F, num_classes=C, generator=torch_generator(0, "init")
        )
    else:
        params = {"width": 4, "blocks": 1, **params}
        module = MODELS.build(
            "small_cnn", params, in_channels=2, num_classes=C, generator=torch_generator(0, "init")
        )
    return FlatModel(module)


def _clients(image: bool = False) -> list[ClientData]:
    out = []
    for k, n in enumerate(SIZES):
        g = torch_generator(1, "data", k)
        x = torch.randn(n, 2, 6, 6, generator=g) if image else torch.randn(n, F, generator=g)
        y = torch.randint(0, C, (n,), generator=g)
        out.append(ClientData(k, x, y, np.bincount(y.numpy(), minlength=C)))
    return out


def _epsilon(events: Any) -> float:
    return ledger_epsilon(events, accountant="rdp", params={}, delta=1e-5)


def _program(ws: FlatModel, train: LocalTrainParams, **kw: Any) -> ClientProgram:
    task = ClassificationTask(C)
    dp: DpSgdParams | None = kw.pop("dp", None)
    trainer = LocalSGD(ws, train, task) if dp is None else DpSgd(ws, train, task, dp)
    privacy = ClientPrivacy(_epsilon, kw.pop("target_epsilon", None))
    return ClientProgram(trainer=trainer, train=train, privacy=privacy, **kw)


def _jobs(ws: FlatModel, clients: list[ClientData], states: list[ClientState]) -> list[BatchJob]:
    g = torch_generator(3, "start")
    start = ws.snapshot()
    jobs = []
    for c, st in zip(clients, states, strict=True):
        params = start + 0.01 * torch.randn(start.shape, generator=g)  # held versions differ
        d = ClientDirectives(4, c.client_id, {}, {})
        jobs.append(
            BatchJob(params, c, st, d, ClientStreams((11, "round", 4, "client", c.client_id)))
        )
    return jobs


def _sequential(program: ClientProgram, jobs: list[BatchJob]) -> list[Any]:
    out: list[Any] = []
    for j in jobs:
        try:
            out.append(client_step(program, j.params, j.data, j.state, j.directives, j.streams))
        except BudgetExhaustedError as err:
            out.append(err)
    return out


def _compare(seq: list[Any], bat: list[Any]) -> None:
    assert len(seq) == len(bat)
    for a, b in zip(seq, bat, strict=True):
        assert type(a) is type(b)
        if not isinstance(a, ClientResult):
            assert str(a) == str(b)
            continue
        torch.testing.assert_close(b.update.delta, a.update.delta, atol=ATOL, rtol=0)
        ma, mb = a.update.meta, b.update.meta
        assert (ma.client_id, ma.num_samples, ma.steps, ma.bytes_sent) == (
            mb.client_id,
            mb.num_samples,
            mb.steps,
            mb.bytes_sent,
        )
        assert mb.train_loss == pytest.approx(ma.train_loss, rel=1e-5, abs=1e-6, nan_ok=True)
        assert mb.train_metrics == pytest.approx(ma.train_metrics)
        assert a.state.dp_events == b.state.dp_events  # the same ledger
        assert a.epsilon == b.epsilon  # the same ε, to the bit
        assert set(a.state.tensors) == set(b.state.tensors)
        for name, t in a.state.tensors.items():
            torch.testing.assert_close(b.state.tensors[name], t, atol=ATOL, rtol=1e-5)


def _both(program: ClientProgram, ws: FlatModel, clients: list[ClientData], **kw: Any) -> Any:
    states = kw.get("states") or [ClientState({}, ()) for _ in clients]
    jobs = _jobs(ws, clients, states)
    assert batch_refusal(program, ws, program.trainer.task, clients) is None  # type: ignore[attr-defined]
    batched = BatchedClients(program, ws, program.trainer.task, **kw.get("opts", {}))  # type: ignore[attr-defined]
    return _sequential(program, jobs), batched.run(jobs)


SGD = LocalTrainParams(lr=0.1, momentum=0.9, weight_decay=1e-3, batch_size=4, local_epochs=2)


@pytest.mark.parametrize(
    "train",
    [
        SGD,
        replace(SGD, optimizer="adam", lr=0.01),
        replace(SGD, momentum=0.0, weight_decay=0.0, local_steps=5),
    ],
    ids=["sgd", "adam", "steps"],
)
def test_fedavg_batched_equals_sequential(train: LocalTrainParams) -> None:
    ws, clients = _workspace(), _clients()
    seq, bat = _both(_program(ws, train), ws, clients)
    _compare(seq, bat)
    assert max(float(r.update.delta.abs().max()) for r in seq) > 1e-2  # they trained


def test_fedavg_small_cnn_in_chunks_equals_sequential() -> None:
    """The small CNN (grouped convolutions under vmap), split into chunks of 2 clients."""
    ws, clients = _workspace("cnn"), _clients(image=True)
    seq, bat = _both(_program(ws, SGD), ws, clients, opts={"max_bytes": 1})
    _compare(seq, bat)


def test_fedprox_batched_equals_sequential() -> None:
    ws, clients = _workspace(), _clients()
    program = _program(ws, SGD, algorithm=FedProxClient(0.5))
    seq, bat = _both(program, ws, clients)
    _compare(seq, bat)
    plain_seq, _ = _both(_program(ws, SGD), ws, clients)
    assert not torch.allclose(plain_seq[0].update.delta, seq[0].update.delta, atol=1e-4)


@pytest.mark.parametrize("noise_on", ["sum", "mean"])
def test_dp_sgd_batched_equals_sequential(noise_on: Literal["sum", "mean"]) -> None:
    ws, clients = _workspace(), _clients()
    dp = DpSgdParams(noise_multiplier=1.1, clip=0.5, micro_batch=3, noise_on=noise_on)
    train = replace(SGD, local_epochs=1)
    seq, bat = _both(_program(ws, train, dp=dp, algorithm=FedProxClient(0.1)), ws, clients)
    _compare(seq, bat)
    assert all(r.epsilon is not None and r.epsilon > 0 for r in bat)
    assert all(len(r.state.dp_events) == 1 for r in bat)


def test_dp_sgd_adaptive_clip_state_and_budget_refusal() -> None:
    """Ĉ_k carried in client state; a client over its target ε declines in both paths."""
    ws, clients = _workspace(), _clients()
    dp = DpSgdParams(noise_multiplier=1.0, clip=1.0, adaptive_clip=AdaptiveClipParams())
    train = replace(SGD, local_steps=3)
    program = _program(ws, train, dp=dp, target_epsilon=30.0)
    spent = (
        {
            "mechanism": "poisson_gaussian",
            "noise_multiplier": 0.3,
            "sampling_probability": 1.0,
            "count": 50,
        },
    )
    states = [ClientState({CLIP_STATE: torch.tensor([0.7])}, ()) for _ in clients]
    states[2] = ClientState({CLIP_STATE: torch.tensor([0.0])}, spent)
    seq, bat = _both(program, ws, clients, states=states)
    assert isinstance(seq[2], BudgetExhaustedError)
    _compare(seq, bat)
    assert float(bat[0].state.tensors[CLIP_STATE][0]) != pytest.approx(0.7)


def test_refusals_name_the_reason() -> None:
    ws, clients = _workspace(), _clients()
    task = ClassificationTask(C)
    assert "ScaffoldClient" in str(
        batch_refusal(_program(ws, SGD, algorithm=ScaffoldClient()), ws, task, clients)
    )
    drop = _workspace(dropout=0.2)
    assert "GeneratorDropout" in str(batch_refusal(_program(drop, SGD), drop, task, clients))
    bn = _workspace(norm="batch")
    assert "BatchNorm" in str(batch_refusal(_program(bn, SGD), bn, task, clients))


def test_dp_sgd_secure_randomness_keeps_ledgers_and_epsilon() -> None:
    """``privacy.randomness: secure``: every step draws from a fresh secret (so the models
    differ between the two paths, as between any two secure runs), the ledgers and ε agree."""
    ws, clients = _workspace(), _clients()
    dp = DpSgdParams(noise_multiplier=1.0, clip=1.0)
    program = _program(ws, replace(SGD, local_epochs=1), dp=dp, randomness=random_source("secure"))
    seq, bat = _both(program, ws, clients)
    for a, b in zip(seq, bat, strict=True):
        assert a.state.dp_events == b.state.dp_events and a.epsilon == b.epsilon
        assert not torch.allclose(a.update.delta, b.update.delta)
