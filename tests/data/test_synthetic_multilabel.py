"""Synthetic multi-label mosaics: determinism, shapes, label frequencies, co-occurrence, signal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from geofl.data.base import DATASETS, SENTINEL2_BANDS
from geofl.data.synthetic.multilabel import (
    MULTILABEL_CLASSES,
    MULTILABEL_METADATA_KEYS,
    MultiLabelParams,
    generate_multilabel,
)

SMALL = MultiLabelParams(num_samples=300, size=16, seed=2)
LABEL = {name: i for i, name in enumerate(MULTILABEL_CLASSES)}


@pytest.fixture(scope="module")
def mosaics() -> dict[str, np.ndarray]:
    """1000 patches of 16 × 16 pixels (about a second)."""
    return generate_multilabel(MultiLabelParams(num_samples=1000, size=16))


def _auc(score: np.ndarray, y: np.ndarray) -> float:
    """ROC-AUC by the Mann-Whitney rank sum (continuous scores)."""
    rank = np.empty(len(score))
    rank[np.argsort(score)] = np.arange(1, len(score) + 1)
    pos, neg = int(y.sum()), int((1 - y).sum())
    return float((rank[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def test_seeded_and_deterministic() -> None:
    a, b = generate_multilabel(SMALL), generate_multilabel(SMALL)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    other = generate_multilabel(SMALL.model_copy(update={"seed": 3}))
    assert not np.array_equal(a["labels"], other["labels"])


def test_dataset_shapes_dtypes_and_cache(tmp_path: Path) -> None:
    params = {"num_samples": 40, "size": 16}
    ds = DATASETS.build("synthetic_multilabel", params, cache_dir=tmp_path)
    assert ds.inputs.shape == (40, 13, 16, 16) and ds.inputs.dtype == torch.float32
    assert ds.targets.shape == (40, 13) and ds.targets.dtype == torch.float32
    assert ds.target_kind == "multi_hot" and ds.classes == MULTILABEL_CLASSES
    assert ds.bands == SENTINEL2_BANDS and set(ds.metadata) == set(MULTILABEL_METADATA_KEYS)
    assert float(ds.inputs.min()) >= 0.0 and float(ds.inputs.max()) <= 1.0
    again = DATASETS.build("synthetic_multilabel", params, cache_dir=tmp_path)
    assert torch.equal(again.inputs, ds.inputs) and torch.equal(again.targets, ds.targets)
    assert len(list(tmp_path.iterdir())) == 1  # one cache file, reused


def test_label_counts_per_patch(mosaics: dict[str, np.ndarray]) -> None:
    y = mosaics["labels"].astype(np.int64)
    per_patch = y.sum(axis=1)
    assert per_patch.min() >= 1 and per_patch.max() <= 5
    assert 1.7 < per_patch.mean() < 2.4  # 2.0 at the defaults
    assert (y.sum(axis=0) > 0).all()  # every label occurs
    one = generate_multilabel(SMALL.model_copy(update={"min_cover": 0.99}))["labels"]
    assert (one.sum(axis=1) == 1).all()  # only the largest cover is labelled
    few = generate_multilabel(SMALL.model_copy(update={"max_labels": 2}))["labels"]
    assert few.sum(axis=1).max() <= 2


def test_frequent_and_rare_labels(mosaics: dict[str, np.ndarray]) -> None:
    freq = dict(zip(MULTILABEL_CLASSES, mosaics["labels"].mean(axis=0), strict=True))
    for common in ("Urban fabric", "Arable land", "Pastures", "Broad-leaved forest"):
        assert freq[common] > 0.15, common
    for rare in ("Beaches, dunes, sands", "Burnt areas"):
        assert freq[rare] < 0.05, rare


def test_labels_co_occur_as_in_corine(mosaics: dict[str, np.ndarray]) -> None:
    y = mosaics["labels"].astype(bool)

    def lift(a: str, b: str) -> float:
        """P(b | a) / P(b)."""
        return float(y[y[:, LABEL[a]], LABEL[b]].mean() / y[:, LABEL[b]].mean())

    assert lift("Marine waters", "Beaches, dunes, sands") > 2.5
    assert lift("Coniferous forest", "Burnt areas") > 1.5
    assert lift("Arable land", "Pastures") > 1.2
    assert lift("Marine waters", "Coniferous forest") < 0.8


def test_regions_shift_the_label_distribution(mosaics: dict[str, np.ndarray]) -> None:
    y, region = mosaics["labels"], mosaics["region"]
    marine = [y[region == r, LABEL["Marine waters"]].mean() for r in range(4)]
    urban = [y[region == r, LABEL["Urban fabric"]].mean() for r in range(4)]
    conifer = [y[region == r, LABEL["Coniferous forest"]].mean() for r in range(4)]
    # archetypes: 0 agricultural, 1 coastal, 2 urban, 3 upland
    assert np.argmax(marine) == 1 and np.argmax(urban) == 2 and np.argmax(conifer) == 3


def test_labels_are_visible_in_the_spectra(mosaics: dict[str, np.ndarray]) -> None:
    """Least squares on band means and stds (26 features) separates every label on held-out
    patches, but not perfectly: a CNN has texture and layout left to learn."""
    x = mosaics["images"].astype(np.float32) / 10000
    feats = np.c_[np.ones(len(x)), x.mean(axis=(2, 3)), x.std(axis=(2, 3))]
    y = mosaics["labels"].astype(np.float64)
    train, test = slice(0, 700), slice(700, None)
    coef = np.linalg.lstsq(feats[train], y[train], rcond=None)[0]
    score = feats[test] @ coef
    aucs = [_auc(score[:, j], y[test, j]) for j in range(len(MULTILABEL_CLASSES))]
    assert min(aucs) > 0.65 and 0.8 < float(np.mean(aucs)) < 0.97


def test_marine_patches_are_dark_in_nir_and_burnt_ones_have_low_nbr(
    mosaics: dict[str, np.ndarray],
) -> None:
    x = mosaics["images"].astype(np.float64).mean(axis=(2, 3)) / 10000
    y = mosaics["labels"].astype(bool)
    nir, swir = x[:, SENTINEL2_BANDS.index("B08")], x[:, SENTINEL2_BANDS.index("B12")]
    only = y.sum(axis=1) == 1
    marine = only & y[:, LABEL["Marine waters"]]
    broad = only & y[:, LABEL["Broad-leaved forest"]]
    assert nir[marine].mean() < 0.5 * nir[broad].mean()
    nbr = (nir - swir) / (nir + swir)
    burnt, conifer = y[:, LABEL["Burnt areas"]], y[:, LABEL["Coniferous forest"]]
    assert nbr[burnt & ~conifer].mean() < nbr[conifer & ~burnt].mean() - 0.1
