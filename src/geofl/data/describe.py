"""``geofl data describe``: dataset, split and partition tables (and heatmaps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from geofl.config.schema import ExperimentConfig
from geofl.data.split import stratified_split

__all__ = ["describe"]


def describe(cfg: ExperimentConfig, seed: int, console: Console, plot: Path | None) -> None:
    """Print the dataset summary and each method's partition; optionally plot heatmaps."""
    from geofl.engine.experiment import build_partition, load_dataset

    ds = load_dataset(cfg)
    split = stratified_split(ds.labels.numpy(), cfg.data.split, seed)
    shape = tuple(ds.images.shape[1:])
    console.print(
        f"[bold]{ds.name}[/]: {len(ds)} patches, {ds.num_classes} classes, bands "
        f"{list(ds.bands)}, patch {shape[1]}×{shape[2]}; split train/val/test = "
        f"{split.train.size}/{split.val.size}/{split.test.size} (seed {seed})"
    )
    if ds.metadata:
        console.print("metadata: " + ", ".join(sorted(ds.metadata)))
    counts = ds.label_histogram()
    table = Table(title="class counts")
    table.add_column("class")
    table.add_column("samples", justify="right")
    for name, c in zip(ds.classes, counts, strict=True):
        table.add_row(name, str(int(c)))
    console.print(table)
    for method in cfg.methods:
        part = build_partition(cfg, method, ds, split.train, seed)
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
        if plot is not None:
            from geofl.report.plots import plot_partition_heatmap

            plot.mkdir(parents=True, exist_ok=True)
            path = plot / f"partition_{method.name}.png"
            plot_partition_heatmap(
                {"classes": list(ds.classes), "histograms": part.histograms.tolist()},
                path,
                f"{method.name} (seed {seed})",
            )
            console.print(f"wrote {path}")


def _entropy(hist: np.ndarray) -> np.ndarray:
    p = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(-np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1))
