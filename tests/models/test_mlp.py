"""The MLP family: shapes, seeded init, dropout from an explicit generator, bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from geofl.errors import ConfigError
from geofl.models import MODELS, FlatModel
from geofl.models.mlp import MLP, GeneratorDropout, reseed_dropout
from geofl.rng import torch_generator


def _build(seed: int = 0, features: int = 6, outputs: int = 3, **params: object) -> nn.Module:
    return MODELS.build(
        "mlp",
        params,
        in_channels=features,
        num_classes=outputs,
        generator=torch_generator(seed, "init"),
    )


@pytest.mark.parametrize("norm", ["none", "layer", "batch"])
def test_shapes_and_parameter_count(norm: str) -> None:
    model = _build(hidden=[8, 4], norm=norm)
    assert model(torch.zeros(5, 6)).shape == (5, 3)
    linear = (6 * 8 + 8) + (8 * 4 + 4) + (4 * 3 + 3)
    extra = {"none": 0, "layer": 2 * (8 + 4), "batch": 2 * (8 + 4) - (8 + 4)}[norm]
    assert sum(p.numel() for p in model.parameters()) == linear + extra
    # no hidden layer: a linear model
    assert sum(p.numel() for p in _build(hidden=[]).parameters()) == 6 * 3 + 3


def test_init_is_seeded_without_global_rng() -> None:
    torch.manual_seed(1)
    a = FlatModel(_build(seed=5, dropout=0.3)).flat
    torch.manual_seed(2)
    b = FlatModel(_build(seed=5, dropout=0.3)).flat
    assert torch.equal(a, b)
    assert not torch.equal(a, FlatModel(_build(seed=6, dropout=0.3)).flat)
    # weights do not depend on dropout (its generators are drawn after the weights)
    assert torch.equal(a, FlatModel(_build(seed=5)).flat)


def test_dropout_masks_come_from_the_model_generator_only() -> None:
    x = torch.ones(64, 6)
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)  # must not matter
        model = _build(seed=3, hidden=[32], dropout=0.5).train()
        runs.append((model(x), model(x)))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert not torch.equal(runs[0][0], runs[0][1])  # a fresh mask per call
    # reseeding with equal generators gives equal masks; the model is reproducible per round
    model = _build(seed=3, hidden=[32], dropout=0.5).train()
    assert reseed_dropout(model, torch_generator(3, "round", 1, "dropout")) == 1
    first = model(x)
    reseed_dropout(model, torch_generator(3, "round", 1, "dropout"))
    assert torch.equal(model(x), first)
    assert reseed_dropout(_build(hidden=[32]), torch.Generator()) == 0


def test_dropout_off_is_the_same_function() -> None:
    x = torch.randn(10, 6, generator=torch_generator(0, "x"))
    plain = _build(seed=4, hidden=[16, 16]).train()
    dropped = _build(seed=4, hidden=[16, 16], dropout=0.4)
    assert not any(isinstance(m, GeneratorDropout) for m in plain.modules())
    assert torch.equal(plain(x), dropped.eval()(x))  # eval: dropout is the identity
    zero = GeneratorDropout(0.0, torch.Generator())
    assert torch.equal(zero.train()(x), x)


def test_dropout_keeps_the_expectation() -> None:
    layer = GeneratorDropout(0.25, torch_generator(0, "mask")).train()
    out = layer(torch.ones(200_000))
    kept = out != 0
    assert torch.allclose(out[kept], torch.tensor(1 / 0.75))
    assert float(kept.float().mean()) == pytest.approx(0.75, abs=0.005)  # 5 σ ≈ 0.005


def test_refuses_images_and_wrong_feature_counts_in_one_line() -> None:
    model = _build()
    with pytest.raises(ConfigError) as err:
        model(torch.zeros(2, 13, 32, 32))
    assert str(err.value) == (
        "model.name: the mlp model takes tabular [N, F] features, got images "
        "[N, 13, 32, 32]; use a CNN (small_cnn or resnet18)"
    )
    with pytest.raises(ConfigError, match=r"built for \[N, 6\] features, got \[N, 7\]"):
        model(torch.zeros(2, 7))
    assert isinstance(model, MLP)
    model.check_input((5, 6))  # fine


def test_bad_parameters() -> None:
    with pytest.raises(ConfigError, match=r"hidden\.1"):
        MODELS.validate("mlp", {"hidden": [8, 0]})
    with pytest.raises(ConfigError, match="dropout"):
        MODELS.validate("mlp", {"dropout": 1.0})
    with pytest.raises(ConfigError, match="norm"):
        MODELS.validate("mlp", {"norm": "group"})
