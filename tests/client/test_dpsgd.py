"""DP-SGD (001 Eq. 14–18): per-sample gradients, clipping, noise, adaptive clipping (Eq. 15)."""

from __future__ import annotations

import copy
import statistics

import pytest
import torch
from torch import nn

from geofl.client.data import ClientData
from geofl.client.dpsgd import CLIP_STATE, DpSgd, DpSgdParams, dp_sgd_plan
from geofl.client.persample import clip_and_sum, make_engine, per_sample_grads_loop
from geofl.client.trainer import GradCorrection, LocalTrainParams
from geofl.errors import ConfigError
from geofl.models import MODELS, FlatModel
from geofl.plugins import load_all
from geofl.rng import torch_generator
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives

load_all()


def _model(norm: str = "group", width: int = 8) -> nn.Module:
    return MODELS.build(
        "small_cnn",
        {"width": width, "blocks": 2, "norm": norm},
        in_channels=3,
        num_classes=4,
        generator=torch_generator(0, "init"),
    )


def _client(n: int = 48) -> ClientData:
    g = torch_generator(1, "data")
    x = torch.randn(n, 3, 8, 8, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    return ClientData(0, x, y, torch.bincount(y, minlength=4).numpy())


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out, y)


@pytest.mark.parametrize("engine", ["func", "opacus", "bk"])
def test_per_sample_gradients_equal_a_per_example_loop(engine: str) -> None:
    model = _model()
    FlatModel(model)
    data = _client(12)
    x, y = data.inputs, data.targets
    ref = per_sample_grads_loop(model, _loss, x, y)
    grads, loss_sum = make_engine(engine, model, _loss)(x, y)  # type: ignore[arg-type]
    assert set(grads) == set(ref)
    for name, g in ref.items():
        assert torch.allclose(grads[name], g, atol=1e-6, rtol=0), name
    per = torch.stack([_loss(model(x[i : i + 1]), y[i : i + 1]) for i in range(len(y))])
    assert loss_sum == pytest.approx(float(per.sum().detach()), rel=1e-5)


@pytest.mark.parametrize("engine", ["func", "opacus", "bk"])
def test_per_sample_gradients_under_a_large_common_offset(engine: str) -> None:
    """Inputs offset by 1e3: float32 GroupNorm loses digits in any path, so both engines are
    compared with a float64 per-example loop (the truth), to 1e-5 of the gradient scale."""
    model = _model()
    FlatModel(model)
    data = _client(8)
    x, y = data.inputs + 1e3, data.targets
    ref64 = per_sample_grads_loop(copy.deepcopy(model).double(), _loss, x.double(), y)
    grads, _ = make_engine(engine, model, _loss)(x, y)  # type: ignore[arg-type]
    scale = max(float(g.abs().max()) for g in ref64.values())
    for name, g in ref64.items():
        assert float((grads[name].double() - g).abs().max()) <= 1e-5 * scale, name


def test_clip_and_sum_by_hand() -> None:
    # Two samples, one parameter of 2 entries: norms 5 and 0.5; C = 1.
    grads = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
    out = {"w": torch.zeros(2)}
    norms = clip_and_sum(grads, 1.0, out)
    assert norms.tolist() == pytest.approx([5.0, 0.5])
    assert out["w"].tolist() == pytest.approx([0.6 + 0.3, 0.8 + 0.4])
    # The norm spans every parameter: [3] and [4] form one vector of norm 5.
    split = {"a": torch.tensor([[3.0]]), "b": torch.tensor([[4.0]])}
    acc = {"a": torch.zeros(1), "b": torch.zeros(1)}
    clip_and_sum(split, 1.0, acc)
    assert (acc["a"].item(), acc["b"].item()) == pytest.approx((0.6, 0.8))


def test_every_clipped_per_sample_gradient_is_within_the_bound() -> None:
    model = _model()
    FlatModel(model)
    data = _client(16)
    grads, _ = make_engine("func", model, _loss)(data.inputs * 50, data.targets)
    for clip in (1e-3, 0.1, 1.0):
        for i in range(16):
            one = {k: g[i : i + 1] for k, g in grads.items()}
            out = {k: torch.zeros_like(g[0]) for k, g in grads.items()}
            clip_and_sum(one, clip, out)
            total = torch.sqrt(sum((v.double() ** 2).sum() for v in out.values()))
            assert float(total) <= clip * (1 + 1e-5)


def _trainer(params: DpSgdParams, *, batch: int = 16, steps: int | None = 3) -> DpSgd:
    train = LocalTrainParams(
        lr=0.1, momentum=0.0, weight_decay=0.0, batch_size=batch, local_steps=steps
    )
    return DpSgd(FlatModel(_model()), train, ClassificationTask(4), params)


@pytest.mark.parametrize("engine", ["func", "bk"])
def test_one_step_equals_the_hand_assembled_dp_sgd_update(engine: str) -> None:
    """w₁ = w₀ − η (Σ_i ḡ_i + σC·ξ)/(qn) with the batch and ξ drawn from the same stream."""
    params = DpSgdParams(noise_multiplier=0.7, clip=0.5, engine=engine)  # type: ignore[arg-type]
    tr = _trainer(params, steps=1)
    data = _client(48)
    w0 = tr.workspace.snapshot()
    upd = tr(w0, data, ClientDirectives(1, 0), torch_generator(9))
    q, n = 16 / 48, 48
    g = torch_generator(9)
    idx = (torch.rand(n, generator=g) < q).nonzero().flatten()
    noise = torch.randn(w0.shape, generator=g)
    ref_model = _model()
    ref_flat = FlatModel(ref_model)
    ref_flat.load(w0)
    grads = per_sample_grads_loop(ref_model, _loss, data.inputs[idx], data.targets[idx])
    total = torch.zeros_like(w0)
    views = {n_: v for n_, v in ref_flat.spec.unflatten(total).items() if n_ in grads}
    clip_and_sum(grads, 0.5, views)
    expected = -0.1 * (total + 0.7 * 0.5 * noise) / (q * n)
    assert torch.allclose(upd.delta, expected, atol=1e-6)
    ev = upd.local_log["dp_sgd"]["dp_event"]
    assert ev == {
        "mechanism": "poisson_gaussian",
        "noise_multiplier": 0.7,
        "sampling_probability": q,
        "count": 1,
    }
    assert upd.meta.train_metrics == {} and upd.meta.train_loss != upd.meta.train_loss  # NaN


def test_noise_on_the_mean_is_accounted_with_the_larger_multiplier() -> None:
    tr = _trainer(DpSgdParams(noise_multiplier=1.0, noise_on="mean"), batch=16)
    (spec,) = tr.planned_release(48)
    assert spec["noise_multiplier"] == pytest.approx(16.0)  # σ · q|D_k| = σ·B


def test_plan_rounds_expected_passes() -> None:
    t = LocalTrainParams(batch_size=64, local_epochs=5)
    assert dp_sgd_plan(640, t) == (0.1, 50)
    assert dp_sgd_plan(32, t) == (1.0, 5)  # B ≥ n: every example every step
    assert dp_sgd_plan(640, LocalTrainParams(batch_size=64, local_steps=7)) == (0.1, 7)
    assert dp_sgd_plan(640, t, 0.05) == (0.05, 100)


def test_adaptive_clip_follows_eq_15() -> None:
    ad = {"beta": 0.5, "tau": 2.0, "c_min": 0.01, "c_max": 100.0}
    tr = _trainer(DpSgdParams(noise_multiplier=1.0, clip=0.3, adaptive_clip=ad), steps=4)
    data = _client(48)
    w0 = tr.workspace.snapshot()
    first = tr(w0, data, ClientDirectives(1, 0), torch_generator(1), state={})
    log = first.local_log["dp_sgd"]
    assert log["clip"] == 0.3  # C⁰ before any measurement
    # Ĉ¹ = β·(C⁰/τ) + (1 − β)·median ‖g̃‖
    c_hat = 0.5 * (0.3 / 2.0) + 0.5 * log["noisy_grad_norm_median"]
    assert first.local_state[CLIP_STATE].item() == pytest.approx(c_hat, rel=1e-6)
    second = tr(
        w0,
        data,
        ClientDirectives(2, 0),
        torch_generator(2),
        state={CLIP_STATE: first.local_state[CLIP_STATE]},
    )
    assert second.local_log["dp_sgd"]["clip"] == pytest.approx(min(2.0 * c_hat, 100.0), rel=1e-6)
    bounded = _trainer(DpSgdParams(noise_multiplier=1.0, adaptive_clip={**ad, "c_max": 0.2}))
    assert bounded.round_clip({CLIP_STATE: torch.tensor([5.0])}) == 0.2
    assert bounded.round_clip({CLIP_STATE: torch.tensor([1e-6])}) == 0.01


def test_denoised_statistic_removes_the_expected_noise_energy() -> None:
    ad = {"beta": 0.0, "tau": 1.0, "denoise": True}
    tr = _trainer(DpSgdParams(noise_multiplier=2.0, clip=1.0, adaptive_clip=ad), steps=5)
    noisy = _trainer(
        DpSgdParams(noise_multiplier=2.0, clip=1.0, adaptive_clip={"beta": 0.0}), steps=5
    )
    data = _client(48)
    w0 = tr.workspace.snapshot()
    a = tr(w0, data, ClientDirectives(1, 0), torch_generator(3), state={})
    b = noisy(w0, data, ClientDirectives(1, 0), torch_generator(3), state={})
    med = statistics.median([b.local_log["dp_sgd"]["noisy_grad_norm_median"]])
    assert (
        a.local_state[CLIP_STATE].item()
        < b.local_state[CLIP_STATE].item()
        == pytest.approx(med, rel=1e-6)
    )


def test_composes_with_a_gradient_correction() -> None:
    """FedProx + DP: the proximal term is added after privatisation (post-processing)."""
    params = DpSgdParams(noise_multiplier=0.5)
    a, b = _trainer(params, steps=2), _trainer(params, steps=2)
    data = _client(48)
    w0 = a.workspace.snapshot()
    plain = a(w0, data, ClientDirectives(1, 0), torch_generator(4))
    lin = torch.full_like(w0, 0.01)
    corrected = b(
        w0, data, ClientDirectives(1, 0), torch_generator(4), correction=GradCorrection(linear=lin)
    )
    assert not torch.equal(plain.delta, corrected.delta)
    # The first step differs by exactly −η·linear; the noise and batches are the same.
    assert plain.local_log["dp_sgd"]["dp_event"] == corrected.local_log["dp_sgd"]["dp_event"]


def test_batch_norm_models_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"model.params.norm: .*BatchNorm"):
        DpSgd(
            FlatModel(_model("batch")),
            LocalTrainParams(),
            ClassificationTask(4),
            DpSgdParams(noise_multiplier=1.0),
        )


def test_same_seed_same_update() -> None:
    params = DpSgdParams(noise_multiplier=1.0)
    data = _client(48)
    tr = _trainer(params)
    w0 = tr.workspace.snapshot()
    u1 = tr(w0, data, ClientDirectives(1, 0), torch_generator(5))
    u2 = tr(w0, data, ClientDirectives(1, 0), torch_generator(5))
    assert torch.equal(u1.delta, u2.delta)
