"""Paper 003's agricultural data: vocabulary, §3.1.1 pipeline steps, labels and generator."""

from __future__ import annotations

import numpy as np
import pytest

from geofl.data.agri.catalog import (
    FARMS_PER_REGION,
    TASK_A_FEATURES,
    TASK_B_FEATURES,
    texture_group,
)
from geofl.data.agri.dataset import SyntheticAgriParams, build_synthetic_agri
from geofl.data.agri.pipeline import (
    nutrient_target,
    stress_labels,
    task_a_samples,
    task_b_samples,
    weekly_composite,
)
from geofl.data.agri.synthetic import generate_blocks, largest_remainder, two_level_tractors
from geofl.data.splitting.partition import PARTITIONERS, make_partition
from geofl.errors import ConfigError, DataError


def test_feature_columns_match_table_1() -> None:
    assert len(TASK_A_FEATURES) == 48 and len(set(TASK_A_FEATURES)) == 48
    assert len(TASK_B_FEATURES) == 52 and len(set(TASK_B_FEATURES)) == 52
    # Task B uses weeks t-2..t only: no season-to-date statistic, no pre-season test
    assert not {"ndvi_max_to_date", "gdd_cum", "no3_preseason_ppm"} & set(TASK_B_FEATURES)


def test_texture_groups_by_hand() -> None:
    sand = np.array([85.0, 60.0, 40.0, 20.0, 30.0, 55.0])
    clay = np.array([5.0, 15.0, 20.0, 45.0, 27.0, 20.0])
    # loamy sand, sandy loam: coarse; loam: medium; clay, clay loam: fine; 55/20: medium
    assert texture_group(sand, clay).tolist() == [0, 0, 1, 2, 2, 1]


def test_weekly_composite_masks_clouds_and_interpolates_by_hand() -> None:
    # one block, four weeks, two acquisitions, one channel
    values = np.array([[[0.5, 0.9], [0.4, 0.6], [0.9, 0.9], [0.8, 0.2]]])[..., None]
    cloud = np.array([[[0.1, 0.5], [0.0, 0.2], [0.7, 0.3], [0.1, 0.1]]])
    valid = np.array([[[True, True], [True, True], [True, True], [True, False]]])
    out, clear = weekly_composite(values, cloud, valid, cloud_max=0.2)
    # week 0: only 0.5 is clear; week 1: both; week 2: none, so (0.5 + 0.8) / 2 between
    # weeks 1 and 3; week 3: the padded second acquisition does not count
    np.testing.assert_allclose(out[0, :, 0], [0.5, 0.5, 0.65, 0.8])
    np.testing.assert_allclose(clear[0], [0.5, 1.0, 0.0, 1.0])


def test_weekly_composite_refuses_a_block_without_clear_weeks() -> None:
    values = np.zeros((2, 3, 1, 1))
    cloud = np.concatenate([np.zeros((1, 3, 1)), np.ones((1, 3, 1))])
    with pytest.raises(DataError, match="field block #1 has no cloud-free"):
        weekly_composite(values, cloud, np.ones((2, 3, 1), dtype=bool), 0.2)


def _stress_reference(ndvi: np.ndarray, evi: np.ndarray, group: np.ndarray) -> np.ndarray:
    """003 §3.1.1's rule with explicit loops (the slow exact path)."""
    b, w = ndvi.shape
    y = np.zeros((b, w), dtype=bool)
    now = {g: [ndvi[i, t] for i in range(b) if group[i] == g for t in range(8, w)] for g in group}
    for i in range(b):
        q20 = np.quantile(now[group[i]], 0.2)
        for t in range(8, w):
            base = ndvi[i, t - 8 : t]
            mu, sd = base.mean(), base.std(ddof=1)
            y[i, t] = (
                ndvi[i, t] < mu - 1.0 * sd
                and evi[i, t] < evi[i, t - 8 : t].mean() - 0.08
                and ndvi[i, t] < q20
            )
    return y


def test_stress_rule_by_hand() -> None:
    base = np.array([0.7, 0.8] * 4)  # weeks 0-7: mean 0.75, std (ddof 1) 0.05345
    ndvi = np.stack([np.concatenate([base, [w8, 0.8]]) for w8 in (0.55, 0.69, 0.60)])
    evi = 0.6 * ndvi  # EVI baseline 0.45: condition (ii) needs EVI(t) < 0.37
    evi[:, 8] = [0.30, 0.40, 0.30]
    y = stress_labels(ndvi, evi, np.zeros(3, dtype=np.int64))
    # NDVI(t) over weeks 8-9: {0.55, 0.69, 0.60, 0.8, 0.8, 0.8}, q20 (linear) = 0.60.
    # block 0: 0.55 < 0.6966, 0.30 < 0.37, 0.55 < 0.60 -> stress; block 1 fails (ii);
    # block 2 fails (iii) (0.60 is not below 0.60); week 9 (0.8) fails (i) everywhere
    assert np.argwhere(y).tolist() == [[0, 8]]
    y_other_group = stress_labels(ndvi, evi, np.array([0, 1, 1]))
    # group 1 = blocks 1, 2: q20 of {0.60, 0.69, 0.8, 0.8} = 0.60 + 0.6 * 0.09 = 0.654, so
    # block 2's 0.60 is now below it; block 0 alone: q20 of {0.55, 0.8} = 0.60 -> stress
    assert np.argwhere(y_other_group).tolist() == [[0, 8], [2, 8]]


def test_stress_rule_matches_the_loop_reference() -> None:
    rng = np.random.default_rng(3)
    ndvi = 0.6 + 0.1 * rng.standard_normal((12, 15))
    evi = 0.6 * ndvi - 0.03 + 0.05 * rng.standard_normal((12, 15))
    group = rng.integers(0, 3, 12)
    got = stress_labels(ndvi, evi, group)
    np.testing.assert_array_equal(got, _stress_reference(ndvi, evi, group))
    assert got.any() and not got[:, :8].any()


@pytest.fixture(scope="module")
def small_blocks() -> object:
    return generate_blocks(7, num_blocks=400, num_tractors=60, weeks=20)


def test_generator_fleet_follows_tables_1_and_12(small_blocks) -> None:  # type: ignore[no-untyped-def]
    fb = small_blocks
    farms_in = [np.unique(fb.farm[fb.region == r]).size for r in range(3)]
    assert farms_in == list(FARMS_PER_REGION)
    assert np.unique(fb.tractor).size == 60
    # each tractor works on one farm only (level a of the two-level partition)
    for t in np.unique(fb.tractor):
        assert np.unique(fb.farm[fb.tractor == t]).size == 1
    assert set(np.unique(fb.link_profile)) <= {0, 1, 2}


def test_generator_is_seeded() -> None:
    a = generate_blocks(1, num_blocks=120, num_tractors=40, weeks=12)
    b = generate_blocks(1, num_blocks=120, num_tractors=40, weeks=12)
    c = generate_blocks(2, num_blocks=120, num_tractors=40, weeks=12)
    np.testing.assert_array_equal(a.weekly["ndvi"], b.weekly["ndvi"])
    np.testing.assert_array_equal(a.tractor, b.tractor)
    assert not np.array_equal(a.weekly["ndvi"], c.weekly["ndvi"])


def test_two_level_tractors_split_a_farm_by_crop_and_soil() -> None:
    farm = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    crop = np.array([1, 0, 1, 0, 2, 0, 0, 0])
    texture = np.array([0, 1, 0, 0, 0, 1, 0, 0])
    got = two_level_tractors(farm, crop, texture, np.array([3, 1]))
    # farm 0 ordered by (crop, texture, index): 3, 1, 5, 0, 2, 4 -> runs [3, 1], [5, 0],
    # [2, 4] for its tractors 0, 1, 2; farm 1's blocks go to its one tractor, 3
    assert got.tolist() == [1, 0, 2, 0, 2, 1, 3, 3]


def test_largest_remainder_sums_exactly() -> None:
    assert largest_remainder(np.array([1.0, 1.0, 1.0]), 10).tolist() == [4, 3, 3]
    assert largest_remainder(np.array([0.2, 0.5, 0.3]), 7).sum() == 7


def test_samples_have_the_tasks_shapes_and_labels(small_blocks) -> None:  # type: ignore[no-untyped-def]
    fb = small_blocks
    a, b = task_a_samples(fb), task_b_samples(fb)
    assert a.features.shape == (400 * 18, 48) and b.features.shape == (400 * 12, 52)
    assert np.isfinite(a.features).all() and np.isfinite(b.features).all()
    assert 0.02 < b.target.mean() < 0.5
    np.testing.assert_array_equal(a.target, np.repeat(nutrient_target(fb), 18).astype(np.float32))
    # lags: ndvi_t1 of week t is ndvi_t of week t-1 of the same block
    col = TASK_B_FEATURES.index
    same = b.block[1:] == b.block[:-1]
    np.testing.assert_array_equal(
        b.features[1:, col("ndvi_t1")][same], b.features[:-1, col("ndvi_t")][same]
    )


def test_nutrient_target_is_zero_for_soybean(small_blocks) -> None:  # type: ignore[no-untyped-def]
    y = nutrient_target(small_blocks)
    assert (y[small_blocks.crop == 1] == 0).all() and (y[small_blocks.crop == 0] > 0).mean() > 0.8


def test_dataset_metadata_gives_one_client_per_tractor() -> None:
    params = SyntheticAgriParams(task="stress", num_blocks=300, num_tractors=50, weeks=12)
    ds = build_synthetic_agri(params, cache_dir=None)  # type: ignore[arg-type]
    assert ds.target_kind == "binary" and ds.inputs.shape[1] == 52
    assert {"farm", "tractor", "region", "crop", "soil", "climate"} <= set(ds.metadata)
    fn = PARTITIONERS.build("group", {"key": "tractor"})
    part = make_partition(
        fn, ds.targets.numpy(), ds.metadata, 50, 2, np.random.default_rng(0), kind="binary"
    )
    owners = [np.unique(ds.metadata["tractor"][idx]) for idx in part.indices]
    assert all(o.size == 1 for o in owners) and len({int(o[0]) for o in owners}) == 50


def test_dataset_refuses_fewer_tractors_than_farms() -> None:
    params = SyntheticAgriParams(task="nutrient", num_tractors=20)
    with pytest.raises(ConfigError, match="farms \\(35\\) ≤ num_tractors \\(20\\)"):
        build_synthetic_agri(params, cache_dir=None)  # type: ignore[arg-type]


@pytest.mark.slow
def test_default_sizes_match_table_1() -> None:
    fb = generate_blocks(0)
    assert np.unique(fb.tractor).size == 120 and np.unique(fb.farm).size == 35
    assert task_a_samples(fb).features.shape == (124_032, 48)
    assert task_b_samples(fb).features.shape == (93_024, 52)
