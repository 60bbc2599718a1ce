"""The local objective's gradient correction inside LocalSGD (FedProx, SCAFFOLD, FedDyn).

One plain-SGD step (momentum 0, weight decay 0, one full batch) from w must move the model
by −η_l (∇L(w) + μ(w − anchor) + b); the reference gradient comes from autograd on a
separate copy of the model, so the trainer's flat-gradient binding is checked too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from geofl.algorithms.fedavg import FedProxClient
from geofl.client.data import ClientData
from geofl.client.state import ClientState
from geofl.client.step import ClientProgram, ClientStreams, client_step
from geofl.client.trainer import GradCorrection, LocalSGD, LocalTrainParams
from geofl.models.base import FlatModel
from geofl.rng import torch_generator
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives

ModelFactory = Callable[[], nn.Module]
N, C = 12, 3
ONE_STEP = LocalTrainParams(
    optimizer="sgd", lr=0.1, momentum=0.0, weight_decay=0.0, batch_size=64, local_steps=1
)


def _seeded(module: nn.Module) -> nn.Module:
    """Deterministic initial weights without touching the global RNG."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return module


def _linear() -> nn.Module:
    return _seeded(nn.Sequential(nn.Flatten(), nn.Linear(4, C)))


def _mlp_bn() -> nn.Module:
    return _seeded(
        nn.Sequential(nn.Flatten(), nn.Linear(4, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, C))
    )


def _data() -> ClientData:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 1, 2, 2, generator=g)
    y = torch.randint(0, C, (N,), generator=g)
    return ClientData(0, x, y, np.bincount(y.numpy(), minlength=C))


def _points(fm: FlatModel) -> tuple[torch.Tensor, torch.Tensor]:
    """A start point w and a different anchor (the anchor differs on buffers too)."""
    g = torch.Generator().manual_seed(2)
    w = fm.snapshot()
    trainable = _mask(fm)
    w = w + 0.3 * torch.randn(w.shape, generator=g) * trainable  # keep BN variances valid
    anchor = w + torch.randn(w.shape, generator=g)
    return w, anchor


def _mask(fm: FlatModel) -> torch.Tensor:
    m = torch.zeros(fm.spec.numel)
    for off, shape, trainable in zip(
        fm.spec.offsets, fm.spec.shapes, fm.spec.trainable, strict=True
    ):
        if trainable:
            m[off : off + int(np.prod(shape))] = 1.0
    return m


def _autograd(factory: ModelFactory, w: torch.Tensor, data: ClientData) -> torch.Tensor:
    """∇ of the mean cross-entropy at w over all local data, flat (0 at buffer positions)."""
    fm = FlatModel(factory())
    fm.load(w)
    fm.module.train()
    loss = F.cross_entropy(fm.module(data.inputs), data.targets)
    loss.backward()  # type: ignore[no-untyped-call]
    params = dict(fm.module.named_parameters())
    out = torch.zeros(fm.spec.numel)
    for name, shape, off, trainable in zip(
        fm.spec.names, fm.spec.shapes, fm.spec.offsets, fm.spec.trainable, strict=True
    ):
        if trainable:
            grad = params[name].grad
            assert grad is not None
            out[off : off + int(np.prod(shape))] = grad.flatten()
    return out


def _train(
    trainer: LocalSGD, w: torch.Tensor, data: ClientData, corr: GradCorrection | None
) -> torch.Tensor:
    return trainer(
        w, data, ClientDirectives(1, 0), torch_generator(7, "train"), correction=corr
    ).delta


@pytest.mark.parametrize("mu", [0.5, 3.0])
def test_fedprox_step_is_lr_times_grad_plus_mu_pull(mu: float) -> None:
    fm, data = FlatModel(_linear()), _data()
    trainer = LocalSGD(fm, ONE_STEP, ClassificationTask(C))
    w, anchor = _points(fm)
    delta = _train(trainer, w, data, GradCorrection(prox_mu=mu, anchor=anchor))
    # Δ = −η_l (∇L(w) + μ (w − anchor))
    want = -ONE_STEP.lr * (_autograd(_linear, w, data) + mu * (w - anchor))
    assert torch.allclose(delta, want, atol=1e-6, rtol=1e-5), (delta - want).abs().max()
    plain = _train(trainer, w, data, None)
    # the proximal pull is really there: the difference is exactly −η_l μ (w − anchor)
    assert torch.allclose(delta - plain, -ONE_STEP.lr * mu * (w - anchor), atol=1e-6)


def test_linear_term_shifts_the_gradient() -> None:
    fm, data = FlatModel(_linear()), _data()
    trainer = LocalSGD(fm, ONE_STEP, ClassificationTask(C))
    w, anchor = _points(fm)
    b = torch.linspace(-1.0, 1.0, fm.spec.numel)
    delta = _train(trainer, w, data, GradCorrection(linear=b))
    # Δ = −η_l (∇L(w) + b)
    want = -ONE_STEP.lr * (_autograd(_linear, w, data) + b)
    assert torch.allclose(delta, want, atol=1e-6, rtol=1e-5)
    both = _train(trainer, w, data, GradCorrection(prox_mu=2.0, anchor=anchor, linear=b))
    want = -ONE_STEP.lr * (_autograd(_linear, w, data) + 2.0 * (w - anchor) + b)
    assert torch.allclose(both, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("factory", [_linear, _mlp_bn], ids=["linear", "batchnorm"])
def test_zero_correction_is_plain_training_bit_for_bit(factory: ModelFactory) -> None:
    # Several steps with momentum and weight decay: the flat-gradient binding alone must not
    # change a single bit.
    train = LocalTrainParams(lr=0.05, momentum=0.9, weight_decay=1e-3, batch_size=5, local_epochs=2)
    fm, data = FlatModel(factory()), _data()
    trainer = LocalSGD(fm, train, ClassificationTask(C))
    w, anchor = _points(fm)
    plain = _train(trainer, w, data, None)
    for corr in (
        GradCorrection(prox_mu=0.0, anchor=anchor),
        GradCorrection(),
        GradCorrection(linear=torch.zeros(fm.spec.numel)),
    ):
        assert torch.equal(_train(trainer, w, data, corr), plain), corr
    # and plain training after a corrected run is unchanged (the binding is undone)
    _train(trainer, w, data, GradCorrection(prox_mu=5.0, anchor=anchor))
    assert all(p.grad is None for p in fm.module.parameters())
    assert torch.equal(_train(trainer, w, data, None), plain)


def test_correction_does_not_touch_buffer_positions() -> None:
    fm, data = FlatModel(_mlp_bn()), _data()
    assert not all(fm.spec.trainable)  # BatchNorm running mean/var live in the flat vector
    mask = _mask(fm).bool()
    trainer = LocalSGD(fm, ONE_STEP, ClassificationTask(C))
    w, anchor = _points(fm)
    b = torch.full((fm.spec.numel,), 0.7)  # non-zero on buffer positions too
    mu = 2.0
    plain = _train(trainer, w, data, None)
    delta = _train(trainer, w, data, GradCorrection(prox_mu=mu, anchor=anchor, linear=b))
    # buffers move only with the forward pass (running statistics), exactly as in plain training
    assert torch.equal(delta[~mask], plain[~mask])
    assert bool((plain[~mask] != 0).any())  # the running statistics did move
    want = -ONE_STEP.lr * (_autograd(_mlp_bn, w, data) + mu * (w - anchor) + b)
    assert torch.allclose(delta[mask], want[mask], atol=1e-6, rtol=1e-5)
    # the correction vector itself is zero on buffers when given the trainer's mask
    grad = torch.zeros(fm.spec.numel)
    GradCorrection(prox_mu=mu, anchor=anchor, linear=b).apply(grad, w, mask.float())
    assert bool((grad[~mask] == 0).all()) and bool((grad[mask] != 0).all())


def test_fedprox_client_two_steps_through_client_step() -> None:
    # FedProxClient anchors at the broadcast model w0, so step 1 is plain and step 2 pulls:
    # w1 = w0 − η ∇L(w0);  w2 = w1 − η (∇L(w1) + μ (w1 − w0))
    mu, lr = 4.0, 0.1
    train = LocalTrainParams(lr=lr, momentum=0.0, weight_decay=0.0, batch_size=64, local_steps=2)
    fm, data = FlatModel(_linear()), _data()
    program = ClientProgram(LocalSGD(fm, train, ClassificationTask(C)), train, FedProxClient(mu))
    w0, _ = _points(fm)
    res = client_step(
        program, w0, data, ClientState(), ClientDirectives(1, 0), ClientStreams((7, "round", 1))
    )
    w1 = w0 - lr * _autograd(_linear, w0, data)
    w2 = w1 - lr * (_autograd(_linear, w1, data) + mu * (w1 - w0))
    assert torch.allclose(res.update.delta, w2 - w0, atol=1e-6, rtol=1e-5)
    assert res.update.meta.steps == 2 and res.state.tensors == {}
