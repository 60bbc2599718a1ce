"""What ``geofl data describe`` prints: dataset, split and partition tables (and heatmaps).

It lives in the CLI, not in :mod:`geofl.data`, because it builds the dataset and the
partitions the way a run does (through the engine) and plots through the report package;
the data package stays below both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.table import Table

from geofl.data.splitting.split import make_split
from geofl.engine.experiment import build_partition, load_dataset
from geofl.report.fragments import partition_figure_name, partition_text

if TYPE_CHECKING:
    from geofl.config.schema import ExperimentConfig, MethodConfig
    from geofl.data.base import ArrayDataset
    from geofl.data.splitting.partition import Partition

__all__ = ["describe"]


def describe(cfg: ExperimentConfig, seed: int, console: Console, plot: Path | None) -> None:
    """Print the dataset summary and each method's partition; optionally plot heatmaps.

    Args:
        cfg: Experiment whose dataset and methods to describe.
        seed: Seed of the global split and the partitions.
        console: Where the tables go.
        plot: Folder for one heatmap per method, or None; named as in the HTML report
            (``partition-<index>-<method>.png``, :func:`partition_figure_name`).
    """
    if cfg.data.sites is not None:
        _describe_sites(cfg, seed, console)
        return
    ds = load_dataset(cfg)
    split = make_split(ds.label_codes(), cfg.data.split, seed, ds.metadata)
    shape = tuple(ds.inputs.shape[1:])
    what = (
        f"{shape[0]} features {list(ds.bands)}"
        if ds.is_tabular
        else f"bands {list(ds.bands)}, patch {shape[1]}×{shape[2]}"
    )
    console.print(
        f"[bold]{ds.name}[/]: {len(ds)} {'samples' if ds.is_tabular else 'patches'}, "
        f"{ds.num_classes} {_TARGET_NOUN[ds.target_kind]}, {what}; split train/val/test = "
        f"{split.train.size}/{split.val.size}/{split.test.size} (seed {seed})"
    )
    if ds.metadata:
        console.print("metadata: " + ", ".join(sorted(ds.metadata)))
    console.print(_target_table(ds))
    for i, method in enumerate(cfg.methods):
        part = build_partition(cfg, method, ds, split.train, seed)
        _print_partition(console, method, ds, part)
        if plot is not None:
            path = plot / partition_figure_name(i, method.name)
            _plot_partition(console, method, ds, part, path, seed)


def _describe_sites(cfg: ExperimentConfig, seed: int, console: Console) -> None:
    """One line per site of site-local data (``data.sites``): its samples and its own
    split (the data of every site must be reachable from here)."""
    from geofl.engine.sites import load_site, split_site

    for i, site in enumerate(cfg.data.sites or []):
        ds = load_site(cfg, i)
        s = split_site(cfg, i, ds, seed)
        console.print(
            f"[bold]site {site.name}[/] ({ds.name}): {len(ds)} samples, bands "
            f"{list(ds.bands)}, {ds.num_classes} {_TARGET_NOUN[ds.target_kind]}; its split "
            f"train/val/test = {len(s.train)}/{len(s.val)}/{len(s.test)} (seed {seed}), "
            f"{site.clients} client(s)"
        )


#: What ``classes`` name, per target kind.
_TARGET_NOUN = {
    "class": "classes",
    "binary": "classes",
    "multi_hot": "labels",
    "real": "targets",
    "boxes": "object classes",
}
#: What a partition histogram counts, per target kind.
_HIST_NOUN = {
    "class": "samples per class",
    "binary": "samples per class",
    "multi_hot": "positives per label",
    "real": "samples per quantile bin of the target",
    "boxes": "objects per class",
}

#: Column options of class / label / target names: shown whole, wrapped (folded inside a
#: word only when a single word is wider than the terminal), never cut with an ellipsis.
_NAME_COLUMN: dict[str, Any] = {"overflow": "fold", "no_wrap": False, "min_width": 8}


def _target_table(ds: ArrayDataset) -> Table:
    """Samples per class, positives per multi-hot label, or quantiles of real targets."""
    if ds.target_kind == "real":
        table = Table(title="target quantiles")
        for col in ("target", "min", "q25", "median", "q75", "max", "mean"):
            if col == "target":
                table.add_column(col, **_NAME_COLUMN)
            else:
                table.add_column(col, justify="right")
        values = ds.targets.numpy().reshape(len(ds), -1)
        qs = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0], axis=0)
        for j, name in enumerate(ds.classes):
            cells = [*qs[:, j], values[:, j].mean()]
            table.add_row(name, *(f"{v:.3g}" for v in cells))
        return table
    table = Table(title="label counts" if ds.target_kind == "multi_hot" else "class counts")
    table.add_column("label" if ds.target_kind == "multi_hot" else "class", **_NAME_COLUMN)
    table.add_column("objects" if ds.target_kind == "boxes" else "samples", justify="right")
    for name, c in zip(ds.classes, ds.label_histogram(), strict=True):
        table.add_row(name, str(int(c)))
    return table


def _print_partition(
    console: Console, method: MethodConfig, ds: ArrayDataset, part: Partition
) -> None:
    """One method's label histogram (class/label/quantile bin × client) and its entropy."""
    kind = ds.target_kind
    t = Table(
        title=f"{method.name}: {partition_text(method.partition.name, method.partition.params)}"
        f" partition ({_HIST_NOUN[kind]} × client)"
    )
    t.add_column({"multi_hot": "label", "real": "bin"}.get(kind, "class"), **_NAME_COLUMN)
    for k in range(part.num_clients):
        t.add_column(str(k), justify="right")
    for name, col in zip(ds.histogram_columns(), part.histograms.T, strict=True):
        t.add_row(name, *(str(int(x)) for x in col))
    t.add_row("[bold]total", *(f"[bold]{int(n)}" for n in part.sizes))
    console.print(t)
    ent = _entropy(part.histograms)
    console.print(f"label entropy per client (nats): {_fmt_entropy(ent)}")


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
        {
            "classes": list(ds.histogram_columns()),
            "histograms": part.histograms.tolist(),
            "sizes": part.sizes.tolist(),
        },
        path,
        f"{method.name} — {partition_text(method.partition.name, method.partition.params)}, "
        f"K={part.num_clients}, seed {seed}",
        target_kind=ds.target_kind,
    )
    console.print(f"wrote {path}")


def _entropy(hist: np.ndarray) -> np.ndarray:
    """Label entropy (nats) of each row of a clients × classes histogram."""
    p = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(-np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1))


def _fmt_entropy(ent: np.ndarray) -> str:
    """``[0.00, 1.23, …]``: two decimals, tiny negatives (rounding) and -0.0 shown as 0.00."""
    return "[" + ", ".join(f"{max(float(e), 0.0) + 0.0:.2f}" for e in ent) + "]"
