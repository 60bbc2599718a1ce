"""The book-keeping (bk) DP-SGD engine against the slow per-example loop (001 Eq. 14, 16).

Every check compares the clipped sum ``Σ_i min(1, C/‖g_i‖) g_i`` (and the norms) with
:func:`per_sample_grads_loop` + :func:`clip_and_sum`: one forward/backward per example, no
shortcut. Both per-layer rules (ghost norm, materialised) are forced in turn.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from geofl.client import bk_kernels
from geofl.client.bookkeeping import BookKeepingEngine, ghost_is_cheaper
from geofl.client.persample import clip_and_sum, per_sample_grads_loop
from geofl.errors import ConfigError
from geofl.models import MODELS, FlatModel
from geofl.plugins import load_all
from geofl.rng import torch_generator

load_all()

RULES = [None, "ghost", "materialise"]


def _ce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out, y)


def _model(name: str, params: dict[str, Any], in_ch: int, classes: int = 4) -> nn.Module:
    model = MODELS.build(
        name, params, in_channels=in_ch, num_classes=classes, generator=torch_generator(0)
    )
    FlatModel(model)  # the layout the trainers use (weights as views of one flat vector)
    return model


def _batch(n: int, shape: tuple[int, ...], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch_generator(seed, "bk")
    return torch.randn(n, *shape, generator=g), torch.randint(0, 4, (n,), generator=g)


CASES = {
    "small_cnn": ("small_cnn", {"width": 8, "blocks": 2}, (3, 8, 8)),
    "small_cnn_bias": ("small_cnn", {"width": 8, "blocks": 2, "norm": "none"}, (3, 8, 8)),
    "resnet18_spdp_small": ("resnet18_spdp_small", {"width": 8, "dropout": 0.0}, (3, 16, 16)),
    "resnet_small_stem": (
        "resnet18_spdp_small",
        {"width": 8, "dropout": 0.0, "small_input_stem": True},
        (3, 8, 8),
    ),
    "mlp_layernorm": ("mlp", {"hidden": [16, 8], "norm": "layer", "activation": "gelu"}, (5,)),
}


def _reference(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    grads = per_sample_grads_loop(model, _ce, x, y)
    out = {k: torch.zeros_like(v[0]) for k, v in grads.items()}
    if x.dtype == torch.float64:  # the truth: Eq. 14 written out in float64
        n = x.shape[0]
        norms = torch.sqrt(sum(g.reshape(n, -1).square().sum(1) for g in grads.values()))
        f = (clip / norms).clamp(max=1.0)
        return {k: torch.tensordot(f, g, dims=1) for k, g in grads.items()}, norms
    return out, clip_and_sum(grads, clip, out)


def _bk(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float, rule: str | None
) -> tuple[dict[str, torch.Tensor], torch.Tensor, float]:
    eng = BookKeepingEngine(model, _ce, force=rule)
    named = dict(model.named_parameters())
    out = {n: torch.zeros_like(named[n]) for n in eng.names}
    norms, loss = eng.clipped_sum(x, y, clip, out)
    return out, norms, loss


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float) -> None:
    assert set(a) == set(b)
    for name in a:
        err = float((a[name].double() - b[name].double()).abs().max())
        assert err <= tol, (name, err)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("case", list(CASES))
def test_clipped_sum_equals_the_per_example_loop(case: str, rule: str | None) -> None:
    name, params, shape = CASES[case]
    model = _model(name, params, shape[0])
    x, y = _batch(6, shape)
    ref, ref_norms = _reference(model, x, y, 0.5)
    out, norms, loss = _bk(model, x, y, 0.5, rule)
    _close(out, ref, 1e-6)
    assert torch.allclose(norms, ref_norms, rtol=1e-5, atol=0)
    with torch.no_grad():
        per = sum(_ce(model(x[i : i + 1]), y[i : i + 1]).item() for i in range(6))
    assert loss == pytest.approx(per, rel=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_per_sample_gradients_equal_the_loop(case: str) -> None:
    """``engine(x, y)`` materialises every per-sample gradient. Against the float64 loop
    (the truth): the float32 loop itself is off by ~4e-6 of the gradient scale on the
    ResNet (rounding grows with depth), so both are held to 1e-5 of that scale."""
    name, params, shape = CASES[case]
    model = _model(name, params, shape[0])
    x, y = _batch(5, shape)
    ref = per_sample_grads_loop(copy.deepcopy(model).double(), _ce, x.double(), y)
    grads, _ = BookKeepingEngine(model, _ce)(x, y)
    scale = max(float(g.abs().max()) for g in ref.values())
    _close(grads, ref, 1e-5 * scale)
    loop32 = per_sample_grads_loop(model, _ce, x, y)
    if not case.startswith("resnet"):  # shallow nets: bk equals the float32 loop to 1e-6
        _close(grads, loop32, 1e-6 * max(1.0, scale))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("case", ["small_cnn", "resnet_small_stem"])
def test_chunks_change_no_bit(case: str, rule: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Patches, per-sample products and GroupNorm's ``a − μ`` formed one sample at a time
    (``CHUNK_BYTES = 1``) give bitwise the clipped sum and norms of one chunk per layer."""
    name, params, shape = CASES[case]
    model = _model(name, params, shape[0])
    x, y = _batch(5, shape)
    whole, whole_norms, _ = _bk(model, x, y, 0.5, rule)
    monkeypatch.setattr(bk_kernels, "CHUNK_BYTES", 1)
    assert len(bk_kernels.chunks(5, 4)) == 5
    split, split_norms, _ = _bk(model, x, y, 0.5, rule)
    assert torch.equal(whole_norms, split_norms)
    assert all(torch.equal(whole[k], split[k]) for k in whole)


@pytest.mark.parametrize("rule", RULES)
def test_norms_below_at_and_above_the_bound(rule: str | None) -> None:
    """C set between, at and around the per-sample norms: clipped, untouched and tied samples."""
    name, params, shape = CASES["small_cnn"]
    model = _model(name, params, shape[0])
    x, y = _batch(8, shape)
    _, ref_norms = _reference(model, x, y, 1.0)
    mid = float(ref_norms.median())
    for clip in (float(ref_norms.min()) / 2, mid, float(ref_norms[3]), float(ref_norms.max()) * 2):
        ref, _ = _reference(model, x, y, clip)
        out, _, _ = _bk(model, x, y, clip, rule)
        _close(out, ref, 1e-6 * max(1.0, clip))


def test_a_tie_at_the_bound_keeps_the_gradient() -> None:
    """‖g_i‖ = C exactly (a batch of 1, C its own norm): the factor is 1, Σ = g_1."""
    name, params, shape = CASES["small_cnn"]
    model = _model(name, params, shape[0])
    x, y = _batch(1, shape)
    grads = per_sample_grads_loop(model, _ce, x, y)
    _, norms, _ = _bk(model, x, y, 1e9, None)
    out, _, _ = _bk(model, x, y, float(norms[0]), None)
    _close(out, {k: g[0] for k, g in grads.items()}, 1e-6)


def test_large_input_offset_against_a_float64_loop() -> None:
    """Inputs offset by 1e3 (GroupNorm cancels it): float32 bk vs the float64 truth."""
    name, params, shape = CASES["small_cnn"]
    model = _model(name, params, shape[0])
    x, y = _batch(6, shape)
    x = x + 1e3
    ref, _ = _reference(copy.deepcopy(model).double(), x.double(), y, 0.5)
    for rule in RULES:
        out, _, _ = _bk(model, x, y, 0.5, rule)
        _close(out, ref, 1e-5 * 0.5 * 6)


def test_empty_batch_adds_nothing() -> None:
    name, params, shape = CASES["small_cnn"]
    model = _model(name, params, shape[0])
    out = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    x, y = _batch(0, shape)
    norms, loss = BookKeepingEngine(model, _ce).clipped_sum(x, y, 1.0, out)
    assert norms.shape == (0,) and loss == 0.0
    assert all(float(v.abs().sum()) == 0.0 for v in out.values())


def test_every_clipped_gradient_is_within_the_bound() -> None:
    name, params, shape = CASES["resnet18_spdp_small"]
    model = _model(name, params, shape[0])
    x, y = _batch(6, shape)
    eng = BookKeepingEngine(model, _ce)
    for i in range(6):
        out = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
        eng.clipped_sum(x[i : i + 1] * 50, y[i : i + 1], 1e-3, out)
        total = torch.sqrt(sum((v.double() ** 2).sum() for v in out.values()))
        assert float(total) <= 1e-3 * (1 + 1e-5)


def test_the_layer_rule_by_hand() -> None:
    # T·(d_in + d_out) < d_in·d_out: ghost; a linear layer (T = 1) is ghost unless d = 1.
    assert ghost_is_cheaper(1, 128, 10) and not ghost_is_cheaper(1, 128, 1)
    assert not ghost_is_cheaper(1024, 117, 32)  # small_cnn's first conv: materialised
    assert not ghost_is_cheaper(256, 288, 64)  # its second: 256·352 > 18432
    assert ghost_is_cheaper(64, 576, 128)  # its third: 64·704 = 45056 < 73728


class _Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.fc(x)))


class _InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        out += 1.0
        return out


def test_unsupported_models_are_refused_naming_the_layer() -> None:
    conv1d = nn.Sequential(nn.Conv1d(2, 4, 3), nn.Flatten(), nn.Linear(4, 2))
    with pytest.raises(ConfigError, match=r"trainer.engine: layer '0' \(Conv1d\).*engine: func"):
        BookKeepingEngine(conv1d, _ce)
    grouped = nn.Sequential(nn.Conv2d(4, 4, 3, groups=2))
    with pytest.raises(ConfigError, match=r"layer '0' \(Conv2d\)"):
        BookKeepingEngine(grouped, _ce)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    with pytest.raises(ConfigError, match=r"layer 'fc' is called twice.*engine: func"):
        BookKeepingEngine(_Shared(), _ce).clipped_sum(x, y, 1.0, {})
    with pytest.raises(ConfigError, match=r"layer 'fc' is modified in place"):
        BookKeepingEngine(_InPlace(), _ce).clipped_sum(x, y, 1.0, {})


def test_frozen_parameters_are_skipped() -> None:
    name, params, shape = CASES["small_cnn"]
    model = _model(name, params, shape[0])
    model.head.bias.requires_grad_(False)
    for p in model.features[1].parameters():  # the first GroupNorm's affine parameters
        p.requires_grad_(False)
    x, y = _batch(4, shape)
    ref, _ = _reference(model, x, y, 0.5)
    out, _, _ = _bk(model, x, y, 0.5, None)
    _close(out, ref, 1e-6)
    assert "head.bias" not in out and "features.1.weight" not in out


def test_group_norm_without_saved_statistics_recomputes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback of GroupNorm's weight rule (x̂ recomputed) gives the same clipped sum."""
    from geofl.client import bookkeeping

    name, params, shape = CASES["small_cnn"]
    model = _model(name, params, shape[0])
    x, y = _batch(6, shape)
    x = x + 1e3
    ref, _ = _reference(model, x, y, 0.5)
    monkeypatch.setattr(bookkeeping, "_saved_stats", lambda out: None)
    out, _, _ = _bk(model, x, y, 0.5, None)
    _close(out, ref, 1e-5 * 0.5 * 6)
