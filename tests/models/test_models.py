"""Models: any band count, seeded init, flat-parameter workspace."""

from __future__ import annotations

import pytest
import torch

from geofl.models import MODELS, FlatModel
from geofl.rng import torch_generator


def _build(key: str, bands: int = 13, seed: int = 0, **params: object) -> torch.nn.Module:
    return MODELS.build(
        key, params, in_channels=bands, num_classes=10, generator=torch_generator(seed, "init")
    )


@pytest.mark.parametrize(
    ("key", "bands", "size"),
    [("small_cnn", 13, 32), ("small_cnn", 3, 64), ("resnet18", 13, 64), ("resnet18", 4, 32)],
)
def test_forward_shapes_any_band_count(key: str, bands: int, size: int) -> None:
    model = _build(key, bands)  # ResNet-18 in detail: test_resnet.py
    assert model(torch.zeros(2, bands, size, size)).shape == (2, 10)


def test_init_is_seeded_without_global_rng() -> None:
    torch.manual_seed(123)  # must not matter
    a = FlatModel(_build("small_cnn", seed=7)).flat
    torch.manual_seed(456)
    b = FlatModel(_build("small_cnn", seed=7)).flat
    c = FlatModel(_build("small_cnn", seed=8)).flat
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_flat_model_params_are_views() -> None:
    fm = FlatModel(_build("small_cnn", norm="batch"))
    d = fm.spec.numel
    assert d == sum(p.numel() for p in fm.module.parameters()) + sum(
        b.numel() for b in fm.module.buffers() if b.is_floating_point()
    )
    fm.load(torch.arange(d, dtype=torch.float32))
    state = fm.spec.unflatten(fm.flat)
    for name, tensor in fm.module.state_dict().items():
        if tensor.is_floating_point():
            assert torch.equal(tensor, state[name]), name
    # an optimiser step writes through to the flat vector
    p = next(fm.module.parameters())
    before = fm.flat.clone()
    with torch.no_grad():
        p.add_(1.0)
    assert float((fm.flat - before).sum()) == pytest.approx(p.numel())
    # BatchNorm running stats travel too
    assert any(not t for t in fm.spec.trainable)


def test_unknown_norm_rejected() -> None:
    from geofl.errors import ConfigError

    with pytest.raises(ConfigError, match="norm"):
        MODELS.validate("small_cnn", {"norm": "layer"}, path="model.params")
