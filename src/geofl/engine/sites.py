"""Site-local data (``data.sites``): every site loads, splits and partitions its own data.

A cross-silo federation in which each institution keeps its data. For site ``s`` (its
entry ``data.sites.<i>``):

* **Data** — the site builds its dataset from its own definition (any registered dataset:
  an ImageFolder/EuroSAT/UC-Merced folder, a ``.npz``, the synthetic generator with the
  site's own seed) and selects ``data.bands``; nobody else loads it.
* **Split** — train/val/test by ``data.split`` with the site's own generator, seeded by
  :func:`site_seed` (seed, ``"site"``, name): a site's split depends on its data, the run's
  seed and its name only.
* **Clients** — ``clients`` clients on its train split (the method's partitioner with
  generator (seed, ``"partition"``, ``"site"``, name)); client ids run site by site in
  config order.
* **Normalisation** — the site computes per-band sufficient statistics of its raw train
  split (:class:`BandStats`); the server combines them in site order into the global mean
  and std (:func:`combine_band_stats`), which every site applies to its splits
  (:func:`normalised`). What a site discloses by them: :mod:`geofl.engine.site_reports.band_stats`.
* **Evaluation** — federated over the sites' own val/test splits
  (:mod:`geofl.engine.site_reports.evaluation`); no central test set exists.

The simulator (:class:`SitesPlan`) and a deployment's sites (:mod:`geofl.deploy.sitedata`)
call the same functions, so the deployment's global model equals the simulator's.

Sites must agree on what they hold (:class:`DataSchema`: bands, classes, target kind and
shape, sample shape; :mod:`geofl.engine.site_reports.schema`); a task that fits statistics on the
train split (regression's target standardisation, ``pos_weight: auto``) is refused, since
each site would fit its own. The schema's and the statistics' names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl import plugins
from geofl.config.schema import ExperimentConfig, MethodConfig, SiteDataConfig
from geofl.data.base import ArrayDataset
from geofl.data.splitting.partition import PARTITIONERS, Partition, make_partition
from geofl.data.splitting.split import make_split
from geofl.data.storage.cache import check_cache_dir, default_cache_dir
from geofl.data.targets import label_codes
from geofl.engine.components import (
    PreparedData,
    StatsSplit,
    build_task,
    check_model_inputs,
    check_release_inputs,
)
from geofl.engine.site_reports.band_stats import (
    STATS_CHUNK,
    BandStats,
    band_stats,
    combine_band_stats,
)
from geofl.engine.site_reports.evaluation import SiteHeldOut
from geofl.engine.site_reports.schema import DataSchema, check_schemas, empty_dataset
from geofl.errors import ConfigError, GeoflError
from geofl.records import TaskInfo
from geofl.rng import derive_seed, numpy_generator

__all__ = [
    "STATS_CHUNK",
    "BandStats",
    "DataSchema",
    "SitePlan",
    "SiteSplit",
    "SitesPlan",
    "band_stats",
    "check_schemas",
    "check_site_data",
    "client_offsets",
    "combine_band_stats",
    "empty_dataset",
    "load_site",
    "normalised",
    "site_partition",
    "site_seed",
    "site_stats_inputs",
    "sites_partition_json",
    "split_site",
]


def site_seed(seed: int, name: str) -> int:
    """The seed of site ``name``'s own split: (seed, ``"site"``, name)."""
    return derive_seed(seed, "site", name)


def _site_error(err: ConfigError, i: int, name: str) -> ConfigError:
    """``err`` of a site's dataset, re-rooted at ``data.sites.<i>`` and naming the site."""
    root = f"data.sites.{i}"
    path = err.path.replace("data.params", f"{root}.params").replace("data.dataset", root)
    msg = err.message.replace("data.params", f"{root}.params")
    return ConfigError(path, f"site {name}: {msg}")


def load_site(cfg: ExperimentConfig, i: int, spec: SiteDataConfig | None = None) -> ArrayDataset:
    """Site ``i``'s dataset (``spec``: its own definition, default the config's entry),
    ``data.bands`` selected.

    Raises:
        ConfigError: one line naming ``data.sites.<i>…`` and the site: no dataset named,
            missing files, bands it lacks, an unknown dataset or bad parameters.
    """
    entry = (cfg.data.sites or [])[i]
    spec = entry if spec is None else spec
    root = f"data.sites.{i}"
    if spec.dataset is None:
        raise ConfigError(
            f"{root}.dataset",
            f"site {entry.name}: no dataset named; give it in the config or in the site's "
            "node config data=<file>",
        )
    plugins.load_all()
    cache = Path(cfg.data.cache_dir or default_cache_dir()).expanduser()
    check_cache_dir(cache)
    try:
        plugins.DATASETS.entry(spec.dataset, path=f"{root}.dataset")
        ds = plugins.DATASETS.build(spec.dataset, spec.params, cache_dir=cache)
        return ds.select_bands(cfg.data.bands)
    except ConfigError as err:
        raise _site_error(err, i, entry.name) from None
    except GeoflError as err:
        msg = str(err).replace("data.params", f"{root}.params")
        raise ConfigError(f"{root}.params", f"site {entry.name}: {msg}") from None


def check_site_data(cfg: ExperimentConfig, ds: ArrayDataset, name: str) -> TaskInfo:
    """Check site ``name``'s data against the model and task (as
    :func:`~geofl.engine.experiment.task_info` does for a shared dataset) and refuse a
    task that fits statistics on the train split; what the reports need of the task.

    Raises:
        ConfigError: naming ``model.name``, ``task.name`` or ``task.params``, and the site.
    """
    try:
        check_model_inputs(cfg, ds)
        check_release_inputs(cfg, ds)
        task = build_task(cfg, ds.num_classes, ds.targets)
    except ConfigError as err:
        raise ConfigError(err.path, f"site {name}: {err.message}") from None
    if task.fitted_state() or cfg.task.params.get("pos_weight") == "auto":
        raise ConfigError(
            "task.params",
            f"site {name}: the {task.name} task fits statistics on the train split, which "
            "with data.sites every site would fit on its own; set fixed values (e.g. "
            "pos_weight: none or a number, no target standardisation)",
        )
    return TaskInfo(task.name, task.primary_metric, task.direction)


@dataclass(frozen=True)
class SiteSplit:
    """One site's train/val/test split (raw, or normalised by :func:`normalised`)."""

    name: str
    train: ArrayDataset
    val: ArrayDataset
    test: ArrayDataset


def split_site(cfg: ExperimentConfig, i: int, ds: ArrayDataset, seed: int) -> SiteSplit:
    """Site ``i``'s split of its own ``ds`` by ``data.split`` with its generator
    (:func:`site_seed`).

    Raises:
        ConfigError: naming the site when its data is too small to split.
    """
    name = (cfg.data.sites or [])[i].name
    labels = label_codes(ds.targets.numpy(), ds.target_kind, num_classes=ds.num_classes)
    try:
        s = make_split(labels, cfg.data.split, site_seed(seed, name), ds.metadata)
    except ConfigError as err:
        raise ConfigError(err.path, f"site {name}: {err.message}") from None
    return SiteSplit(name, ds.subset(s.train), ds.subset(s.val), ds.subset(s.test))


def site_stats_inputs(split: SiteSplit, stats_from: StatsSplit) -> torch.Tensor:
    """The inputs a site's band statistics (Σx, Σx², sent to the server) are taken from:
    its train split, or for a DP method its held-out val split, so that the released sums
    hold no training record outside the clients' ε (issue 33).

    Raises:
        ConfigError: naming ``data.split.val`` when a DP method's site has no val split.
    """
    part = split.val if stats_from == "val" else split.train
    if stats_from == "val" and len(part) == 0:
        raise ConfigError(
            "data.split.val",
            f"site {split.name} has no validation records, but a DP method fits its input "
            "statistics on them (train statistics are outside ε); give val > 0 or set "
            "data.normalize: none",
        )
    assert isinstance(part.inputs, torch.Tensor)  # data.sites needs cache: memory
    return part.inputs


def normalised(split: SiteSplit, mean: torch.Tensor, std: torch.Tensor) -> SiteSplit:
    """``split`` with every part standardised by the global ``mean``/``std`` (copies)."""
    parts = []
    for p in (split.train, split.val, split.test):
        assert isinstance(p.inputs, torch.Tensor)  # data.sites needs cache: memory
        parts.append(replace(p, inputs=p.inputs.clone().sub_(mean).div_(std)))
    return SiteSplit(split.name, *parts)


def site_partition(
    cfg: ExperimentConfig, method: MethodConfig, i: int, train: ArrayDataset, seed: int
) -> Partition:
    """Site ``i``'s clients on its train split (``data.sites.<i>.clients`` of them)."""
    site = (cfg.data.sites or [])[i]
    fn = PARTITIONERS.build(method.partition.name, method.partition.params)
    return make_partition(
        fn,
        train.targets.numpy(),
        dict(train.metadata),
        site.clients,
        train.num_classes,
        numpy_generator(seed, "partition", "site", site.name),
        kind=train.target_kind,
    )


def client_offsets(cfg: ExperimentConfig) -> list[int]:
    """The first client id of every site (clients are numbered site by site)."""
    out, k = [], 0
    for s in cfg.data.sites or []:
        out.append(k)
        k += s.clients
    return out


@dataclass(frozen=True)
class SitePlan:
    """One seed of a simulated site-local federation."""

    data: PreparedData
    splits: tuple[SiteSplit, ...]


class SitesPlan:
    """The simulator's side of ``data.sites``: every site's data, loaded and checked.

    Args:
        cfg: The experiment (with ``data.sites``).

    Raises:
        ConfigError: a site's data cannot be loaded, does not fit the task or model, or
            the sites disagree (:func:`check_schemas`).
    """

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg
        sites = cfg.data.sites or []
        self.datasets = [load_site(cfg, i) for i in range(len(sites))]
        for site, ds in zip(sites, self.datasets, strict=True):
            self.task = check_site_data(cfg, ds, site.name)
        check_schemas([s.name for s in sites], [DataSchema.of(d) for d in self.datasets])

    def prepare(self, seed: int, stats_from: StatsSplit = "train") -> SitePlan:
        """Every site's split of ``seed``, normalised with the combined statistics of each
        site's ``stats_from`` split (val for a DP method: :func:`site_stats_inputs`)."""
        cfg = self.cfg
        splits = [split_site(cfg, i, ds, seed) for i, ds in enumerate(self.datasets)]
        mean = std = None
        if cfg.data.normalize == "standardize":
            stats = [band_stats(site_stats_inputs(s, stats_from)) for s in splits]
            mean, std = combine_band_stats(stats, splits[0].train.inputs.ndim)
            splits = [normalised(s, mean, std) for s in splits]
        data = PreparedData(
            _join([s.train for s in splits]),
            _join([s.val for s in splits]),
            _join([s.test for s in splits]),
            mean,
            std,
            tuple(SiteHeldOut(s.name, s.val, s.test) for s in splits),
            stats_from,
        )
        return SitePlan(data, tuple(splits))

    def partition(self, method: MethodConfig, plan: SitePlan, seed: int) -> Partition:
        """Every site's clients, numbered site by site, as one partition of the joined
        train split."""
        parts, offset, indices = [], 0, []
        for i, s in enumerate(plan.splits):
            p = site_partition(self.cfg, method, i, s.train, seed)
            parts.append(p)
            indices += [np.asarray(ix, dtype=np.int64) + offset for ix in p.indices]
            offset += len(s.train)
        return Partition(tuple(indices), np.concatenate([p.histograms for p in parts]))


def sites_partition_json(cfg: ExperimentConfig, part: Partition) -> dict[str, Any]:
    """``partition.json`` of a simulated site-local run: the sites with their client
    counts, every client's train size and label histogram (the simulator sees all; a
    deployment's server writes no partition.json)."""
    sites = cfg.data.sites or []
    return {
        "sites": [{"name": s.name, "clients": s.clients} for s in sites],
        "histograms": part.histograms,
        "sizes": part.sizes,
    }


def _join(parts: Sequence[ArrayDataset]) -> ArrayDataset:
    """The sites' splits one after another (metadata keys every site has)."""
    keys = set.intersection(*(set(p.metadata) for p in parts))
    meta = {k: np.concatenate([np.asarray(p.metadata[k]) for p in parts]) for k in sorted(keys)}
    inputs = torch.cat([p.inputs for p in parts])  # type: ignore[misc]
    return replace(
        parts[0],
        inputs=inputs,
        targets=torch.cat([p.targets for p in parts]),
        metadata=meta,
        name="sites",
    )
