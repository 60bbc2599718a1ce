"""OOD backdoor indicator (BackdoorIndicator, Li et al., USENIX Security 2024; 004 Table 3).

Paper 004 lists "out-of-distribution indicators" among its baselines and gives no details;
this follows the original's description:

1. **Indicator set.** The server holds n out-of-distribution samples x̃_i with *assigned*
   labels ỹ_i, balanced over the classes (each class n/C times, shuffled).
2. **Planting.** Before broadcast the server trains the global model w on the indicator set
   for a few epochs of SGD with a proximal term, min CE(f_w(x̃), ỹ) + μ/2 ‖w − w₀‖² (w₀ the
   model before planting), and restores the float buffers (BatchNorm running statistics) of
   w₀, so that the OOD data do not shift them. The planted model is the broadcast model.
3. **Detection.** For each uploaded update Δ_j the server evaluates w̃ + Δ_j (w̃ the planted
   broadcast) on the indicator set, finds the label ℓ_j it predicts most often, and
   measures the indicator accuracy on the samples assigned ℓ_j (``score: label``, the
   original's): ``TPR_j = |{i : ỹ_i = ℓ_j, ŷ_i = ℓ_j}| / |{i : ỹ_i = ℓ_j}|``. Benign training
   on in-distribution data lets the indicator fade; training a backdoor (OOD-like trigger
   samples mapped to a target label) keeps the indicator of that label alive. Updates with
   ``score_j ≥ τ`` are flagged. A model that maps *every* OOD input to one label (common for
   a model that has forgotten the indicator: noise falls into one class) has TPR = 1 on that
   label and would be flagged, so the default ``score: label_corrected`` subtracts the rate
   at which samples assigned other labels are predicted as ℓ_j:
   ``score_j = TPR_j − FPR_j`` (0 for a constant predictor, 1 for a perfect indicator).

The mechanism is task-generic through :class:`~geofl.tasks.base.WholeSampleLabels`: the
assigned labels become targets in the task's format (classification: the labels; detection:
one box over each image's centre with its assigned class), planting minimises the task's
own loss on them (cross-entropy; the detector's loss terms), and an updated model's label of
a sample is the class the task reads from its output (argmax; the most confident
detection's class, or "none" — which no sample is assigned, so a model that detects nothing
on the indicator set scores TPR 0).

Gap to the original (documented, configurable where it is a choice): the original samples
its OOD set from another real dataset (CIFAR-10 / EMNIST for CIFAR / EMNIST tasks) and plants
for many epochs (``retrain_no_times`` up to 200) with a milestone LR schedule and a
norm projection; here the OOD samples are seeded synthetic images in model-input units
(``noise``: i.i.d. N(0, 1) per band and pixel; ``blobs``: smooth low-frequency N(0, 1)
fields, upsampled from 4×4), planting runs ``plant_epochs`` epochs of SGD with momentum
(no LR schedule, no projection), and the threshold τ is a parameter (default 0.95).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from geofl.models.base import FlatModel
from geofl.tasks.base import Task, WholeSampleLabels

__all__ = [
    "IndicatorSet",
    "IndicatorSettings",
    "indicator_scores",
    "make_indicator_set",
    "plant_indicator",
]

OodKind = Literal["noise", "blobs"]
Score = Literal["label", "label_corrected"]


@dataclass(frozen=True)
class IndicatorSettings:
    """BackdoorIndicator's parameters (defaults: the original's where they transfer).

    Attributes:
        num_samples: n, indicator samples (original: 800).
        ood: How the OOD samples are drawn (module docstring).
        plant_epochs: Epochs of planting per round (original: up to 200).
        plant_lr: SGD learning rate of planting (original: 0.005).
        momentum: SGD momentum (original: 0.9).
        weight_decay: SGD weight decay (original: 5e-4).
        mu: μ of the proximal term (original: 0.1).
        batch_size: Planting batch size (original: 64).
        threshold: τ: updates with indicator score ≥ τ are flagged.
        score: ``label`` (the original's TPR) or ``label_corrected`` (TPR − FPR).
    """

    num_samples: int = 200
    ood: OodKind = "noise"
    plant_epochs: int = 5
    plant_lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    mu: float = 0.1
    batch_size: int = 64
    threshold: float = 0.95
    score: Score = "label_corrected"


@dataclass(frozen=True)
class IndicatorSet:
    """The server's OOD samples and their assigned labels.

    Attributes:
        inputs: ``[n, C, H, W]`` float32, model-input units.
        labels: ``[n]`` int64 in [0, num_classes), balanced.
        targets: The labels as the task's targets (``[n]`` for classification, ``[n, 1, 5]``
            boxes for detection); the labels themselves when not given.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    targets: Any = None

    def target_rows(self) -> Any:
        """The task-format targets (the labels when none were given)."""
        return self.labels if self.targets is None else self.targets


def make_indicator_set(
    shape: tuple[int, ...],
    num_classes: int,
    settings: IndicatorSettings,
    generator: torch.Generator,
    task: WholeSampleLabels | None = None,
) -> IndicatorSet:
    """n OOD samples of ``shape`` (``(C, H, W)``) with balanced assigned labels, given as
    ``task``'s targets when a task is given."""
    n = settings.num_samples
    if settings.ood == "blobs" and len(shape) == 3:
        c, h, w = shape
        low = torch.randn((n, c, 4, 4), generator=generator)
        x = nn.functional.interpolate(low, size=(h, w), mode="bilinear", align_corners=False)
        x = x / x.flatten(1).std(1).clamp_min(1e-6)[:, None, None, None]
    else:
        x = torch.randn((n, *shape), generator=generator)
    labels = torch.arange(n) % num_classes
    labels = labels[torch.randperm(n, generator=generator)].to(torch.int64)
    targets = None if task is None else task.whole_sample_targets(labels, shape)
    return IndicatorSet(x.to(torch.float32).contiguous(), labels, targets)


def plant_indicator(
    model: FlatModel,
    params: torch.Tensor,
    indicator: IndicatorSet,
    settings: IndicatorSettings,
    generator: torch.Generator,
    task: Task | None = None,
) -> torch.Tensor:
    """Step 2: the planted copy of ``params`` (``[D]``); buffers restored to ``params``'.

    Minimises L(f(x̃), ỹ) + μ/2 ‖w − params‖² over the trainable entries with SGD
    (momentum, weight decay), batches in the order of ``generator``; L is ``task``'s loss
    on the indicator's targets (cross-entropy on the labels without a task).
    """
    model.load(params)
    module = model.module
    module.train()
    anchor = [p.detach().clone() for p in module.parameters()]
    opt = torch.optim.SGD(
        module.parameters(),
        lr=settings.plant_lr,
        momentum=settings.momentum,
        weight_decay=settings.weight_decay,
    )
    n = indicator.labels.numel()
    for _ in range(settings.plant_epochs):
        order = torch.randperm(n, generator=generator)
        for a in range(0, n, settings.batch_size):
            idx = order[a : a + settings.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = _plant_loss(module, indicator, idx, task)
            pairs = zip(module.parameters(), anchor, strict=True)
            prox = torch.stack([(p - p0).square().sum() for p, p0 in pairs]).sum()
            total = loss + 0.5 * settings.mu * prox
            total.backward()  # type: ignore[no-untyped-call]
            opt.step()
    module.eval()
    planted = model.snapshot()
    for trainable, off, shape in zip(
        model.spec.trainable, model.spec.offsets, model.spec.shapes, strict=True
    ):
        if not trainable:  # running statistics: keep the pre-planting ones (original: BN swap)
            size = 1
            for s in shape:
                size *= s
            planted[off : off + size] = params[off : off + size]
    return planted


def _plant_loss(
    module: nn.Module, indicator: IndicatorSet, idx: torch.Tensor, task: Task | None
) -> torch.Tensor:
    """The planting loss of the indicator samples ``idx`` (the trainer's own call)."""
    x = indicator.inputs[idx]
    if task is None:
        loss: torch.Tensor = nn.functional.cross_entropy(module(x), indicator.labels[idx])
        return loss
    y = task.collate(indicator.target_rows(), idx)
    return task.loss(module(x, y) if task.model_takes_targets else module(x), y)


@torch.no_grad()
def indicator_scores(
    model: FlatModel,
    broadcast: torch.Tensor,
    updates: torch.Tensor,
    indicator: IndicatorSet,
    num_classes: int,
    score: Score = "label_corrected",
    task: WholeSampleLabels | None = None,
) -> torch.Tensor:
    """Step 3: ``[K]`` float64 score_j on the label ℓ_j each updated model w̃ + Δ_j predicts
    most often (ties: the smallest label): TPR_j, minus FPR_j for ``label_corrected``.
    A sample's predicted label is ``task``'s whole-sample label (argmax without a task),
    in [0, C] with C meaning none (assigned to no sample).

    Args:
        model: A workspace of the run's architecture (its parameters are overwritten).
        broadcast: ``[D]`` w̃, the planted model the clients started from.
        updates: ``[K, D]`` Δ_j.
        indicator: The OOD samples and assigned labels.
        num_classes: C.
        score: ``label`` (TPR) or ``label_corrected`` (TPR − FPR).
        task: How a sample's label is read from the model's output.
    """
    module = model.module
    module.eval()
    labels = indicator.labels
    per_label = torch.bincount(labels, minlength=num_classes + 1).to(torch.float64)
    out = torch.zeros(updates.shape[0], dtype=torch.float64)
    for j in range(updates.shape[0]):
        torch.add(broadcast, updates[j], out=model.flat)
        output = module(indicator.inputs)
        pred = output.argmax(1) if task is None else task.whole_sample_labels(output)
        top = int(torch.bincount(pred, minlength=num_classes + 1).argmax())
        as_top = pred == top
        tpr = float((as_top & (labels == top)).sum()) / max(float(per_label[top]), 1.0)
        others = max(float(labels.numel() - per_label[top]), 1.0)
        fpr = float((as_top & (labels != top)).sum()) / others
        out[j] = tpr - fpr if score == "label_corrected" else tpr
    return out
