"""Issue 35's harder Task B: regional drift of the stress rule and label noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from geofl.data.agri.dataset import SyntheticAgriParams, build_synthetic_agri
from geofl.data.agri.harder import flip_labels, regional_thresholds
from geofl.data.agri.pipeline import stress_labels

WORLD = [1] * 13  # 13 farms, one per world region


def _build(tmp_path: Path, **kw: object) -> tuple[np.ndarray, np.ndarray]:
    """(targets, region) of a small world-geography Task B dataset."""
    params = SyntheticAgriParams(
        task="stress",
        geography="world",
        farms_per_region=WORLD,
        num_tractors=26,
        num_blocks=780,
        **kw,  # type: ignore[arg-type]
    )
    data = build_synthetic_agri(params, cache_dir=tmp_path)
    return np.asarray(data.targets), np.asarray(data.metadata["region"])


def test_defaults_are_the_paper_rule(tmp_path: Path) -> None:
    y0, _ = _build(tmp_path)
    y1, _ = _build(tmp_path, regional_shift=0.0, label_noise=0.0)
    np.testing.assert_array_equal(y0, y1)
    k, m = regional_thresholds(np.arange(3), 3, 0.0)
    np.testing.assert_array_equal(k, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(m, [0.08, 0.08, 0.08])


def test_thresholds_by_hand() -> None:
    k, m = regional_thresholds(np.array([0, 1, 2, 2]), 3, 0.5)
    np.testing.assert_allclose(k, [0.5, 1.0, 1.5, 1.5])
    np.testing.assert_allclose(m, [0.04, 0.08, 0.12, 0.12])
    with pytest.raises(ValueError, match=r"regional_shift 1\.0"):
        regional_thresholds(np.zeros(2, dtype=np.int64), 3, 1.0)
    with pytest.raises(ValueError, match="region codes"):
        regional_thresholds(np.array([3]), 3, 0.5)


def test_per_block_thresholds_in_the_rule() -> None:
    # one block dips 0.1 below an 8-week baseline with sigma ~0.053, EVI dips 0.1
    ndvi = np.array([[0.5, 0.6] * 4 + [0.45]] * 2)
    evi = np.array([[0.4] * 8 + [0.30]] * 2)
    group = np.array([0, 1])  # one block per group: q20 is its own value, (iii) false
    assert not stress_labels(ndvi, evi, group).any()
    group = np.array([0, 0])
    ndvi[1, 8] = 0.46  # the other block sets q20 above block 0's value
    y = stress_labels(ndvi, evi, group, k_sigma=np.array([1.0, 1.0]))
    assert y[0, 8] and not y[1, 8]
    # a stricter k (2.0: 0.55 - 0.107 = 0.443 < 0.45) or margin (0.15) clears it
    assert not stress_labels(ndvi, evi, group, k_sigma=np.array([2.0, 1.0]))[0, 8]
    assert not stress_labels(ndvi, evi, group, evi_margin=np.array([0.15, 0.08]))[0, 8]


def test_label_noise_is_deterministic_and_flips_eta(tmp_path: Path) -> None:
    clean, _ = _build(tmp_path)
    a, _ = _build(tmp_path, label_noise=0.2)
    b, _ = _build(tmp_path, label_noise=0.2)
    np.testing.assert_array_equal(a, b)
    n = clean.size
    flipped = float(np.mean(a != clean))
    assert abs(flipped - 0.2) < 4 * np.sqrt(0.2 * 0.8 / n)  # binomial, 4 sd
    other = flip_labels(clean, 0.2, seed=1)
    assert not np.array_equal(other, a)  # the flips follow the seed
    np.testing.assert_array_equal(flip_labels(clean, 0.0, seed=0), clean)
    with pytest.raises(ValueError, match=r"label_noise 0\.5"):
        flip_labels(clean, 0.5, seed=0)


def test_regional_shift_moves_prevalence_first_up_last_down(tmp_path: Path) -> None:
    clean, region = _build(tmp_path)
    shifted, region2 = _build(tmp_path, regional_shift=0.8)
    np.testing.assert_array_equal(region, region2)  # features and rows unchanged
    first, last = region == 0, region == 12
    assert shifted[first].mean() > clean[first].mean()
    assert shifted[last].mean() < clean[last].mean()
    # a stricter rule only removes stress weeks (every condition tightens), a looser adds
    assert not (shifted[last] & ~clean[last]).any()
    assert not (clean[first] & ~shifted[first]).any()


def test_options_refused_for_task_a() -> None:
    with pytest.raises(ValidationError, match="drop them for task nutrient"):
        SyntheticAgriParams(task="nutrient", label_noise=0.1)
    with pytest.raises(ValidationError):
        SyntheticAgriParams(task="stress", regional_shift=1.0)
