"""Datasets of paper 003's two tasks: ``synthetic_agri`` (seeded) and ``agri_files`` (real).

Both produce one row per (field block, week) through the same §3.1.1 pipeline
(:mod:`geofl.data.agri.pipeline`): ``task: nutrient`` is Task A (48 features → in-season N
rate, kg N/ha, ``real``), ``task: stress`` is Task B (52 features → crop stress 0/1,
``binary``). Every row carries the metadata ``farm``, ``tractor``, ``region``, ``crop``,
``soil`` (texture class), ``climate``, ``block``, ``week`` and ``link_profile``, so
``partition: {name: group, key: tractor}`` with 120 clients gives 003 §3.1.1's two-level
farm → tractor partition (clients = tractors) and ``eval.group_by: region`` the per-region
metrics of 003 Table 12. ``synthetic_agri`` with a ``geography`` other than ``paper3`` also
carries each row's region centre (``region_lat``, ``region_lon``), from which the
hierarchy's fleet places the farms (:func:`~geofl.hierarchy.geography.region_centres_of`);
``paper3`` rows carry none, and the fleet uses 003's three centres.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal, Self

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from geofl.data.agri.catalog import (
    FARMS_PER_REGION,
    GEOGRAPHIES,
    AgroRegion,
    geography_regions,
)
from geofl.data.agri.harder import RuleThresholds, flip_labels, regional_thresholds
from geofl.data.agri.pipeline import task_a_samples, task_b_samples
from geofl.data.agri.synthetic import generate_blocks
from geofl.data.agri.tables import FieldBlocks
from geofl.data.base import DATASETS, ArrayDataset
from geofl.errors import ConfigError

__all__ = ["SyntheticAgriParams", "blocks_to_dataset", "build_synthetic_agri"]

AgriTask = Literal["nutrient", "stress"]


def blocks_to_dataset(
    blocks: FieldBlocks, task: AgriTask, name: str, rule: RuleThresholds | None = None
) -> ArrayDataset:
    """Run the §3.1.1 feature and label construction for ``task`` over ``blocks``.

    ``rule`` gives Task B's per-block thresholds (:mod:`geofl.data.agri.harder`); None is
    the paper's rule.
    """
    if task == "nutrient":
        samples = task_a_samples(blocks)
    elif rule is None:
        samples = task_b_samples(blocks)
    else:
        samples = task_b_samples(blocks, k_sigma=rule.k_sigma, evi_margin=rule.evi_margin)
    b = samples.block
    meta = {
        "farm": np.asarray(blocks.farm)[b],
        "tractor": np.asarray(blocks.tractor)[b],
        "region": np.asarray(blocks.region)[b],
        "crop": np.asarray(blocks.crop)[b],
        "soil": blocks.texture[b],
        "climate": np.asarray(blocks.climate)[b],
        "block": b.astype(np.int64),
        "week": samples.week.astype(np.int64),
        "link_profile": np.asarray(blocks.link_profile)[b],
    }
    if task == "nutrient":
        return ArrayDataset(
            inputs=torch.from_numpy(samples.features),
            targets=torch.from_numpy(samples.target),
            classes=("n_rate_kg_ha",),
            bands=samples.names,
            metadata=meta,
            name=name,
            target_kind="real",
        )
    return ArrayDataset(
        inputs=torch.from_numpy(samples.features),
        targets=torch.from_numpy(samples.target),
        classes=("healthy", "stressed"),
        bands=samples.names,
        metadata=meta,
        name=name,
        target_kind="binary",
    )


class SyntheticAgriParams(BaseModel):
    """Parameters of ``synthetic_agri`` (defaults: 003 Table 1's fleet and sizes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: AgriTask = Field(..., description="nutrient (Task A) or stress (Task B)")
    seed: int = Field(0, description="seed of all random draws")
    num_blocks: int = Field(5168, ge=1, description="field blocks (rows = blocks × weeks)")
    num_tractors: int = Field(120, ge=1, description="tractors (clients), ≥ farms")
    farms_per_region: list[int] = Field(
        default_factory=lambda: list(FARMS_PER_REGION),
        min_length=1,
        max_length=max(len(g) for g in GEOGRAPHIES.values()),
        description="farms in each region (003 Table 12: 14, 13, 8); one entry per region "
        "of the geography used",
    )
    geography: Literal["paper3", "world"] = Field(
        "paper3",
        description="where the regions lie: paper3 = 003's Ames IA / Salina KS / Limon CO "
        "(one LEO footprint); world = up to 13 agro-climatic regions on six continents, "
        "≥ 3,600 km apart so that no LEO pass covers two",
    )
    weeks: int = Field(26, ge=10, le=52, description="weeks of the season")
    acquisitions: int = Field(2, ge=1, le=7, description="imagery acquisitions per week")
    cloud_rate: float = Field(0.3, ge=0, lt=1, description="share of cloudy acquisitions")
    cloud_max: float = Field(0.2, ge=0, le=1, description="cloud mask: largest usable fraction")
    stress_scale: float = Field(
        1.0, gt=0, description="multiplier of the stress-event odds (< 1: rarer stress)"
    )
    regional_shift: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Task B: regional drift s of the stress rule's thresholds, k_r = "
        "1.0(1 + s c_r), m_r = 0.08(1 + s c_r), c_r over [-1, 1] by region (003 §4.5 label "
        "drift); 0 = the paper's rule",
    )
    label_noise: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="Task B: probability that a label is flipped (cloud residue in the "
        "composites the rule reads, 003 §3.1.1); 0 = none",
    )

    @model_validator(mode="after")
    def _regions_in_geography(self) -> Self:
        if any(f < 1 for f in self.farms_per_region):
            raise ValueError(
                f"farms_per_region {self.farms_per_region}: every region needs ≥ 1 farm"
            )
        geography_regions(self.geography, len(self.farms_per_region))  # ValueError: too many
        if self.task == "nutrient" and (self.regional_shift or self.label_noise):
            raise ValueError(
                "regional_shift and label_noise change Task B's labels: drop them for task nutrient"
            )
        return self


@DATASETS.register("synthetic_agri", params=SyntheticAgriParams)
def build_synthetic_agri(params: SyntheticAgriParams, *, cache_dir: Path) -> ArrayDataset:
    """Paper 003's Task A / Task B rows from seeded farms, tractors and field blocks.

    Args:
        params: Dataset parameters.
        cache_dir: Unused (the default size generates in about a second).
    """
    farms = sum(params.farms_per_region)
    if params.num_tractors < farms or params.num_blocks < params.num_tractors:
        raise ConfigError(
            "data.params",
            f"need farms ({farms}) ≤ num_tractors ({params.num_tractors}) ≤ num_blocks "
            f"({params.num_blocks}): every farm has a tractor and every tractor a block",
        )
    blocks = generate_blocks(
        params.seed,
        num_blocks=params.num_blocks,
        num_tractors=params.num_tractors,
        farms_per_region=tuple(params.farms_per_region),
        weeks=params.weeks,
        acquisitions=params.acquisitions,
        cloud_rate=params.cloud_rate,
        cloud_max=params.cloud_max,
        stress_scale=params.stress_scale,
        geography=params.geography,
    )
    data = _task_dataset(blocks, params)
    if params.geography == "paper3":
        return data
    return _with_region_centres(
        data, geography_regions(params.geography, len(params.farms_per_region))
    )


def _task_dataset(blocks: FieldBlocks, params: SyntheticAgriParams) -> ArrayDataset:
    """The task's rows, with Task B's regional drift and label noise when asked for."""
    name = f"synthetic_agri_{params.task}"
    if params.task == "nutrient" or (params.regional_shift == 0 and params.label_noise == 0):
        return blocks_to_dataset(blocks, params.task, name)
    regions = len(params.farms_per_region)
    rule = regional_thresholds(np.asarray(blocks.region), regions, params.regional_shift)
    data = blocks_to_dataset(blocks, params.task, name, rule)
    noisy = flip_labels(np.asarray(data.targets), params.label_noise, params.seed)
    return replace(data, targets=torch.from_numpy(noisy))


def _with_region_centres(data: ArrayDataset, regions: tuple[AgroRegion, ...]) -> ArrayDataset:
    """``data`` with per-row ``region_lat`` / ``region_lon`` (the row's region centre)."""
    region = np.asarray(data.metadata["region"], dtype=np.int64)
    lat = np.array([r.lat for r in regions])[region]
    lon = np.array([r.lon for r in regions])[region]
    meta = {**data.metadata, "region_lat": lat, "region_lon": lon}
    return replace(data, metadata=meta)
