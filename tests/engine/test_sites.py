"""Site-local data (``data.sites``) in the simulator: each site's own dataset, split with
its own generator, normalised with the sites' combined band statistics, evaluated
federatedly; and the one-line errors of sites that cannot take part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.data.synthetic.landcover import SYNTHETIC_CLASSES
from geofl.engine.evaluation.heldout import evaluate
from geofl.engine.site_reports.evaluation import SiteEvalStats, merge_site_stats, site_split_stats
from geofl.engine.sites import (
    BandStats,
    SitesPlan,
    band_stats,
    combine_band_stats,
    site_seed,
)
from geofl.errors import ConfigError
from geofl.tasks.classification import ClassificationTask


def synthetic_site(name: str, seed: int, n: int = 60) -> dict[str, Any]:
    """A site holding ``n`` synthetic 16×16 patches of generator seed ``seed``."""
    return {
        "name": name,
        "dataset": "synthetic",
        "params": {"num_samples": n, "size": 16, "seed": seed},
    }


def sites_raw(*sites: dict[str, Any], **over: Any) -> dict[str, Any]:
    """A small site-local experiment (two synthetic sites by default)."""
    sites = sites or (synthetic_site("north", 1), synthetic_site("south", 2))
    raw: dict[str, Any] = {
        "name": "sites",
        "seeds": [3],
        "data": {"sites": list(sites)},
        "model": {"name": "small_cnn", "params": {"width": 4, "blocks": 1}},
        "train": {"batch_size": 16, "local_epochs": 1},
        "federation": {"num_clients": sum(s.get("clients", 1) for s in sites), "rounds": 1},
        "methods": [{"name": "fedavg"}],
    }
    raw.update(over)
    return raw


def _load(tmp_path: Path, raw: dict[str, Any]) -> ExperimentConfig:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return load_config(path)


def write_npz(path: Path, n: int = 30, bands: int = 13, classes: int = 10, seed: int = 0) -> Path:
    """A ``sentinel2_npz`` file: uint16 ``[n, bands, 16, 16]`` images, labels cycling."""
    rng = np.random.default_rng(seed)
    names = [
        "B01",
        "B02",
        "B03",
        "B04",
        "B05",
        "B06",
        "B07",
        "B08",
        "B8A",
        "B09",
        "B10",
        "B11",
        "B12",
    ][:bands]
    np.savez(
        path,
        images=rng.integers(0, 10000, size=(n, bands, 16, 16), dtype=np.uint16),
        labels=np.arange(n) % classes,
        bands=np.array(names),
    )
    return path


def test_combined_band_statistics_are_the_pooled_mean_and_std() -> None:
    a = torch.tensor([[1.0, 10.0], [2.0, 20.0]])  # [N=2, F=2] features of site a
    b = torch.tensor([[3.0, 30.0], [6.0, 60.0], [8.0, 80.0]])
    sa, sb = band_stats(a), band_stats(b)
    assert sa.count == 2 and sa.sum.tolist() == [3.0, 30.0] and sa.sumsq.tolist() == [5.0, 500.0]
    mean, std = combine_band_stats([sa, sb], ndim=2)
    pooled = np.array([1, 2, 3, 6, 8], dtype=np.float64)  # band 0; band 1 is 10x
    assert mean.shape == (1, 2) and mean[0, 0].item() == pytest.approx(4.0)
    assert std[0, 0].item() == pytest.approx(pooled.std(ddof=1))  # √8.5
    assert std[0, 1].item() == pytest.approx(10 * pooled.std(ddof=1))
    img = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2)
    s = band_stats(img)
    m, sd = combine_band_stats([s], ndim=4)
    assert s.count == 8 and m.shape == (1, 3, 1, 1)
    torch.testing.assert_close(m, img.mean(dim=(0, 2, 3), keepdim=True))
    torch.testing.assert_close(sd, img.std(dim=(0, 2, 3), keepdim=True))
    constant = BandStats(4, np.array([8.0]), np.array([16.0]))  # four 2s: std 0 → 1e-6
    assert combine_band_stats([constant], ndim=2)[1].item() == pytest.approx(1e-6)


def test_confusion_matrices_merge_into_the_pooled_metrics() -> None:
    task = ClassificationTask(3)
    model = torch.nn.Linear(4, 3)
    torch.manual_seed(0)
    x, y = torch.randn(20, 4), torch.arange(20) % 3
    from geofl.data.base import ArrayDataset

    ds = [
        ArrayDataset(x[a:b], y[a:b], ("a", "b", "c"), tuple("wxyz")) for a, b in ((0, 8), (8, 20))
    ]
    merged = merge_site_stats([site_split_stats(model, d, task, 5) for d in ds])
    pooled = evaluate(model, x, y, task, 5)
    assert merged.n == 20
    assert merged.values["accuracy"] == pooled.values["accuracy"]
    assert merged.values["macro_f1"] == pooled.values["macro_f1"]
    assert merged.values["loss"] == pytest.approx(pooled.values["loss"], rel=1e-6)
    assert merged.per_class["accuracy"] == pooled.per_class["accuracy"]


def test_per_site_metrics_merge_weighted_by_sample_count() -> None:
    a = SiteEvalStats(10, 5.0, None, {"map": 0.5, "loss": 0.5})
    b = SiteEvalStats(30, 3.0, None, {"map": 0.9, "loss": 0.1})
    nan = SiteEvalStats(5, 0.0, None, {"map": float("nan"), "loss": 0.0})
    m = merge_site_stats([a, b, nan])
    assert m.values["map"] == pytest.approx((10 * 0.5 + 30 * 0.9) / 40)  # NaN site left out
    assert m.values["loss"] == pytest.approx((5 + 3 + 0) / 45)
    assert m.n == 45 and "weighted by sample count" in m.notes[0]


def test_simulated_sites_split_with_their_own_generators_and_shared_statistics(
    tmp_path: Path,
) -> None:
    cfg = _load(tmp_path, sites_raw())
    plan = SitesPlan(cfg).prepare(3)
    north, south = plan.splits
    assert site_seed(3, "north") != site_seed(3, "south")
    assert len(north.train) + len(north.val) + len(north.test) == 60
    # standardised with the pooled train statistics: pooled train mean 0, std 1 per band
    train = torch.cat([north.train.inputs, south.train.inputs])
    torch.testing.assert_close(train.mean(dim=(0, 2, 3)), torch.zeros(13), atol=1e-4, rtol=0)
    torch.testing.assert_close(train.std(dim=(0, 2, 3)), torch.ones(13), atol=1e-3, rtol=0)
    assert [s.name for s in plan.data.sites] == ["north", "south"]
    part = SitesPlan(cfg).partition(cfg.methods[0], plan, 3)
    assert [len(ix) for ix in part.indices] == [len(north.train), len(south.train)]
    assert int(part.indices[1][0]) == len(north.train)  # clients numbered site by site


def test_sites_with_several_clients_each(tmp_path: Path) -> None:
    a, b = sites_raw()["data"]["sites"]
    cfg = _load(tmp_path, sites_raw({**a, "clients": 2}, {**b, "clients": 1}))
    sites = SitesPlan(cfg)
    plan = sites.prepare(3)
    part = sites.partition(cfg.methods[0], plan, 3)
    n0 = len(plan.splits[0].train)
    assert len(part.indices) == 3
    assert sorted(np.concatenate(part.indices[:2]).tolist()) == list(range(n0))


def test_bad_site_data_ends_in_one_line_naming_the_site_and_field(tmp_path: Path) -> None:
    a, _ = sites_raw()["data"]["sites"]
    missing = {
        "name": "south",
        "dataset": "sentinel2_npz",
        "params": {"path": str(tmp_path / "no.npz")},
    }
    with pytest.raises(ConfigError) as err:
        SitesPlan(_load(tmp_path, sites_raw(a, missing)))
    msg = str(err.value)
    assert msg.startswith("data.sites.1.params: site south:") and "no.npz" in msg, msg
    assert "\n" not in msg
    eurosat = list(SYNTHETIC_CLASSES)
    rgb = {
        **missing,
        "params": {"path": str(write_npz(tmp_path / "rgb.npz", bands=3)), "classes": eurosat},
    }
    with pytest.raises(
        ConfigError,
        match=r"^data.sites: sites disagree on bands \(north: .*\(13\); south: .*\(3\)\)",
    ):
        SitesPlan(_load(tmp_path, sites_raw(a, rgb)))
    two = {
        **missing,
        "params": {
            "path": str(write_npz(tmp_path / "two.npz", classes=2)),
            "classes": ["no", "yes"],
        },
    }
    with pytest.raises(ConfigError, match=r"^data.sites: sites disagree on classes"):
        SitesPlan(_load(tmp_path, sites_raw(a, two)))
    with pytest.raises(
        ConfigError, match=r"^task.name: site north: single-label targets .* multilabel task"
    ):
        SitesPlan(_load(tmp_path, sites_raw(task={"name": "multilabel"})))


def test_site_local_configs_refuse_what_needs_a_central_dataset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^federation.num_clients: 3, but data.sites host 2"):
        _load(tmp_path, sites_raw(federation={"num_clients": 3, "rounds": 1}))
    with pytest.raises(ConfigError, match=r"^eval.group_by: needs a dataset the server holds"):
        _load(tmp_path, sites_raw(eval={"group_by": "region"}))
    raw = sites_raw()
    raw["data"]["params"] = {"num_samples": 5}
    with pytest.raises(ConfigError, match=r"^data.params: with data.sites"):
        _load(tmp_path, raw)
    a, b = raw["data"]["sites"]
    with pytest.raises(ConfigError, match=r"^data.sites.1.name: 'north' names two sites"):
        _load(tmp_path, sites_raw(a, {**b, "name": "north"}))


def test_data_describe_prints_one_line_per_site(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from geofl.cli.describe import describe

    out = io.StringIO()
    describe(_load(tmp_path, sites_raw()), 3, Console(file=out, width=400), None)
    lines = out.getvalue().splitlines()
    assert [ln.split(" (")[0] for ln in lines] == ["site north", "site south"]
    assert "its split train/val/test = " in lines[0] and "1 client(s)" in lines[1]
