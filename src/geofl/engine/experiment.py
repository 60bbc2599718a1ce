"""The experiment driver: data once, then every (seed, method) run, then the summary.

Everything that can fail on bad input (config, dataset, split, partitions) is checked
before the run directory is created, so a failed start leaves nothing behind.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl import plugins
from geofl.client.release import is_private
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.config.validate import check_cache_mode
from geofl.data.base import ArrayDataset, standardized_view
from geofl.data.splitting.partition import PARTITIONERS, Partition, make_partition
from geofl.data.splitting.split import Split, make_split
from geofl.data.storage.cache import check_cache_dir, default_cache_dir
from geofl.data.storage.lazy import StoredRows
from geofl.data.targets import label_codes
from geofl.engine.clients.threat import check_attack_inputs
from geofl.engine.components import (
    PreparedData,
    StatsSplit,
    build_task,
    check_first_round_budget,
)
from geofl.engine.input_checks import check_model_inputs, check_release_inputs
from geofl.engine.records.export import model_spec
from geofl.engine.records.header import check_out_dir, write_header
from geofl.engine.records.provenance import Provenance
from geofl.engine.run import FederatedRun
from geofl.engine.stop import StopRequest
from geofl.engine.uplink.build import check_uplink_inputs
from geofl.errors import ConfigError
from geofl.events import ExperimentObserver, PreflightCheck, Subscriber
from geofl.io import write_json_atomic
from geofl.models.spec import MODEL_SPEC_FILE, write_model_spec
from geofl.records import TaskInfo
from geofl.rng import numpy_generator
from geofl.rundir import lock_run_dir, seed_dir

__all__ = [
    "build_partition",
    "load_dataset",
    "method_stats_split",
    "prepare_split",
    "run_experiment",
    "task_info",
]

log = logging.getLogger("geofl")


def load_dataset(cfg: ExperimentConfig) -> ArrayDataset:
    """Build (or load from cache) the configured dataset and select its bands."""
    return _build_dataset(cfg).select_bands(cfg.data.bands)


def _build_dataset(cfg: ExperimentConfig) -> ArrayDataset:
    """The configured dataset with all its bands (built, or loaded from the cache)."""
    plugins.load_all()
    cache = Path(cfg.data.cache_dir or default_cache_dir()).expanduser()
    check_cache_dir(cache)  # before any decoding
    if cfg.data.cache == "memory":  # builders from other packages need not know the mode
        return plugins.DATASETS.build(cfg.data.dataset, cfg.data.params, cache_dir=cache)
    check_cache_mode(cfg)  # as config validate does
    return plugins.DATASETS.build(
        cfg.data.dataset, cfg.data.params, cache_dir=cache, cache_mode=cfg.data.cache
    )


def method_stats_split(method: MethodConfig) -> StatsSplit:
    """The split a method's data statistics are fitted on: ``val`` for a method that
    reports an ε (:func:`~geofl.client.release.is_private`), else ``train``.

    Train statistics pool every client's raw training records — one record moves the
    mean, std and ``pos_weight: auto`` — and no DP method accounts for that release; the
    held-out validation split holds no training record, so statistics fitted on it cost
    no ε (issue 33). Non-DP methods keep the train statistics (results unchanged).
    """
    algorithm = plugins.ALGORITHMS.traits(method.algorithm.name)
    private = is_private(method.trainer.name, [r.name for r in method.release], algorithm)
    return "val" if private else "train"


def prepare_split(
    ds: ArrayDataset,
    cfg: ExperimentConfig,
    seed: int,
    split: Split | None = None,
    *,
    stats_from: StatsSplit = "train",
) -> PreparedData:
    """Global train/val/test split for ``seed`` (stratified by the label attribute of
    :mod:`geofl.data.targets`), standardised per band (per feature for tabular inputs)
    with the statistics of ``stats_from`` (train; val for DP methods:
    :func:`method_stats_split`).

    In-memory inputs are standardised in place; stored inputs (``data.cache: mmap``) get
    the same statistics (bit-identical up to ``EXACT_STATS_BYTES`` of train data, see
    :meth:`~geofl.data.storage.lazy.StoredRows.channel_mean_std`) applied per batch. Either way
    ``mean``/``std`` travel in the result (for ``model.json``).
    """
    if split is None:
        split = make_split(split_labels(ds), cfg.data.split, seed, ds.metadata)
    train, val, test = ds.subset(split.train), ds.subset(split.val), ds.subset(split.test)
    if cfg.data.normalize != "standardize":
        return PreparedData(train, val, test, stats_from=stats_from)
    source = val if stats_from == "val" else train
    if len(source) == 0:
        raise ConfigError(
            "data.split.val",
            "is empty, but a DP method fits its input statistics on the validation split "
            "(train statistics pool the clients' records outside ε); give val > 0 or set "
            "data.normalize: none",
        )
    mean, std = source.input_stats()  # one pass over a store; the views apply it per batch
    if isinstance(train.inputs, StoredRows):
        train, val, test = (standardized_view(p, mean, std) for p in (train, val, test))
        return PreparedData(train, val, test, mean, std, stats_from=stats_from)
    for part in (train, val, test):
        assert isinstance(part.inputs, torch.Tensor)
        part.inputs.sub_(mean).div_(std)
    return PreparedData(train, val, test, mean, std, stats_from=stats_from)


def build_partition(
    cfg: ExperimentConfig,
    method: MethodConfig,
    ds: ArrayDataset,
    train_index: np.ndarray,
    seed: int,
) -> Partition:
    """The method's client partition of the train split (``train_index`` into ``ds``)."""
    fn = PARTITIONERS.build(method.partition.name, method.partition.params)
    return make_partition(
        fn,
        ds.targets.numpy()[train_index],
        {k: np.asarray(v)[train_index] for k, v in ds.metadata.items()},
        cfg.federation.num_clients,
        ds.num_classes,
        numpy_generator(seed, "partition"),
        kind=ds.target_kind,
    )


def split_labels(ds: ArrayDataset) -> np.ndarray:
    """``[N]`` int64 label attribute that stratifies the split (class ids; the rarest
    present label of multi-hot targets; a quantile bin of real targets; the dominant class
    of an image's boxes)."""
    return label_codes(ds.targets.numpy(), ds.target_kind, num_classes=ds.num_classes)


def _partition_json(
    p: Partition, ds: ArrayDataset, method: MethodConfig, train_index: np.ndarray
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "classes": list(ds.histogram_columns()),  # the histogram's columns (bins for real)
        "histograms": p.histograms,
        "sizes": p.sizes,
        "partitioner": method.partition.name,
        "params": method.partition.params,
    }
    gsd = ds.metadata.get("gsd_m")
    if gsd is not None:
        out["gsd_m"] = p.client_means(np.asarray(gsd)[train_index])
    return out


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: Path,
    *,
    resume: bool = False,
    subscribers: Sequence[Subscriber] = (),
    stop: StopRequest | None = None,
    rebuild_log: bool = False,
    provenance: Provenance | None = None,
) -> Path:
    """Run every method for every seed into ``out_dir``; returns the run directory.

    The run directory is locked for the run's life (:func:`~geofl.rundir.lock_run_dir`).

    Args:
        cfg: The validated experiment.
        out_dir: The run directory.
        resume: Continue the run already in ``out_dir``.
        subscribers: Observers of every (method, seed) run.
        stop: Polled between rounds; a requested stop ends the run after a durable round.
        rebuild_log: On resume, rewrite damaged round logs from the checkpoints.
        provenance: The command line that started (or resumes) the run, for ``run.json``
            (default: a library call, no command line). Not part of the resume identity.

    Raises:
        RunDirError: if ``out_dir`` holds another run and ``resume`` is False, holds nothing
            to resume, its config differs from ``cfg`` when resuming, or another process
            holds it.
        RunStoppedError: when ``stop`` was requested.
    """
    out_dir = Path(out_dir)
    resolved = cfg.model_dump(mode="json")
    check_out_dir(out_dir, cfg, resume)
    if cfg.data.sites is not None:
        return _run_sites(
            cfg, out_dir, resolved, resume, subscribers, stop, rebuild_log, provenance
        )
    full = _build_dataset(cfg)
    ds, dataset_bands = full.select_bands(cfg.data.bands), full.bands
    del full
    # Validate the task and model against the data, then every split and partition,
    # before anything is written.
    task = task_info(cfg, ds)
    splits, partitions = _plan(cfg, ds)
    subscribers = [*subscribers, *_config_subscribers(cfg, resolved, out_dir)]
    created = not out_dir.exists()
    with lock_run_dir(out_dir):
        with _removed_on_failure(out_dir, created):
            write_header(cfg, out_dir, task, provenance or Provenance())
            _preflight(out_dir, subscribers)
            for seed in cfg.seeds:
                _run_seed(
                    cfg,
                    out_dir,
                    seed,
                    ds,
                    dataset_bands,
                    splits[seed],
                    partitions[seed],
                    subscribers,
                    resume=resume,
                    stop=stop,
                    rebuild_log=rebuild_log,
                )
        for analysis in cfg.analyses:
            plugins.ANALYSES.build(analysis.name, analysis.params)(out_dir)
    _finish(out_dir, subscribers)
    return out_dir


def _run_sites(
    cfg: ExperimentConfig,
    out_dir: Path,
    resolved: dict[str, Any],
    resume: bool,
    subscribers: Sequence[Subscriber],
    stop: StopRequest | None,
    rebuild_log: bool,
    provenance: Provenance | None,
) -> Path:
    """:func:`run_experiment` of a site-local federation (``data.sites``,
    :mod:`geofl.engine.sites`): each site's data split at the site, normalised with the
    combined band statistics, evaluated federatedly. Every site's data, the first seed's
    splits and partitions are checked before anything is written."""
    from geofl.engine.sites import SitesPlan, sites_partition_json

    sites = SitesPlan(cfg)
    first = sites.prepare(cfg.seeds[0])
    for m in cfg.methods:
        sizes = [len(ix) for ix in sites.partition(m, first, cfg.seeds[0]).indices]
        check_first_round_budget(cfg, m, sizes)
        if method_stats_split(m) == "val":  # a DP method's statistics: every site's val
            sites.prepare(cfg.seeds[0], "val")
    subscribers = [*subscribers, *_config_subscribers(cfg, resolved, out_dir)]
    created = not out_dir.exists()
    with lock_run_dir(out_dir), _removed_on_failure(out_dir, created):
        write_header(cfg, out_dir, sites.task, provenance or Provenance())
        _preflight(out_dir, subscribers)
        for seed in cfg.seeds:
            plan = first if seed == cfg.seeds[0] else sites.prepare(seed)
            for method in cfg.methods:
                sdir = seed_dir(out_dir, method.name, seed)
                if resume and (sdir / "final.json").exists():
                    continue
                stats_from = method_stats_split(method)
                if plan.data.stats_from != stats_from:
                    plan = sites.prepare(seed, stats_from)
                part = sites.partition(method, plan, seed)
                write_json_atomic(sdir / "partition.json", sites_partition_json(cfg, part))
                run = FederatedRun(cfg, method, seed, plan.data, part, sdir, subscribers)
                run.run(resume=resume, stop=stop, rebuild_log=rebuild_log)
                del run  # the next method is built without this one's model alive
    _finish(out_dir, subscribers)
    return out_dir


def _run_seed(
    cfg: ExperimentConfig,
    out_dir: Path,
    seed: int,
    ds: ArrayDataset,
    dataset_bands: Sequence[str],
    split: Split,
    partitions: dict[str, Partition],
    subscribers: Sequence[Subscriber],
    *,
    resume: bool,
    stop: StopRequest | None,
    rebuild_log: bool,
) -> None:
    """Every method's run of one seed on its split (prepared here, freed on return);
    methods already finished are skipped on resume."""
    data: PreparedData | None = None
    for method in cfg.methods:
        sdir = seed_dir(out_dir, method.name, seed)
        if resume and (sdir / "final.json").exists():
            log.info("%s seed=%d already finished; skipping", method.name, seed)
            continue
        stats_from = method_stats_split(method)
        if data is None or data.stats_from != stats_from:  # one prepared split at a time
            data = None
            data = prepare_split(ds, cfg, seed, split, stats_from=stats_from)
        part = partitions[method.name]
        _write_seed_header(sdir, cfg, method, seed, data, part, ds, dataset_bands, split)
        run = FederatedRun(cfg, method, seed, data, part, sdir, subscribers)
        run.run(resume=resume, stop=stop, rebuild_log=rebuild_log)
        del run  # the next method is built without this one's model alive (peak: one)


def _preflight(out_dir: Path, subscribers: Sequence[Subscriber]) -> None:
    """Let every subscriber that can check itself (a tracker's store) do so now, with the
    run directory in place and before any round: a tracker that cannot be written is one
    line at the start, not a traceback after minutes of retries."""
    for sub in subscribers:
        if isinstance(sub, PreflightCheck):
            sub.preflight(out_dir)


@contextmanager
def _removed_on_failure(out_dir: Path, created: bool) -> Iterator[None]:
    """On any exception (a stop request included), delete a run directory this call
    ``created`` unless some run in it has a checkpoint to resume from; then re-raise."""
    try:
        yield
    except BaseException:
        if created and not any((out_dir / "methods").glob("*/*/checkpoint.pt")):
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _finish(out_dir: Path, subscribers: Sequence[Subscriber]) -> None:
    """Write the run's summary, then tell the experiment observers the run has ended."""
    from geofl.report import write_summary

    write_summary(out_dir)
    for sub in subscribers:
        if isinstance(sub, ExperimentObserver):
            sub.on_experiment_end(out_dir)


def _write_seed_header(
    sdir: Path,
    cfg: ExperimentConfig,
    method: MethodConfig,
    seed: int,
    data: PreparedData,
    part: Partition,
    ds: ArrayDataset,
    dataset_bands: Sequence[str],
    split: Split,
) -> None:
    """A (method, seed) directory's ``partition.json`` and model spec (what inference and
    audits need), written before its first round. ``partition.json`` also records which
    split the data statistics were fitted on (``data_statistics``: ``train`` pooled over
    the clients, or ``val`` held out for a DP method)."""
    doc = {**_partition_json(part, ds, method, split.train), "data_statistics": data.stats_from}
    write_json_atomic(sdir / "partition.json", doc)
    write_model_spec(sdir / MODEL_SPEC_FILE, model_spec(cfg, method, seed, data, dataset_bands))


def _plan(
    cfg: ExperimentConfig, ds: ArrayDataset
) -> tuple[dict[int, Split], dict[int, dict[str, Partition]]]:
    """Every seed's split and every (seed, method)'s partition, checked against the first
    round's budget: everything that can fail on the data, before anything is written."""
    labels = split_labels(ds)
    splits = {seed: make_split(labels, cfg.data.split, seed, ds.metadata) for seed in cfg.seeds}
    if ds.target_kind in ("class", "binary"):
        _warn_degenerate(labels[splits[cfg.seeds[0]].train], ds.classes)
    partitions: dict[int, dict[str, Partition]] = {
        seed: {m.name: build_partition(cfg, m, ds, splits[seed].train, seed) for m in cfg.methods}
        for seed in cfg.seeds
    }
    for seed_parts in partitions.values():
        for m in cfg.methods:
            sizes = [len(ix) for ix in seed_parts[m.name].indices]
            check_first_round_budget(cfg, m, sizes)
    return splits, partitions


def _config_subscribers(
    cfg: ExperimentConfig, resolved: dict[str, Any], out_dir: Path
) -> list[Subscriber]:
    """The subscribers the config asks for: governance (000 §3.5) and tracking (MLflow,
    TensorBoard). Built before the run directory exists, so a missing library or a bad
    ledger backend leaves nothing behind."""
    subs: list[Subscriber] = []
    if cfg.governance is not None:
        subs.append(plugins.SUBSCRIBERS.build("governance", cfg.governance, experiment=resolved))
    if cfg.tracking is not None and (cfg.tracking.mlflow or cfg.tracking.tensorboard):
        tracking = cfg.tracking.model_dump()
        subs.append(
            plugins.SUBSCRIBERS.build("tracking", tracking, experiment=resolved, run_dir=out_dir)
        )
    return subs


def task_info(cfg: ExperimentConfig, ds: ArrayDataset) -> TaskInfo:
    """Check that the task fits the dataset's targets and the model its inputs; what the
    reports need to know of the task.

    The task is built on the whole dataset's targets here only to check them (each seed's
    run builds its own from its train split).

    Raises:
        ConfigError: naming ``task.name`` or ``model.name`` (one line, exit 2 in the CLI).
    """
    check_model_inputs(cfg, ds)
    check_release_inputs(cfg, ds)
    check_uplink_inputs(cfg, ds)
    check_attack_inputs(cfg, ds, cfg.seeds[0])
    task = build_task(cfg, ds.num_classes, ds.targets)
    return TaskInfo(task.name, task.primary_metric, task.direction)


def _warn_degenerate(train_labels: np.ndarray, classes: Sequence[str]) -> None:
    """Warn when the training split cannot teach a classifier much."""
    present = np.unique(train_labels)
    if present.size < 2:
        log.warning(
            "the training split holds a single class (%s): accuracy is trivially 1 and "
            "nothing is learned; check the dataset",
            classes[int(present[0])] if present.size else "none",
        )
    elif present.size < len(classes):
        missing = sorted(set(range(len(classes))) - {int(c) for c in present})
        log.warning(
            "classes %s have no training samples; they can never be predicted",
            [classes[i] for i in missing],
        )
