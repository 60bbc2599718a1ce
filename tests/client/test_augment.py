"""Training-time augmentations (001 §6.1.2): statistics, determinism, purity, wiring."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.client.augment import (
    AUGMENTATIONS,
    AugmentPipeline,
    band_dropout,
    band_jitter,
    build_pipeline,
    gaussian_noise,
    illumination_contrast,
)
from geofl.client.data import ClientData
from geofl.client.trainer import LocalSGD, LocalTrainParams
from geofl.config.load import load_config, load_raw
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError, RegistryError
from geofl.io import read_jsonl
from geofl.models import MODELS, FlatModel
from geofl.registry import NoParams
from geofl.rng import torch_generator
from geofl.rundir import seed_dir
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives

PAPER: list[dict[str, Any]] = [
    {"name": "band_jitter", "low": 0.9, "high": 1.1},
    {"name": "gaussian_noise", "std": 0.01},
    {"name": "band_dropout", "p": 0.1},
    {"name": "illumination_contrast"},
]


def _gen(seed: int = 0) -> torch.Generator:
    return torch_generator(seed, "augment")


def test_band_dropout_zeroes_whole_bands_at_rate_p() -> None:
    x = torch.ones(2000, 10, 3, 3)
    y = band_dropout(x, _gen(), 0.1)
    per_band = y.flatten(2)
    assert torch.all((per_band == 0).all(-1) | (per_band == 1).all(-1))  # whole bands only
    rate = float((per_band[..., 0] == 0).float().mean())
    assert rate == pytest.approx(0.1, abs=0.01)  # binomial sd over 20 000 draws ≈ 0.002


def test_band_jitter_factors_per_band_within_bounds() -> None:
    x = torch.ones(4000, 6, 2, 2)
    y = band_jitter(x, _gen(), 0.9, 1.1)
    s = y[:, :, 0, 0]
    assert torch.equal(y, s[:, :, None, None].expand_as(y))  # one factor per sample and band
    assert float(s.min()) >= 0.9 and float(s.max()) <= 1.1
    assert float(s.mean()) == pytest.approx(1.0, abs=0.003)
    assert float(s.var()) == pytest.approx(0.2**2 / 12, rel=0.05)  # Var U[a, b] = (b−a)²/12
    assert not torch.equal(s[:, 0], s[:, 1])


def test_gaussian_noise_std() -> None:
    y = gaussian_noise(torch.zeros(500, 4, 8, 8), _gen(), 0.01)
    assert float(y.std()) == pytest.approx(0.01, rel=0.01)
    assert abs(float(y.mean())) < 1e-4


def test_illumination_contrast_gain_and_contrast_bounds() -> None:
    x = torch.rand(1000, 3, 4, 4, generator=_gen(5)) + 0.5
    y = illumination_contrast(x, _gen(), 0.1, 0.2)
    gain = y.mean((2, 3)) / x.mean((2, 3))  # the mean moves by g only
    assert torch.allclose(gain, gain[:, :1].expand_as(gain), atol=1e-5)  # same for all bands
    assert float(gain.min()) >= 0.9 - 1e-5 and float(gain.max()) <= 1.1 + 1e-5
    spread = (y - y.mean((2, 3), keepdim=True)).std((2, 3)) / (
        (x - x.mean((2, 3), keepdim=True)).std((2, 3)) * gain
    )
    assert float(spread.min()) >= 0.8 - 1e-4 and float(spread.max()) <= 1.2 + 1e-4


def test_pipeline_deterministic_pure_and_seed_dependent() -> None:
    pipe = build_pipeline([(c["name"], {k: v for k, v in c.items() if k != "name"}) for c in PAPER])
    x = torch.rand(8, 5, 4, 4, generator=_gen(9))
    before = x.clone()
    a, b, c = pipe(x, _gen(1)), pipe(x, _gen(1)), pipe(x, _gen(2))
    assert torch.equal(x, before)  # input not mutated
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == x.shape and a.dtype == x.dtype
    assert AugmentPipeline()(x, _gen()) is x and not AugmentPipeline()


def test_pipeline_acts_in_reflectance_space() -> None:
    mean, std = torch.full((1, 2, 1, 1), 0.3), torch.full((1, 2, 1, 1), 0.1)
    pipe = build_pipeline([("band_dropout", {"p": 0.5})], mean=mean, std=std)
    y = pipe(torch.zeros(500, 2, 2, 2), _gen())
    values = set(torch.round(y, decimals=4).flatten().tolist())
    assert values == {0.0, -3.0}  # dropped band: reflectance 0 → (0 − 0.3) / 0.1


def test_registry_refuses_duplicates() -> None:
    with pytest.raises(RegistryError, match="already registered"):
        AUGMENTATIONS.register("band_dropout", params=NoParams)(lambda _: None)


def _trainer(augment: AugmentPipeline) -> LocalSGD:
    model = MODELS.build(
        "small_cnn", {"width": 4, "blocks": 1}, in_channels=3, num_classes=2, generator=_gen()
    )
    train = LocalTrainParams(batch_size=8, local_epochs=2, augment=augment)
    return LocalSGD(FlatModel(model), train, ClassificationTask(2))


def _data() -> ClientData:
    x = torch.randn(40, 3, 8, 8, generator=torch_generator(1, "data"))
    y = (x[:, 0].mean((1, 2)) > 0).long()
    return ClientData(0, x, y, np.bincount(y.numpy(), minlength=2))


def test_batch_schedule_unaffected_by_augment_stream() -> None:
    base = _trainer(AugmentPipeline())
    w0 = base.workspace.flat.detach().clone()
    d = ClientDirectives(1, 0)
    plain = base(w0, _data(), d, torch_generator(3, "train")).delta
    zero = build_pipeline([("gaussian_noise", {"std": 0.0})])  # identity transform
    same = _trainer(zero)(w0, _data(), d, torch_generator(3, "train"), augment_generator=_gen())
    assert torch.equal(plain, same.delta)
    noisy = _trainer(build_pipeline([("band_dropout", {"p": 0.5})]))
    moved = noisy(w0, _data(), d, torch_generator(3, "train"), augment_generator=_gen())
    assert not torch.equal(plain, moved.delta)
    with pytest.raises(ValueError, match="augment generator"):
        noisy(w0, _data(), d, torch_generator(3, "train"))


def _cfg(tmp_path: Path, augment: list[dict[str, Any]]) -> Any:
    raw = tiny_raw(federation={"num_clients": 4, "rounds": 2})
    raw["methods"] = raw["methods"][1:]
    raw["train"] = {**raw["train"], "augment": augment}
    path = tmp_path / f"cfg{len(augment)}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def _rounds(run: Path) -> list[dict[str, Any]]:
    return [
        {k: r[k] for k in ("train_loss", "val", "test")}
        for r in read_jsonl(seed_dir(run, "fedavg", 3) / "rounds.jsonl")
    ]


def test_two_round_run_differs_with_augment_and_is_reproducible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = _rounds(run_experiment(_cfg(tmp_path, []), tmp_path / "plain"))
    calls: list[int] = []
    original = AugmentPipeline.__call__

    def counting(self: AugmentPipeline, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        calls.append(len(x))
        return original(self, x, g)

    monkeypatch.setattr(AugmentPipeline, "__call__", counting)
    cfg = _cfg(tmp_path, PAPER)
    a = _rounds(run_experiment(cfg, tmp_path / "a"))
    seen = len(calls)
    b = _rounds(run_experiment(cfg, tmp_path / "b"))
    assert a == b and a != plain
    # only training batches are augmented (never evaluation): 2 rounds × every client's
    # data once (participation 1, one local epoch)
    part = json.loads((seed_dir(tmp_path / "a", "fedavg", 3) / "partition.json").read_text())
    assert sum(calls[:seen]) == 2 * sum(part["sizes"])


def test_tabular_model_refuses_image_augmentation(tmp_path: Path) -> None:
    raw = load_raw("tabular-binary-example")
    raw.setdefault("train", {})["augment"] = [{"name": "gaussian_noise"}, {"name": "band_jitter"}]
    path = tmp_path / "tab.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"train\.augment\.1\.name"):
        load_config(path)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "train.augment.1.name" in result.output and not out.exists()
    assert len(result.output.strip().splitlines()) == 1
