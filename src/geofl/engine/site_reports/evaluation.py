"""Federated evaluation: each site evaluates the global model on its own held-out splits.

With site-local data (``data.sites``) there is no central validation or test set: every
site evaluates the global model on its own val and test split and returns what the server
merges, in site order, into one :class:`~geofl.tasks.base.SplitMetrics` per split.

* **Sufficient statistics** where the task's accumulator has a mergeable state:
  classification's ``[C, C]`` confusion matrix and summed loss
  (:class:`~geofl.tasks.classification.ConfusionAccumulator`). Counts add exactly and the
  summed losses are added in site order, so the merged metrics equal those of one
  evaluation over every site's samples (accuracy and macro-F1 exactly; the loss up to the
  order of its float additions).
* **Per-site metrics weighted by sample count** otherwise (multi-label AP, binary ROC-AUC,
  regression, detection: their rank-based or fitted metrics are not sums over samples in
  geofl's accumulators): Σ_s n_s·m_s / Σ_s n_s over the sites whose value is finite; the
  metrics' ``notes`` say so. This is *not* the metric of the pooled samples.

What leaves a site is therefore the confusion matrix and summed loss (classification) or
its split metrics and sample count — never a sample or a prediction.

The simulator (:class:`LocalSiteEvaluator`) and a deployment's sites
(:mod:`geofl.deploy.sitedata`) call the same :func:`site_split_stats`, and the server side
of both the same :func:`merge_site_stats`, so both give the same numbers bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from geofl.data.base import ArrayDataset
from geofl.engine.evaluation.heldout import accumulate
from geofl.models.base import FlatModel
from geofl.tasks.base import SplitMetrics, Task
from geofl.tasks.classification import ConfusionAccumulator
from geofl.tasks.metrics import metrics_from_confusion

__all__ = [
    "LocalSiteEvaluator",
    "SiteEvalStats",
    "SiteEvaluator",
    "SiteHeldOut",
    "merge_site_stats",
    "site_split_stats",
]

#: The note a merge of per-site metrics carries.
WEIGHTED_NOTE = "federated evaluation: per-site metrics weighted by sample count"


@dataclass(frozen=True)
class SiteHeldOut:
    """One site's held-out splits (normalised), kept at the site.

    Attributes:
        name: The site's name (``data.sites.<i>.name``).
        val: Its validation split.
        test: Its test split.
    """

    name: str
    val: ArrayDataset
    test: ArrayDataset


@dataclass(frozen=True)
class SiteEvalStats:
    """What one site reports of the global model on one of its splits.

    Attributes:
        n: Samples evaluated.
        loss_sum: Σ per-sample loss (float64).
        confusion: ``[C, C]`` int64 confusion matrix (rows true) for tasks whose metrics
            derive from it, else None.
        values: The split's metrics (tasks without a confusion matrix), else empty.
    """

    n: int
    loss_sum: float
    confusion: np.ndarray | None = None
    values: dict[str, float] = field(default_factory=dict)


#: Global model ``[D]`` → (val, test) statistics of every site, in site order.
SiteEvaluator = Callable[[torch.Tensor], list[tuple[SiteEvalStats, SiteEvalStats]]]


def site_split_stats(
    model: torch.nn.Module, ds: ArrayDataset, task: Task, batch_size: int
) -> SiteEvalStats:
    """Evaluate ``model`` on one site split (the batches of
    :func:`~geofl.engine.evaluation.heldout.evaluate`) and keep what the server merges."""
    acc = accumulate(model, ds.inputs, ds.targets, task, batch_size)
    if isinstance(acc, ConfusionAccumulator):
        cm = acc.cm.numpy().astype(np.int64)
        return SiteEvalStats(int(cm.sum()), float(acc.loss_sum), cm)
    m = acc.compute()
    values = {k: float(v) for k, v in m.values.items()}
    return SiteEvalStats(int(m.n), float(values.get("loss", math.nan)) * int(m.n), None, values)


def merge_site_stats(stats: Sequence[SiteEvalStats]) -> SplitMetrics:
    """One split's federated metrics from every site's statistics, in site order.

    Confusion matrices are summed and the losses added in site order
    (:func:`~geofl.tasks.metrics.metrics_from_confusion`); without them each metric is
    Σ_s n_s·m_s / Σ_s n_s over the sites with a finite value.
    """
    if stats and all(s.confusion is not None for s in stats):
        cm = np.zeros_like(stats[0].confusion)
        loss = 0.0
        for s in stats:
            cm = cm + s.confusion
            loss += s.loss_sum
        m = metrics_from_confusion(torch.from_numpy(cm), loss)
        return SplitMetrics(
            values={"accuracy": m["accuracy"], "macro_f1": m["macro_f1"], "loss": m["loss"]},
            per_class={"accuracy": m["per_class_accuracy"]},
            n=m["n"],
        )
    names: list[str] = []
    for s in stats:
        names += [k for k in s.values if k not in names]
    values = {}
    for key in names:
        num, den = 0.0, 0
        for s in stats:
            v = s.values.get(key, math.nan)
            if s.n and math.isfinite(v):
                num += s.n * v
                den += s.n
        values[key] = num / den if den else math.nan
    return SplitMetrics(values, {}, sum(s.n for s in stats), (WEIGHTED_NOTE,))


class LocalSiteEvaluator:
    """The simulator's federated evaluation: every site's splits, in this process.

    Args:
        workspace: The model workspace (loaded with the global model per call).
        sites: Every site's held-out splits, in site order.
        task: The learning task.
        batch_size: ``eval.batch_size``.
    """

    def __init__(
        self, workspace: FlatModel, sites: Sequence[SiteHeldOut], task: Task, batch_size: int
    ) -> None:
        self.workspace, self.sites, self.task, self.bs = workspace, tuple(sites), task, batch_size

    def __call__(self, params: torch.Tensor) -> list[tuple[SiteEvalStats, SiteEvalStats]]:
        self.workspace.load(params)
        model = self.workspace.module
        return [
            (
                site_split_stats(model, s.val, self.task, self.bs),
                site_split_stats(model, s.test, self.task, self.bs),
            )
            for s in self.sites
        ]
