"""BackdoorIndicator (Li et al., USENIX Security 2024) as an algorithm: a 004 Table 3 baseline.

Per round (:mod:`geofl.server.indicator` for the mechanism and its gap to the original):
the method's own defenses and weighting (the tier's ``select``), then the indicator screen
on the updates they kept — each w̃ + Δ_j evaluated on the server's OOD indicator set, flagged
when its indicator score ≥ τ — then the tier's combiner over the survivors (weights
renormalised over them; any aggregator), the server step, and finally planting: the new
global model is trained on the indicator set before it is broadcast. So the stack is
defenses → indicator → weighting → combiner. The strategy keeps no state across rounds: the
planted broadcast it compares against is the global model the engine passes in (planted
before it was returned), so checkpoints and resume need nothing extra.

Planting starts at the end of round ``start_round`` and screening one round later, with the
first planted broadcast (the original starts watermarking after a warm-up; an indicator
planted into an untrained model is erased by every update). If every update is flagged the
model stays (no update is applied) and is planted again. Recorded per round:
``indicator.flagged``, ``indicator.planted`` (1/0) and
``indicator.score.<client>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext
from geofl.errors import ConfigError
from geofl.models.base import FlatModel
from geofl.registry import CheckContext
from geofl.rng import torch_generator
from geofl.server.indicator import (
    IndicatorSettings,
    indicator_scores,
    make_indicator_set,
    plant_indicator,
)
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy, StrategyResult, UpdateBatch
from geofl.server.tier import FlatTier
from geofl.tasks.base import WHOLE_SAMPLE_TASKS, Task, WholeSampleLabels

__all__ = ["BackdoorIndicatorParams", "BackdoorIndicatorStrategy"]


class BackdoorIndicatorParams(BaseModel):
    """Indicator set, planting and threshold (defaults: :class:`IndicatorSettings`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_samples: int = Field(200, ge=1, description="n, OOD indicator samples (original: 800)")
    ood: Literal["noise", "blobs"] = Field("noise", description="how OOD samples are drawn")
    plant_epochs: int = Field(5, ge=1, description="planting epochs per round")
    plant_lr: float = Field(0.01, gt=0.0, allow_inf_nan=False, description="planting SGD lr")
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="planting SGD momentum")
    weight_decay: float = Field(5e-4, ge=0.0, allow_inf_nan=False, description="planting wd")
    mu: float = Field(0.1, ge=0.0, allow_inf_nan=False, description="μ of the proximal term")
    batch_size: int = Field(64, ge=1, description="planting batch size")
    threshold: float = Field(
        0.95, gt=0.0, le=1.0, allow_inf_nan=False, description="τ: flag score ≥ τ"
    )
    score: Literal["label", "label_corrected"] = Field(
        "label_corrected", description="indicator score: TPR (original) or TPR − FPR"
    )
    start_round: int = Field(2, ge=1, description="first round that plants (and then screens)")

    def settings(self) -> IndicatorSettings:
        return IndicatorSettings(
            self.num_samples,
            self.ood,
            self.plant_epochs,
            self.plant_lr,
            self.momentum,
            self.weight_decay,
            self.mu,
            self.batch_size,
            self.threshold,
            self.score,
        )


class BackdoorIndicatorStrategy(ComposedStrategy):
    """Defenses → OOD indicator screen → weighting → combiner → server step → planting.

    Args:
        tier: The method's tier (defenses, weighting, aggregator all used).
        server_lr: η_s of the plain server step.
        params: Indicator parameters.
        model_factory: Builds a workspace of the run's architecture.
        input_shape: One input's shape.
        num_classes: C.
        seed: Run seed (indicator set and planting order generators).
        task: The run's task (targets, planting loss and whole-sample labels of the
            indicator, :class:`~geofl.tasks.base.WholeSampleLabels`); None: classification
            with cross-entropy and argmax.
    """

    def __init__(
        self,
        tier: FlatTier,
        server_lr: float,
        params: BackdoorIndicatorParams,
        model_factory: Callable[[], FlatModel],
        input_shape: tuple[int, ...],
        num_classes: int,
        seed: int,
        task: Task | None = None,
    ) -> None:
        super().__init__(tier, PlainServerOptimizer(server_lr))
        if task is not None and not isinstance(task, WholeSampleLabels):
            raise ConfigError(
                "task.name",
                f"backdoor_indicator needs a task that gives whole samples one class; "
                f"{task.name!r} does not",
            )
        self.task = task
        self.labelling: WholeSampleLabels | None = task  # checked above
        self.params = params
        self.settings = params.settings()
        self.model = model_factory()
        self.num_classes = num_classes
        self.seed = seed
        gen = torch_generator(seed, "indicator", "samples")
        self.indicator = make_indicator_set(input_shape, num_classes, self.settings, gen, task)

    def _screening(self, round_idx: int) -> bool:
        """Whether round ``round_idx``'s broadcast was planted (so its updates are screened)."""
        return round_idx > self.params.start_round

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        updates, k = batch.deltas, batch.deltas.shape[0]
        kept, w = self.tier.select(updates, batch.metas, round_idx)
        info: dict[str, float] = {}
        idx = torch.nonzero(kept).flatten()
        if self._screening(round_idx) and idx.numel():
            scores = indicator_scores(
                self.model,
                global_params,
                updates[idx],
                self.indicator,
                self.num_classes,
                self.settings.score,
                self.labelling,
            )
            clean = scores < self.settings.threshold
            ids = [batch.metas[int(i)].client_id for i in idx]
            info.update(
                {
                    f"indicator.score.{c}": float(s)
                    for c, s in zip(ids, scores.tolist(), strict=True)
                }
            )
            info["indicator.flagged"] = float(int((~clean).sum()))
            kept = kept.clone()
            kept[idx[~clean]] = False
            w = w[clean]
            w = w / w.sum() if w.numel() else w
        if bool(kept.any()):
            res = self.tier.combine(updates, batch.metas, kept, w)
            delta, weights = res.delta, res.weights
        else:
            delta, weights = torch.zeros_like(global_params), torch.zeros(k, dtype=torch.float64)
        params = self.optimizer.step(global_params, delta)
        planted = round_idx >= self.params.start_round
        if planted:
            gen = torch_generator(self.seed, "indicator", "plant", round_idx)
            params = plant_indicator(
                self.model, params, self.indicator, self.settings, gen, self.task
            )
        info["indicator.planted"] = float(planted)
        return StrategyResult(params, delta, weights, kept, info)


def _check(params: BackdoorIndicatorParams, ctx: CheckContext) -> None:
    task = (ctx.experiment.get("task") or {}).get("name", "classification")
    if task not in WHOLE_SAMPLE_TASKS:
        ctx.fail(
            "name",
            f"backdoor_indicator assigns one class per OOD sample; the {task!r} task has no "
            f"single classes — use task {' or '.join(sorted(WHOLE_SAMPLE_TASKS))}",
        )


@ALGORITHMS.register("backdoor_indicator", params=BackdoorIndicatorParams, check=_check)
def build_backdoor_indicator(
    params: BackdoorIndicatorParams, *, ctx: AlgorithmContext
) -> Algorithm:
    """BackdoorIndicator (Li et al. 2024): plant an OOD indicator, flag updates that keep it."""
    if ctx.model_factory is None or not ctx.input_shape or ctx.num_classes < 2:
        raise ValueError(
            "backdoor_indicator needs the run's model factory, input shape and classes"
        )
    strategy = BackdoorIndicatorStrategy(
        ctx.tier,
        ctx.server_lr,
        params,
        ctx.model_factory,
        ctx.input_shape,
        ctx.num_classes,
        ctx.seed,
        ctx.task,
    )
    return Algorithm(strategy)
