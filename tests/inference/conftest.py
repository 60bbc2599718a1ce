"""Two tiny trained runs shared by the inference tests (a few seconds each, trained once).

* ``ms_run``: synthetic 13-band data, the model trained on four of the bands (so band
  selection is exercised), standardised inputs, two rounds, one method and one seed;
* ``rgb_run``: a UC Merced-layout folder of PNGs written here (3 classes), ``rgb8`` files.

Each fixture also returns the raw (un-normalised, all-band) test split of its seed, the
inputs a user would hand to ``load_model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.data.base import ArrayDataset
from geofl.data.splitting.split import stratified_split
from geofl.engine.experiment import load_dataset, run_experiment

MS_BANDS = ["B04", "B03", "B02", "B08"]
RGB_CLASSES = ("beach", "forest", "river")


@dataclass(frozen=True)
class TrainedRun:
    """A finished run directory, its config and the raw test split of its seed."""

    run_dir: Path
    cfg: Any
    raw_test: ArrayDataset


def _train(tmp: Path, raw: dict[str, Any]) -> TrainedRun:
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path, [])
    run_dir = run_experiment(cfg, tmp / "run")
    full = load_dataset(
        cfg.model_copy(update={"data": cfg.data.model_copy(update={"bands": "all"})})
    )
    split = stratified_split(full.targets.numpy(), cfg.data.split, cfg.seeds[0])
    return TrainedRun(run_dir, cfg, full.subset(split.test))


@pytest.fixture(scope="session")
def ms_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """Synthetic 13-band data, trained on :data:`MS_BANDS`."""
    tmp = tmp_path_factory.mktemp("ms")
    raw = tiny_raw(
        federation={"num_clients": 2, "rounds": 2},
        methods=[{"name": "fedavg"}],
    )
    raw["data"].update(bands=MS_BANDS, cache_dir=str(tmp / "cache"))
    return _train(tmp, raw)


def write_rgb_folder(root: Path, per_class: int = 10, side: int = 20, seed: int = 0) -> Path:
    """``root/<class>/<n>.png`` smooth colour images, each class with its own tint."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float64)
    for c, cls in enumerate(RGB_CLASSES):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            base = rng.uniform(40, 120, size=3)
            base[c] += 100
            img = (
                base + xx[..., None] * rng.uniform(-2, 2, 3) + yy[..., None] * rng.uniform(-2, 2, 3)
            )
            img = np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)
            Image.fromarray(img).save(root / cls / f"{n:02d}.png")
    return root


@pytest.fixture(scope="session")
def rgb_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """UC Merced layout of PNGs (3 of its classes), resized to 16 × 16."""
    tmp = tmp_path_factory.mktemp("rgb")
    root = write_rgb_folder(tmp / "images")
    raw = tiny_raw(
        federation={"num_clients": 1, "rounds": 2},
        methods=[{"name": "central", "partition": {"name": "pooled"}}],
    )
    raw["data"] = {
        "dataset": "ucmerced",
        "params": {"root": str(root), "size": 16},
        "cache_dir": str(tmp / "cache"),
    }
    raw["train"] = {"batch_size": 8}
    return _train(tmp, raw)
