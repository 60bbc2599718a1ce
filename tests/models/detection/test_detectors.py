"""The registered detectors: flat-vector round trip, seeded construction, train/eval outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from geofl.errors import ConfigError
from geofl.models import MODELS, FlatModel
from geofl.tasks.detection import DetectionOutput, DetectionTask, boxes_to_targets, targets_to_dicts

SMALL = {"width": 8, "fpn_channels": 32, "norm_groups": 4}


def _targets() -> list[dict[str, torch.Tensor]]:
    import numpy as np

    rows = boxes_to_targets(
        [
            (np.array([[4, 4, 20, 28], [30, 8, 60, 20]], np.float32), np.array([1, 0])),
            (np.array([[10, 30, 40, 60]], np.float32), np.array([2])),
        ]
    )
    return targets_to_dicts(rows)


def _build(name: str, seed: int) -> torch.nn.Module:
    params = dict(SMALL) if name != "faster_rcnn" else {**SMALL, "head_dim": 32, "proposals": 50}
    return MODELS.build(
        name, params, in_channels=3, num_classes=3, generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("name", ["fcos", "faster_rcnn"])
def test_flat_vector_round_trip(name: str) -> None:
    state = torch.get_rng_state()
    a, b = FlatModel(_build(name, 0)), FlatModel(_build(name, 1))
    assert torch.equal(torch.get_rng_state(), state)  # built from geofl's generator only
    assert torch.equal(FlatModel(_build(name, 0)).flat, a.flat)  # seeded
    assert not torch.equal(a.flat, b.flat)
    assert all(a.spec.trainable)  # GroupNorm: no running statistics in the vector
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    a.module.eval()
    b.module.eval()
    b.load(a.flat)
    with torch.inference_mode():
        out_a, out_b = a.module(x), b.module(x)
    for da, db in zip(out_a, out_b, strict=True):
        assert torch.equal(da["boxes"], db["boxes"]) and torch.equal(da["labels"], db["labels"])
        assert torch.equal(da["scores"], db["scores"])


@pytest.mark.parametrize("name", ["fcos", "faster_rcnn"])
def test_train_step_and_eval_with_targets(name: str) -> None:
    model = _build(name, 0)
    task = DetectionTask(3)
    x, y = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)), _targets()
    model.train()
    state = torch.get_rng_state()
    losses = model(x, y)
    assert torch.equal(torch.get_rng_state(), state)  # sampling draws from geofl's stream
    loss = task.loss(losses, y)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    model.eval()
    with torch.inference_mode():
        out = model(x, y)
    assert isinstance(out, DetectionOutput) and len(out.detections) == 2
    labels = torch.cat([d["labels"] for d in out.detections])
    assert labels.numel() == 0 or (int(labels.min()) >= 0 and int(labels.max()) < 3)
    assert task.loss_sum(out, y) == pytest.approx(2 * float(task.loss(out, y)))
    with pytest.raises(ValueError, match="needs targets"):
        model.train()(x)


def test_head_groups_keep_two_channels_per_group() -> None:
    from geofl.models.detection.detectors import head_groups

    # 64+ channels: the heads' published GN(32), unchanged; fewer: ≥ 2 channels per group.
    assert [head_groups(c) for c in (32, 64, 96, 128, 256)] == [16, 32, 32, 32, 32]
    assert [head_groups(c) for c in (2, 6, 48)] == [1, 3, 24]


@pytest.mark.parametrize("name", ["fcos", "retinanet"])
def test_single_image_eval_with_32_pyramid_channels(name: str) -> None:
    """Regression: GN(32, 32) on the 1×1 P6/P7 maps of a 96 px image saw one value per
    group and a 1-image evaluation batch crashed (PyTorch refuses a zero-variance group)."""
    model = _build(name, 0).eval()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    head = [m for m in norms if m.num_channels == 32 and m.num_groups != 4]  # not the FPN's
    assert head and all(m.num_groups == 16 for m in head)
    x = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        levels = model.net.backbone(x)
        out = model(x)
    assert tuple(levels["p7"].shape[-2:]) == (1, 1)
    assert len(out) == 1 and out[0]["boxes"].shape[-1] == 4


def test_64_channel_heads_keep_gn32() -> None:
    """The rule leaves ≥ 64-channel heads (every earlier preset) exactly as torchvision's."""
    model = MODELS.build(
        "fcos",
        {"width": 8, "fpn_channels": 64},
        in_channels=3,
        num_classes=3,
        generator=torch.Generator().manual_seed(0),
    )
    head = [m for m in model.net.head.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert head and all(m.num_groups == 32 and m.num_channels == 64 for m in head)


@pytest.mark.parametrize("name", ["fcos", "faster_rcnn"])
def test_starting_weights_from_a_local_state_dict(name: str, tmp_path: Path) -> None:
    """A detector's own state dict starts a run (a centrally pretrained detector, the
    paper's pretrained YOLOv5s analogue); another class count keeps the seeded class
    layers; a file of another architecture is refused naming the field."""
    src = _detector(name, 3, seed=1)
    path = tmp_path / "det.pt"
    torch.save(src.state_dict(), path)
    same = _detector(name, 3, seed=2, weights=str(path))
    for key, value in src.state_dict().items():
        assert torch.equal(same.state_dict()[key], value), key
    fresh, other = _detector(name, 5, seed=2), _detector(name, 5, seed=2, weights=str(path))
    head = "cls_logits" if name == "fcos" else "box_predictor"
    for key, value in other.state_dict().items():
        expected = fresh if head in key else src
        assert torch.equal(value, expected.state_dict()[key]), key
    resnet = tmp_path / "resnet.pt"
    torch.save({"conv1.weight": torch.zeros(64, 3, 7, 7)}, resnet)
    with pytest.raises(ConfigError, match=r"model\.params\.weights: .*no tensor .* matches"):
        _detector(name, 3, seed=2, weights=str(resnet))
    with pytest.raises(ConfigError, match="weights: no file"):
        _detector(name, 3, seed=2, weights=str(tmp_path / "missing.pt"))


def _detector(name: str, classes: int, *, seed: int, **extra: object) -> torch.nn.Module:
    params = {"width": 8, **extra}
    if name == "fcos":
        params["head_convs"] = 1
    gen = torch.Generator().manual_seed(seed)
    return MODELS.build(name, params, in_channels=3, num_classes=classes, generator=gen)
