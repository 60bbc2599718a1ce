"""ResNet-18: torchvision's layout and logits, multispectral stems, seeded init."""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from geofl.errors import ConfigError
from geofl.models import MODELS, FlatModel
from geofl.rng import torch_generator

DATA = Path(__file__).with_name("data")
#: Written by data/make_torchvision_reference.py from torchvision 0.28.0's models/resnet.py.
REFERENCE = json.loads((DATA / "torchvision_resnet18.json").read_text())


def _fill() -> Callable[[dict[str, torch.Tensor], int], dict[str, torch.Tensor]]:
    """The reference script's deterministic weight fill (one definition for both sides)."""
    spec = importlib.util.spec_from_file_location("tv_ref", DATA / "make_torchvision_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fill: Callable[[dict[str, torch.Tensor], int], dict[str, torch.Tensor]] = module.fill
    return fill


def build(bands: int = 13, classes: int = 10, seed: int = 0, **params: Any) -> nn.Module:
    """``resnet18`` from the registry, as the engine builds it."""
    return MODELS.build(
        "resnet18",
        params,
        in_channels=bands,
        num_classes=classes,
        generator=torch_generator(seed, "init"),
    )


def test_state_dict_is_torchvisions_name_for_name_and_shape_for_shape() -> None:
    model = build(3, norm="batch")
    assert [[k, list(v.shape)] for k, v in model.state_dict().items()] == REFERENCE["state"]


def test_groupnorm_keeps_the_names_without_running_statistics() -> None:
    model = build(13)
    stats = ("running_mean", "running_var", "num_batches_tracked")
    want = [
        [k, [64, 13, 7, 7] if k == "conv1.weight" else shape]
        for k, shape in REFERENCE["state"]
        if not k.endswith(stats)
    ]
    assert [[k, list(v.shape)] for k, v in model.state_dict().items()] == want
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 20 and all(m.num_groups == 32 for m in norms)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert {
        m.num_groups for m in build(3, norm_groups=8).modules() if hasattr(m, "num_groups")
    } == {8}


@pytest.mark.parametrize("case", sorted(REFERENCE["cases"]))
def test_logits_equal_torchvisions_with_the_same_weights(case: str) -> None:
    """Same weights, same input → torchvision's logits (so the forward is torchvision's)."""
    ref = REFERENCE["cases"][case]
    model = build(ref["bands"], norm=ref["norm"], small_input_stem=ref["small_input_stem"])
    model.load_state_dict(_fill()(model.state_dict(), 0))
    x = torch.randn(2, ref["bands"], 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model.eval()(x)
    torch.testing.assert_close(out, torch.tensor(ref["logits"]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("bands", "norm", "small"), [(3, "batch", False), (13, "group", True)])
def test_the_model_is_torchvisions_resnet18(bands: int, norm: str, small: bool) -> None:
    """An instance of ``torchvision.models.resnet.ResNet`` with torchvision's ``BasicBlock``;
    ``torchvision.models.resnet18`` (its stem and norm set alike) takes its state dict
    strictly and gives the same logits to the bit."""
    from geofl.models.detection.tvops import ensure_torchvision_ops

    ensure_torchvision_ops()
    from torchvision.models import resnet18
    from torchvision.models.resnet import BasicBlock, ResNet

    ours = build(bands, norm=norm, small_input_stem=small, seed=4).eval()
    assert isinstance(ours, ResNet)
    assert isinstance(ours.get_submodule("layer3.0"), BasicBlock)
    norm_layer = nn.BatchNorm2d if norm == "batch" else functools.partial(nn.GroupNorm, 32)
    with torch.device("meta"):  # no global-RNG draws; the weights come from ours
        ref = resnet18(weights=None, num_classes=10, norm_layer=norm_layer)
        if small:
            ref.conv1, ref.maxpool = nn.Conv2d(bands, 64, 3, 1, 1, bias=False), nn.Identity()
        else:
            ref.conv1 = nn.Conv2d(bands, 64, 7, 2, 3, bias=False)
    ref.load_state_dict(ours.state_dict(), strict=True, assign=True)
    x = torch.randn(2, bands, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(ours(x), ref.eval()(x.contiguous(memory_format=torch.channels_last)))


@pytest.mark.parametrize("bands", [3, 4, 13])
@pytest.mark.parametrize("size", [32, 64])
@pytest.mark.parametrize("small", [False, True])
def test_output_and_last_stage_shapes(bands: int, size: int, small: bool) -> None:
    model = build(bands, small_input_stem=small)
    seen: list[tuple[int, ...]] = []
    model.get_submodule("layer4").register_forward_hook(
        lambda _m, _i, out: seen.append(tuple(out.shape))
    )
    with torch.no_grad():
        assert model(torch.zeros(2, bands, size, size)).shape == (2, 10)
    side = size // 8 if small else size // 32  # documented in models/resnet.py
    assert seen == [(2, 512, side, side)]


def test_parameter_count_is_resnet18s() -> None:
    # torchvision's resnet18: 11,689,512 with 1000 classes → 11,181,642 with 10.
    assert sum(p.numel() for p in build(3).parameters()) == 11_181_642
    assert sum(p.numel() for p in build(3, norm="batch").parameters()) == 11_181_642


def test_init_is_seeded_and_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = FlatModel(build(seed=7)).flat
    b = FlatModel(build(seed=7)).flat
    c = FlatModel(build(seed=8)).flat
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.isfinite(a).all()
    # torchvision's scheme: conv Kaiming-normal (fan-out), norms 1/0.
    model = build(seed=7)
    w = model.get_submodule("layer3.0.conv2").weight
    assert float(w.detach().std()) == pytest.approx((2.0 / (256 * 9)) ** 0.5, rel=0.02)
    assert torch.equal(model.get_submodule("bn1").weight, torch.ones(64))


def test_batchnorm_buffers_are_initialised() -> None:
    model = build(norm="batch", seed=1)
    bn = model.get_submodule("layer2.1.bn2")
    assert isinstance(bn, nn.BatchNorm2d)
    assert bn.running_mean is not None and bn.running_var is not None
    assert torch.equal(bn.running_mean, torch.zeros(128))
    assert torch.equal(bn.running_var, torch.ones(128))
    assert int(bn.num_batches_tracked or 0) == 0


def test_no_norm_has_no_norm_entries() -> None:
    keys = build(norm="none").state_dict()
    assert not any(".bn" in k or k.startswith("bn1") or "downsample.1" in k for k in keys)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"norm_groups": 24}, "model.params.norm_groups: 24 does not divide 64"),
        ({"norm": "layer"}, "model.params.norm"),
        ({"width": 8}, "model.params.width: unknown field"),
        ({"weights": "/nonexistent/r18.pt"}, "model.params.weights: no file"),
    ],
)
def test_bad_params_fail_at_validation(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MODELS.validate("resnet18", params, path="model.params")
