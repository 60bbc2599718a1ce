"""What ``geofl data describe`` prints: dataset, split and partition tables (and heatmaps).

It lives in the CLI, not in :mod:`geofl.data`, because it builds the dataset and the
partitions the way a run does (through the engine) and plots through the report package;
the data package stays below both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.table import Table

from geofl.data.split import stratified_split
from geofl.engine.experiment import build_partition, load_dataset

if TYPE_CHECKING:
    from geofl.config.schema import ExperimentConfig, MethodConfig
    from geofl.data.base import ArrayDataset
    from geofl.data.partition import Partition

__all__ = ["describe"]


def describe(cfg: ExperimentConfig, seed: int, console: Console, plot: Path | None) -> None:
    """Print the dataset summary and each method's partition; optionally plot heatmaps.

    Args:
        cfg: Experiment whose dataset and methods to describe.
        seed: Seed of the global split and the partitions.
        console: Where the tables go.
        plot: Folder for one ``partition_<method>.png`` heatmap per method, or None.
    """
    ds = load_dataset(cfg)
    split = stratified_split(ds.targets.numpy(), cfg.data.split, seed)
    shape = tuple(ds.inputs.shape[1:])
    console.print(
        f"[bold]{ds.name}[/]: {len(ds)} patches, {ds.num_classes} classes, bands "
        f"{list(ds.bands)}, patch {shape[1]}×{shape[2]}; split train/val/test = "
        f"{split.train.size}/{split.val.size}/{split.test.size} (seed {seed})"
    )
    if ds.metadata:
        console.print("metadata: " + ", ".join(sorted(ds.metadata)))
    table = Table(title="class counts")
    table.add_column("class")
    table.add_column("samples", justify="right")
    for name, c in zip(ds.classes, ds.label_histogram(), strict=True):
        table.add_row(name, str(int(c)))
    console.print(table)
    for method in cfg.methods:
        part = build_partition(cfg, method, ds, split.train, seed)
        _print_partition(console, method, ds, part)
        if plot is not None:
            _plot_partition(console, method, ds, part, plot / f"partition_{method.name}.png", seed)


def _print_partition(
    console: Console, method: MethodConfig, ds: ArrayDataset, part: Partition
) -> None:
    """One method's samples per class × client table and label entropy per client."""
    t = Table(
        title=f"{method.name}: {method.partition.name} partition "
        f"{method.partition.params} (samples per class × client)"
    )
    t.add_column("class")
    for k in range(part.num_clients):
        t.add_column(str(k), justify="right")
    for name, col in zip(ds.classes, part.histograms.T, strict=True):
        t.add_row(name[:14], *(str(int(x)) for x in col))
    t.add_row("[bold]total", *(f"[bold]{int(n)}" for n in part.sizes))
    console.print(t)
    ent = _entropy(part.histograms)
    console.print(f"label entropy per client (nats): {np.round(ent, 2).tolist()}")


def _plot_partition(
    console: Console,
    method: MethodConfig,
    ds: ArrayDataset,
    part: Partition,
    path: Path,
    seed: int,
) -> None:
    """Write one method's clients × classes heatmap to ``path``."""
    from geofl.report.plots import plot_partition_heatmap

    path.parent.mkdir(parents=True, exist_ok=True)
    plot_partition_heatmap(
        {"classes": list(ds.classes), "histograms": part.histograms.tolist()},
        path,
        f"{method.name} (seed {seed})",
    )
    console.print(f"wrote {path}")


def _entropy(hist: np.ndarray) -> np.ndarray:
    """Label entropy (nats) of each row of a clients × classes histogram."""
    p = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(-np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1))
