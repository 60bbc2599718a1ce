"""Targets of every kind through ArrayDataset: validation, label attribute, tabular inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofl.config.schema import SplitConfig
from geofl.data.base import ArrayDataset
from geofl.data.splitting.split import stratified_split
from geofl.data.targets import (
    attribute_codes,
    check_targets,
    label_codes,
    label_counts,
    quantile_bins,
    rarest_present_label,
)
from geofl.errors import ConfigError, DataError, PartitionError

MULTI_HOT = np.array(
    [
        [1, 1, 0, 0],  # labels 0 (4 positives) and 1 (2) -> 1
        [1, 0, 1, 0],  # 0 (4) and 2 (2): tie at 2 -> lower index, 2
        [1, 1, 1, 0],  # 1 and 2 tie at 2 -> 1
        [1, 0, 0, 1],  # 3 has 1 positive -> 3
        [0, 0, 0, 0],  # no label -> C = 4
    ],
    dtype=np.float32,
)


def _tabular(n: int = 6, kind: str = "real") -> ArrayDataset:
    x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
    if kind == "real":
        y, classes = torch.linspace(1.0, 6.0, n), ("yield_t_ha",)
    else:
        y, classes = torch.tensor([0, 1] * (n // 2)), ("healthy", "diseased")
    meta = {"farm": np.arange(n) // 2}
    return ArrayDataset(x, y, classes, ("ndvi", "rain", "temp"), meta, "tab", kind)  # type: ignore[arg-type]


def test_rarest_present_label_by_hand() -> None:
    assert rarest_present_label(MULTI_HOT).tolist() == [1, 2, 1, 3, 4]


def test_quantile_bins_by_hand() -> None:
    # quartile edges of 1..8 are 2.75, 4.5, 6.25
    assert quantile_bins(np.arange(1.0, 9.0), 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert quantile_bins(np.array([5.0, 5.0, 5.0]), 3).tolist() == [2, 2, 2]  # ties stay together
    assert quantile_bins(np.array([3.0, 1.0]), 1).tolist() == [0, 0]


def test_label_codes_and_counts_per_kind() -> None:
    assert label_codes(np.array([2, 0, 1]), "class").tolist() == [2, 0, 1]
    assert label_codes(MULTI_HOT, "multi_hot").tolist() == [1, 2, 1, 3, 4]
    real = np.array([[4.0, 9.0], [1.0, 0.0], [3.0, 9.0], [2.0, 0.0]])
    assert label_codes(real, "real", bins=2).tolist() == [1, 0, 1, 0]  # first column
    assert label_counts(MULTI_HOT, "multi_hot", 4).tolist() == [4, 2, 2, 1]
    assert label_counts(np.array([1, 1, 0]), "binary", 2).tolist() == [1, 2]
    assert label_counts(real, "real", 3, np.array([1, 0, 1, 0])).tolist() == [2, 2, 0]


def test_attribute_codes_categories_bins_and_unknown_key() -> None:
    meta = {"farm": np.array(["b", "a", "b"]), "elev": np.array([10.0, 30.0, 20.0])}
    labels = np.array([7, 8, 9])
    assert attribute_codes("label", labels, meta, 2, field="f").tolist() == [7, 8, 9]
    assert attribute_codes("farm", labels, meta, 2, field="f").tolist() == [1, 0, 1]
    assert attribute_codes("elev", labels, meta, 2, field="f").tolist() == [0, 1, 1]
    with pytest.raises(PartitionError, match=r"^f='soil' is neither 'label' nor a metadata key"):
        attribute_codes("soil", labels, meta, 2, field="f")


@pytest.mark.parametrize(
    ("targets", "kind", "classes", "message"),
    [
        (torch.tensor([0, 3]), "class", 3, r"class targets must lie in \[0, 3\)"),
        (torch.tensor([0.0, 1.0]), "class", 3, "must be \\[2\\] int64"),
        (torch.tensor([0, 2]), "binary", 2, r"binary targets must lie in \[0, 2\)"),
        (torch.tensor([0, 1]), "binary", 3, "binary targets need 2 class names"),
        (torch.tensor([[0.0, 0.5], [1.0, 0.0]]), "multi_hot", 2, "must be 0 or 1"),
        (torch.ones(2, 3), "multi_hot", 2, r"must be \[2, 2\]"),
        (torch.tensor([1.0, float("nan")]), "real", 1, "NaN or inf"),
        (torch.ones(2, 2), "real", 1, "T = 1 target names"),
        (torch.ones(2, dtype=torch.float64), "real", 1, "must be float32"),
        (torch.tensor([0, 1]), "ordinal", 2, "target_kind 'ordinal' is unknown"),
    ],
)
def test_invalid_targets_are_refused(
    targets: torch.Tensor, kind: str, classes: int, message: str
) -> None:
    with pytest.raises(DataError, match=message):
        check_targets(targets, kind, classes, 2)  # type: ignore[arg-type]


def test_valid_targets_of_every_kind_are_accepted() -> None:
    check_targets(torch.tensor([0, 2]), "class", 3, 2)
    check_targets(torch.tensor([1, 0]), "binary", 2, 2)
    check_targets(torch.tensor([[0.0, 1.0], [1.0, 1.0]]), "multi_hot", 2, 2)
    check_targets(torch.tensor([2.5, -1.0]), "real", 1, 2)
    check_targets(torch.zeros(2, 3), "real", 3, 2)


def test_dataset_checks_inputs_bands_and_targets() -> None:
    with pytest.raises(DataError, match="inputs have 3 features but 2 band names"):
        ArrayDataset(torch.zeros(4, 3), torch.zeros(4), ("y",), ("a", "b"), target_kind="real")
    with pytest.raises(DataError, match=r"\[N, C, H, W\] images or \[N, F\] features"):
        ArrayDataset(torch.zeros(4, 1, 3), torch.zeros(4, dtype=torch.long), ("c",), ("a",))
    with pytest.raises(DataError, match="multi_hot targets must be"):
        ArrayDataset(
            torch.zeros(2, 1, 1, 1),
            torch.tensor([0, 1]),
            ("a", "b"),
            ("B",),
            target_kind="multi_hot",
        )


def test_tabular_subset_select_and_stats_keep_kind_and_targets() -> None:
    ds = _tabular()
    assert ds.is_tabular and len(ds) == 6 and ds.num_classes == 1
    sub = ds.subset(np.array([5, 0]))
    assert sub.target_kind == "real" and sub.targets.tolist() == [6.0, 1.0]
    assert sub.metadata["farm"].tolist() == [2, 0] and sub.inputs[0].tolist() == [15, 16, 17]
    sel = ds.select_bands(["temp", "ndvi"])
    assert sel.bands == ("temp", "ndvi") and sel.inputs[1].tolist() == [5.0, 3.0]
    assert sel.target_kind == "real" and torch.equal(sel.targets, ds.targets)
    with pytest.raises(
        ConfigError, match=r"data.bands: bands \['R', 'G', 'B'\] not in dataset 'tab'"
    ):
        ds.select_bands("rgb")
    mean, std = ds.input_stats()
    assert mean.shape == (1, 3) and mean.tolist() == [[7.5, 8.5, 9.5]]
    assert std[0, 0].item() == pytest.approx(np.std(np.arange(0, 18, 3), ddof=1))


def test_image_stats_match_the_per_band_formula() -> None:
    x = torch.arange(2 * 2 * 3 * 3, dtype=torch.float32).reshape(2, 2, 3, 3)
    ds = ArrayDataset(x, torch.tensor([0, 1]), ("a", "b"), ("B1", "B2"))
    mean, std = ds.input_stats()
    assert mean.shape == (1, 2, 1, 1) and mean.flatten().tolist() == [13.0, 22.0]
    assert torch.equal(std, x.std(dim=(0, 2, 3), keepdim=True))


def test_label_histogram_per_kind() -> None:
    img = torch.zeros(5, 1, 2, 2)
    mh = ArrayDataset(
        img, torch.from_numpy(MULTI_HOT), ("a", "b", "c", "d"), ("B",), target_kind="multi_hot"
    )
    assert mh.label_histogram().tolist() == [4, 2, 2, 1]
    assert mh.label_codes().tolist() == [1, 2, 1, 3, 4]
    assert _tabular(kind="binary").label_histogram().tolist() == [3, 3]
    with pytest.raises(DataError, match="real-valued targets; count label_codes"):
        _tabular().label_histogram()
    assert _tabular().label_codes(bins=3).tolist() == [0, 0, 1, 1, 2, 2]


def test_split_stratifies_on_the_label_attribute_of_real_targets() -> None:
    ds = _tabular(n=60)
    s = stratified_split(ds.label_codes(), SplitConfig(val=0.2, test=0.2), seed=0)
    codes = ds.label_codes()
    # 5 quintile bins of 12 samples: round(12 * 0.2) = 2 per bin in val and in test.
    assert np.bincount(codes[s.test]).tolist() == [2] * 5
    assert np.bincount(codes[s.val]).tolist() == [2] * 5
    assert np.bincount(codes[s.train]).tolist() == [8] * 5
