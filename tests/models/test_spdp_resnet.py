"""FL-SPDP's ResNet-18 (001 §6.1.2): spectral attention, dropout, small variant, vmap."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from geofl.errors import ConfigError
from geofl.models import MODELS, FlatModel
from geofl.models.attention import SpectralAttention
from geofl.models.init import init_parameters
from geofl.models.mlp import GeneratorDropout
from geofl.models.torchvision_resnet import ResNet18
from geofl.rng import torch_generator

#: torchvision's resnet18 at 3 bands and 10 classes (tests/models/test_resnet.py).
RESNET18_PARAMS = 11_181_642
#: SE over 128 channels with hidden width 128 // 16 = 8: W₁ 8×128 + b₁ 8 + W₂ 128×8 + b₂ 128.
ATTENTION_PARAMS = 8 * 128 + 8 + 128 * 8 + 128


def build(name: str, bands: int = 13, seed: int = 0, **params: Any) -> nn.Module:
    return MODELS.build(
        name, params, in_channels=bands, num_classes=10, generator=torch_generator(seed, "init")
    )


def _images(n: int, bands: int = 13, size: int = 32, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, bands, size, size, generator=torch.Generator().manual_seed(seed))


def test_attention_shapes_and_identity_at_init() -> None:
    att = SpectralAttention(128)
    att.reset_gate()
    x = _images(3, bands=128, size=5)
    assert att.fc1.weight.shape == (8, 128) and att.fc2.weight.shape == (128, 8)
    assert att.gate(x).shape == (3, 128)
    assert torch.equal(att.gate(x), torch.ones(3, 128))  # 2σ(0) = 1 exactly
    assert torch.equal(att(x), x)
    assert SpectralAttention(32).fc1.out_features == 4  # max(4, 32 // 16)


def test_attention_gates_channels_per_sample_in_0_2() -> None:
    att = SpectralAttention(16, reduction=4)
    init_parameters(att, torch_generator(0, "attention"))  # seeded, not the global RNG
    with torch.no_grad():
        att.fc2.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    x = _images(2, bands=16, size=4)
    g = att.gate(x)
    assert bool(((g > 0) & (g < 2)).all()) and not torch.allclose(g[0], g[1])
    torch.testing.assert_close(att(x), x * g[:, :, None, None])


def test_paper_model_parameter_count_and_modules() -> None:
    model = build("resnet18_spdp", bands=3)
    assert sum(p.numel() for p in model.parameters()) == RESNET18_PARAMS + ATTENTION_PARAMS
    assert isinstance(model.get_submodule("attention"), SpectralAttention)
    dropout = model.get_submodule("dropout")
    assert isinstance(dropout, GeneratorDropout) and dropout.p == 0.3
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    # names after layer2 are torchvision's: the attention only adds attention.fc1/fc2
    plain = set(build("resnet18", bands=3).state_dict())
    assert set(model.state_dict()) - plain == {
        f"attention.fc{i}.{p}" for i in (1, 2) for p in ("weight", "bias")
    }


def test_plain_resnet18_is_unchanged_by_the_new_options() -> None:
    """Options off (the default): same modules, same seeded weights as before."""
    a = build("resnet18", seed=3)
    b = build("resnet18", seed=3, spectral_attention=False, dropout=0.0)
    assert isinstance(a, ResNet18) and a.attention is None and a.dropout is None
    assert torch.equal(FlatModel(a).flat, FlatModel(b).flat)


def test_attention_model_at_init_is_its_backbone() -> None:
    """Identity at init: the backbone's weights in a plain ResNet-18 give the same logits."""
    spdp = build("resnet18_spdp", seed=5).eval()
    plain = build("resnet18", seed=9).eval()
    missing, unexpected = plain.load_state_dict(spdp.state_dict(), strict=False)
    assert not missing and len(unexpected) == 4
    x = _images(2)
    with torch.no_grad():
        torch.testing.assert_close(spdp(x), plain(x), rtol=0, atol=0)


def test_dropout_is_seeded_and_off_in_eval() -> None:
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a, b = build("resnet18_spdp_small", seed=2), build("resnet18_spdp_small", seed=2)
    x = _images(4)
    ya, yb = a.train()(x), b.train()(x)
    assert torch.equal(ya, yb) and not torch.equal(ya, a(x))  # same seed; a fresh mask
    assert torch.equal(torch.get_rng_state(), before)
    with torch.no_grad():
        assert torch.equal(a.eval()(x), a(x))
    # weights do not depend on dropout (its generator is seeded after them)
    c = build("resnet18_spdp_small", seed=2, dropout=0.0)
    assert torch.equal(FlatModel(a).flat, FlatModel(c).flat)


def test_small_variant_shapes_and_size() -> None:
    model = build("resnet18_spdp_small")
    widths = [model.get_submodule(f"layer{i}.1.conv2").out_channels for i in (1, 2, 3, 4)]
    assert widths == [16, 32, 64, 128]
    assert 0.6e6 < sum(p.numel() for p in model.parameters()) < 0.8e6
    assert {m.num_groups for m in model.modules() if isinstance(m, nn.GroupNorm)} == {8}
    for size in (16, 32, 64):
        assert model(_images(2, size=size)).shape == (2, 10)


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("resnet18_spdp_small", {"width": 12}, "norm_groups 8 does not divide width 12"),
        ("resnet18_spdp", {"dropout": 1.0}, "model.params.dropout"),
        ("resnet18", {"width": 8}, "model.params.width: unknown field"),
        ("resnet18", {"attention_reduction": 0}, "model.params.attention_reduction"),
    ],
)
def test_bad_params_fail_at_validation(name: str, params: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MODELS.validate(name, params, path="model.params")


@pytest.mark.parametrize(("name", "n"), [("resnet18_spdp_small", 6), ("resnet18_spdp", 3)])
def test_per_sample_gradients_under_vmap_equal_a_loop(name: str, n: int) -> None:
    """What DP-SGD computes (functional_call + vmap + grad) equals one grad per example."""
    model = build(name).eval()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    with torch.no_grad():  # a non-identity gate, so the attention's gradient path is used
        params["attention.fc2.weight"].normal_(0, 0.1, generator=torch.Generator().manual_seed(3))
    x, y = _images(n), torch.arange(n) % 10

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    batched = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    for i in range(n):
        one = grad(loss)(params, x[i], y[i])
        for key, g in one.items():
            torch.testing.assert_close(batched[key][i], g, rtol=1e-5, atol=1e-5)
    # training mode: dropout draws one mask per sample from its generator
    model.train()
    out = vmap(grad(loss), in_dims=(None, 0, 0), randomness="different")(params, x, y)
    assert out["fc.weight"].shape == (n, *params["fc.weight"].shape)
