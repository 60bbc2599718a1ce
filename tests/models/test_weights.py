"""Loading ResNet-18 weights from local files the tests write (torchvision/torchgeo layouts)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from geofl.errors import ConfigError
from geofl.models import MODELS
from geofl.models.weights import load_weights
from geofl.rng import torch_generator

FIELD = "model.params.weights"


def build(bands: int = 3, classes: int = 10, seed: int = 0, **params: Any) -> nn.Module:
    return MODELS.build(
        "resnet18",
        params,
        in_channels=bands,
        num_classes=classes,
        generator=torch_generator(seed, "init"),
    )


def pretrained(bands: int, classes: int, **params: Any) -> dict[str, torch.Tensor]:
    """A torchvision-layout BatchNorm state dict (layout checked in test_resnet.py) with
    non-trivial values everywhere, running statistics included."""
    model = build(bands, classes, seed=99, norm="batch", **params)
    gen = torch.Generator().manual_seed(5)
    state = model.state_dict()
    with torch.no_grad():
        for name, t in state.items():
            if name.endswith("running_var"):
                t.copy_(0.5 + torch.rand(t.shape, generator=gen))
            elif t.is_floating_point():
                t.copy_(torch.randn(t.shape, generator=gen))
            else:
                t.fill_(1234)
    return {k: v.clone() for k, v in state.items()}


@pytest.fixture(scope="module")
def imagenet_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """torchvision's ImageNet file layout: plain state dict, 3 bands, 1000 classes."""
    state = pretrained(3, 1000)
    path = tmp_path_factory.mktemp("w") / "resnet18-imagenet.pth"
    torch.save(state, path)
    return path, state


def test_batchnorm_file_onto_groupnorm_model(
    imagenet_file: tuple[Path, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    path, state = imagenet_file
    model = build(3, 10)
    fresh_fc = build(3, 10).state_dict()["fc.weight"]
    with caplog.at_level("INFO", logger="geofl"):
        report = load_weights(model, path, field=FIELD)
    got = model.state_dict()
    for name in ("conv1.weight", "layer2.0.downsample.0.weight", "layer4.1.conv2.weight"):
        assert torch.equal(got[name], state[name]), name
    # BatchNorm affine → GroupNorm affine; running statistics have no place and are ignored
    assert isinstance(model.get_submodule("layer3.1.bn1"), nn.GroupNorm)
    assert torch.equal(got["layer3.1.bn1.weight"], state["layer3.1.bn1.weight"])
    assert torch.equal(got["layer2.0.downsample.1.bias"], state["layer2.0.downsample.1.bias"])
    assert len(report.ignored_stats) == 20 * 3
    # 1000-class fc dropped; the model's seeded fc stays
    assert report.head_dropped and torch.equal(got["fc.weight"], fresh_fc)
    assert report.missing == () and report.unexpected == ()
    assert len(report.loaded) == len(got) - 2
    lines = [r.getMessage() for r in caplog.records if "weights" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "fc kept from init" in lines[0] and "ignored 60 BatchNorm" in lines[0]


def test_batchnorm_model_takes_running_statistics(
    imagenet_file: tuple[Path, dict[str, Any]],
) -> None:
    path, state = imagenet_file
    model = build(3, 10, norm="batch")
    report = load_weights(model, path, field=FIELD)
    got = model.state_dict()
    assert report.ignored_stats == () and report.missing == ()
    assert torch.equal(got["layer1.0.bn2.running_var"], state["layer1.0.bn2.running_var"])
    assert int(got["bn1.num_batches_tracked"]) == 1234


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: {"state_dict": {f"model.{k}": v for k, v in s.items()}, "epoch": 3},
        lambda s: {"model": {f"module.backbone.{k}": v for k, v in s.items()}},
        lambda s: {"state_dict": {"model": s}},
    ],
    ids=["lightning", "ddp-backbone", "nested"],
)
def test_sentinel2_checkpoint_through_the_registry(tmp_path: Path, wrap: Any) -> None:
    """torchgeo-style 13-band conv1 and 10-class fc inside a checkpoint, with prefixes."""
    state = pretrained(13, 10)
    path = tmp_path / "s2.ckpt"
    torch.save(wrap(state), path)
    model = build(13, 10, weights=str(path))  # as a config's model.params.weights does
    got = model.state_dict()
    assert got["conv1.weight"].shape == (64, 13, 7, 7)
    assert torch.equal(got["conv1.weight"], state["conv1.weight"])
    assert torch.equal(got["fc.weight"], state["fc.weight"])  # same class count: loaded
    assert torch.equal(got["fc.bias"], state["fc.bias"])


def test_loaded_model_is_deterministic_and_trains(tmp_path: Path) -> None:
    path = tmp_path / "w.pt"
    torch.save(pretrained(4, 5), path)
    a, b = build(4, 7, weights=str(path)), build(4, 7, weights=str(path))
    x = torch.randn(2, 4, 32, 32, generator=torch.Generator().manual_seed(0))
    out = a(x)
    assert torch.equal(out, b(x)) and out.shape == (2, 7)
    out.sum().backward()
    assert a.get_submodule("conv1").weight.grad is not None


@pytest.mark.parametrize(
    ("file_bands", "params", "match"),
    [
        (
            13,
            {},
            r"conv1\.weight takes 13 bands but the data has 3; select 13 bands in data\.bands",
        ),
        (
            3,
            {"small_input_stem": True},
            r"7×7 stem but the model's is 3×3; set model\.params\.small_input_stem: false",
        ),
    ],
)
def test_stem_mismatch_is_one_line(
    tmp_path: Path, file_bands: int, params: dict[str, Any], match: str
) -> None:
    path = tmp_path / "w.pt"
    torch.save(pretrained(file_bands, 10), path)
    with pytest.raises(ConfigError, match=rf"^{FIELD}: .*{match}") as err:
        load_weights(build(3, 10, **params), path, field=FIELD)
    assert "\n" not in str(err.value)


def test_other_architecture_names_the_tensor(tmp_path: Path) -> None:
    state = pretrained(3, 10)
    state["layer3.0.conv1.weight"] = torch.zeros(256, 128, 5, 5)
    path = tmp_path / "w.pt"
    torch.save(state, path)
    with pytest.raises(ConfigError, match=r"layer3\.0\.conv1\.weight has shape \[256, 128, 5, 5\]"):
        load_weights(build(3, 10), path, field=FIELD)


def test_partial_file_reports_missing_and_unexpected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = pretrained(3, 10)
    partial = {k: v for k, v in state.items() if k.startswith(("conv1.", "layer1."))}
    partial["decoder.head.weight"] = torch.zeros(3)
    path = tmp_path / "w.pt"
    torch.save(partial, path)
    model = build(3, 10)
    with caplog.at_level("WARNING", logger="geofl"):
        report = load_weights(model, path, field=FIELD)
    assert report.unexpected == ("decoder.head.weight",)
    assert "layer4.1.conv2.weight" in report.missing and "conv1.weight" not in report.missing
    (line,) = [r.getMessage() for r in caplog.records]
    assert "missing 49 (bn1.weight, bn1.bias, layer2.0.conv1.weight" in line
    assert "unexpected 1 (decoder.head.weight)" in line


def _write(path: Path, content: object) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "pickle":
        path.write_bytes(pickle.dumps({"conv1.weight": [1, 2, 3]}))
    else:
        torch.save(content, path)
    return path


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not a checkpoint\n", "is not a checkpoint of tensors"),
        (b"", "is not a checkpoint of tensors"),
        ("pickle", "is not a checkpoint of tensors"),
        ({"epoch": 3, "optimizer": {"lr": 0.1}}, "holds no state dict .dict with keys epoch"),
        ([torch.zeros(3)], "holds no state dict .list"),
    ],
    ids=["text", "empty", "pickle", "no-state-dict", "list"],
)
def test_not_a_checkpoint_fails_at_config_load(tmp_path: Path, content: object, match: str) -> None:
    """Refused when the config is validated (before any run directory exists), one line."""
    path = _write(tmp_path / "w.pt", content)
    with pytest.raises(ConfigError, match=rf"^{FIELD}: .*{match}") as err:
        MODELS.validate("resnet18", {"weights": str(path)}, path="model.params")
    assert "\n" not in str(err.value)


def test_no_matching_tensor_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "w.pt", {"foo.weight": torch.zeros(2)})
    with pytest.raises(ConfigError, match=rf"^{FIELD}: no tensor of .* matches the model"):
        load_weights(build(3, 10), path, field=FIELD)


def test_directory_is_refused_at_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"^{FIELD}: no file"):
        MODELS.validate("resnet18", {"weights": str(tmp_path)}, path="model.params")


def test_cli_refuses_bad_weights_with_exit_2_and_no_run_dir(
    tiny_config_file: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from geofl.cli import app

    three_bands = tmp_path / "rgb.pth"
    torch.save(pretrained(3, 1000), three_bands)
    for weights, needle in [
        (tmp_path / "absent.pth", "no file"),
        (three_bands, "conv1.weight takes 3 bands but the data has 13"),  # at build time
    ]:
        out = tmp_path / f"run-{weights.stem}"
        result = CliRunner().invoke(
            app,
            [
                *("run", str(tiny_config_file), "--out", str(out), "--no-progress"),
                *("--set", "model.name=resnet18", "--set", f"model.params={{weights: {weights}}}"),
            ],
        )
        assert result.exit_code == 2, result.output
        (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
        assert line.startswith(f"error: {FIELD}: ") and needle in line
        assert not out.exists()
