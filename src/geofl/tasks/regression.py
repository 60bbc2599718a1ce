"""Regression on standardised targets, metrics in the targets' own units (paper 003).

Targets are ``[N]`` or ``[N, T]`` float; the model emits ``[N, T]`` (``[N, 1]`` or ``[N]``
for one output). The builder fits, on the **training** targets only, the mean μ and the
population standard deviation σ (ddof 0) of every output; the network learns
z = (y − μ) / σ with the mean squared error over the ``[B, T]`` entries, so outputs of very
different scales weigh alike and the learning rate does not depend on the unit.
:meth:`RegressionTask.predict` maps back to y = z·σ + μ. An output that is constant in the
training split (σ = 0) has nothing to learn and is refused at build time.

Metrics of a split (:class:`RegressionAccumulator`), in original units and averaged
uniformly over outputs as scikit-learn's ``multioutput="uniform_average"``: ``rmse``
(primary, lower is better; mean over outputs of √MSE_t, ``root_mean_squared_error``),
``mae``, ``r2`` (``r2_score``, constant-target convention in
:func:`geofl.tasks.scoring.r2_from_sums`) and ``loss`` (the standardised MSE the
network is trained on). The accumulator keeps the batches' outputs and targets and reduces
them together in float64 once per split, or every
:data:`~geofl.tasks.common.FLUSH_ENTRIES` output entries on a large one
(:class:`RegressionAccumulator`).

Label summary: label-skew partitioners and consistency weighting need discrete classes.
Output ``bin_output`` is cut into ``bins`` quantile bins whose edges are numpy's default
(linear) quantiles k/bins of the training targets; bin k holds e_{k−1} ≤ y < e_k, so every
bin holds ≈ N/bins training samples (fewer when ties make edges coincide), and a
Dirichlet-over-bins partition gives clients skewed target ranges.
:meth:`RegressionTask.discrete_labels` gives each sample's bin (what such a partitioner
draws over) and :meth:`RegressionTask.label_summary` counts them, so the summary has
``bins`` entries whatever ``num_classes`` the dataset reports.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import ConfigError
from geofl.tasks.base import TASKS, Direction, SplitMetrics, declare_metrics
from geofl.tasks.common import (
    TARGETS_FIELD,
    BatchStore,
    describe,
    numpy_float,
    require_tensor,
)
from geofl.tasks.scoring import mse_mae_r2, mse_mae_r2_scalar

__all__ = [
    "RegressionAccumulator",
    "RegressionParams",
    "RegressionTask",
    "build_regression",
]


class RegressionParams(BaseModel):
    """Parameters of the ``regression`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bins: int = Field(
        5, ge=2, le=1000, description="quantile bins of the label summary (label skew)"
    )
    bin_output: int = Field(0, ge=0, description="which target column the bins cut")


class RegressionTask:
    """MSE on train-standardised targets (see the module docstring).

    Args:
        mean: ``[T]`` training mean μ per output.
        std: ``[T]`` training standard deviation σ per output (all > 0).
        edges: ``[bins − 1]`` increasing quantile edges of output ``bin_output``.
        bin_output: The output the label summary bins.
        flat: True if targets are ``[N]`` (one output, predictions returned as ``[N]``).
    """

    name = "regression"
    primary_metric = "rmse"
    direction: Direction = "min"
    model_takes_targets = False

    def __init__(
        self,
        mean: torch.Tensor,
        std: torch.Tensor,
        edges: torch.Tensor,
        *,
        bin_output: int = 0,
        flat: bool = True,
    ) -> None:
        self.mean = mean.to(torch.float64)
        self.std = std.to(torch.float64)
        self.edges = edges.to(torch.float64)
        self.bin_output = bin_output
        self.flat = flat
        self.num_outputs = int(mean.numel())
        self._mean32 = self.mean.to(torch.float32)
        self._std32 = self.std.to(torch.float32)
        # what the accumulator needs per split, computed once: μ, σ, σ², 1/σ (torch's
        # reciprocal, as d = (y − μ)·(1/σ) always used) as float64 arrays, zero sums
        self._mu_np, self._sigma_np = self.mean.numpy(), self.std.numpy()
        self._var_np = self._sigma_np * self._sigma_np
        self._var_sigma = list(zip(self._var_np.tolist(), self._sigma_np.tolist(), strict=True))
        self._inv_sigma_np = (1.0 / self.std).numpy()
        self._zero_sums = np.zeros((4, self.num_outputs))
        self._no_range = (np.full(self.num_outputs, np.inf), np.full(self.num_outputs, -np.inf))

    def check_targets(self, targets: Any) -> None:
        """Refuse targets this task cannot learn from, with a one-line error.

        Accepts finite float targets ``[N, T]`` with T = ``num_outputs``, or ``[N]`` when
        T = 1.

        Raises:
            ConfigError: under ``task.name``, e.g. "integer targets [N] int64 given to the
                regression task; …".
        """
        t = require_tensor(self.name, targets)
        if not t.is_floating_point():
            raise ConfigError(
                TARGETS_FIELD,
                f"integer targets {describe(t)} given to the regression task; use task "
                "classification or binary for class labels, or give float targets",
            )
        ok = t.ndim == 2 and t.shape[1] == self.num_outputs
        if not ok and not (t.ndim == 1 and self.num_outputs == 1):
            raise ConfigError(
                TARGETS_FIELD,
                f"targets {describe(t)} do not match the regression task's "
                f"{self.num_outputs} output(s); give [N, {self.num_outputs}] float targets",
            )
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            raise ConfigError(
                TARGETS_FIELD,
                f"{bad} regression targets are NaN or infinite; drop or impute those samples",
            )

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` view of ``[B]``, ``[B, 1]`` or ``[B, T]`` output or targets."""
        out = x.reshape(x.shape[0], -1)
        if out.shape[1] != self.num_outputs:
            raise ValueError(
                f"regression task: {tuple(x.shape)} does not have {self.num_outputs} outputs"
            )
        return out

    def standardise(self, targets: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` float32 z = (y − μ) / σ, computed in float64 (a float32 difference
        would lose the digits that matter for targets with a large offset)."""
        y = self._rows(targets).to(torch.float64)
        return ((y - self.mean) / self.std).to(torch.float32)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean squared error over the ``[B, T]`` standardised entries."""
        return torch.mean((self._rows(output) - self.standardise(target)) ** 2)

    def squared_errors(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` float32 (ẑ − z)², the entries of the standardised MSE (no graph)."""
        with torch.no_grad():
            return (self._rows(output) - self.standardise(target)) ** 2

    def loss_sum(self, output: torch.Tensor, target: torch.Tensor) -> float:
        """Σ over samples of the per-sample standardised MSE (mean over the T outputs)."""
        return float(self.squared_errors(output, target).sum()) / self.num_outputs

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        """Values in target units: ``[B]`` for ``[N]`` targets, else ``[B, T]`` float32."""
        y = self._rows(output) * self._std32 + self._mean32
        return y[:, 0] if self.flat else y

    def accumulator(self) -> RegressionAccumulator:
        """A fresh accumulator for one split."""
        return RegressionAccumulator(self)

    def discrete_labels(self, targets: torch.Tensor) -> torch.Tensor:
        """``[N]`` int64 quantile bin of each sample's output ``bin_output`` (0..bins−1)."""
        y = self._rows(targets)[:, self.bin_output].to(torch.float64).contiguous()
        return torch.bucketize(y, self.edges, right=True)

    def label_summary(self, targets: torch.Tensor) -> np.ndarray:
        """``[bins]`` int64 samples per quantile bin (edges from the training targets)."""
        bins = self.edges.numel() + 1
        counts: np.ndarray = torch.bincount(self.discrete_labels(targets), minlength=bins).numpy()
        return counts

    def collate(self, targets: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``targets[index]``."""
        return targets[index]

    def fitted_state(self) -> dict[str, Any]:
        """The train-split standardisation, one value per output, so predictions can be
        returned in target units."""
        return {"target_mean": self.mean.tolist(), "target_std": self.std.tolist()}


class RegressionAccumulator:
    """A split's metrics in units standardised by the training statistics.

    With d = (y − μ) / σ (the targets as the network learns them) and e = d − ẑ (the
    residual of the output ẑ), the metrics need per output Σd, Σd², Σe², Σ|e| and the
    range of d. In original units y − ŷ = σ·e, so SS_res = σ²·Σe², Σ|y − ŷ| = σ·Σ|e| and
    SS_tot = σ²·(Σd² − (Σd)²/n) (:func:`~geofl.tasks.scoring.shifted_sum_of_squares`; the
    training mean is the shift).

    Cost: ``update`` only keeps the batch. Pending batches are reduced together once they
    hold :data:`~geofl.tasks.common.FLUSH_ENTRIES` output entries (2¹⁷: for 3 outputs
    ≈ 43,700 samples, 171 batches of 256; memory stays bounded on any split) and at
    :meth:`compute`: d, e and the four terms are computed and summed in float64, sample by
    sample, by one compiled call (:func:`~geofl.tasks.kernels.regression_terms`) whatever
    the number of batches. So the metrics do not depend on how the split was cut into
    batches (to the bit, below the flush size), and the sums are float64 ones, more
    accurate than float32 per-batch accumulation. The accumulator owns the loss
    (``owns_loss``): Σe² / T, the standardised MSE summed over samples, which equals the
    sum of the batches' float32 :meth:`RegressionTask.loss_sum` to float32 rounding
    (``tests/tasks/test_regression.py``; cost in ``benchmarks/README.md``).

    Args:
        task: The regression task (μ, σ, the standardised loss).
    """

    owns_loss = True

    def __init__(self, task: RegressionTask) -> None:
        self.task = task
        self.mean = task.mean
        self.std = task.std
        self._mu = task._mu_np
        self._inv_sigma = task._inv_sigma_np
        self._store = BatchStore(owns_loss=True)
        self._sums = task._zero_sums  # [4, T] Σd, Σd², Σe², Σ|e| (replaced, not mutated)
        self._low, self._high = task._no_range  # [T] running min and max of d
        self._loss = 0.0

    @property
    def n(self) -> int:
        """Samples added so far."""
        return self._store.n

    def update(
        self, output: torch.Tensor, target: torch.Tensor, loss_sum: float | None = None
    ) -> None:
        """Add a batch: standardised output ``[B, T]``/``[B]``, targets in original units
        (``loss_sum`` is ignored: the accumulator computes the loss)."""
        if self._store.add(output, target, None):
            self._reduce()

    def _reduce(self) -> None:
        """Fold the pending batches into the running sums, range and loss (one compiled
        call, :func:`~geofl.tasks.kernels.regression_terms`)."""
        from geofl.tasks.kernels import regression_terms

        task = self.task
        outputs, targets = self._store.take()
        out_t, y_t = numpy_float(task._rows(outputs)), task._rows(targets)
        if y_t.dtype not in (torch.float32, torch.float64):
            y_t = y_t.to(torch.float64)
        sums, low, high = np.zeros_like(self._sums), self._low.copy(), self._high.copy()
        regression_terms(
            out_t.contiguous().numpy(),
            y_t.contiguous().numpy(),
            self._mu,
            self._inv_sigma,
            sums,
            low,
            high,
        )
        self._sums, self._low, self._high = self._sums + sums, low, high
        # Σ over samples of the per-sample standardised MSE (mean over the T outputs)
        self._loss += float(sums[2].sum()) / task.num_outputs

    def _sums_now(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """``([4, T] Σd, Σd², Σe², Σ|e|; [T] min d; [T] max d; summed loss)`` of every
        batch added (pending ones reduced first)."""
        if self._store.pending:
            self._reduce()
        return self._sums, self._low, self._high, self._loss

    def compute(self) -> SplitMetrics:
        """RMSE, MAE, R² (uniform average over outputs; per output too) and the loss."""
        n = self.n
        nan = float("nan")
        if n == 0:
            return SplitMetrics({"rmse": nan, "mae": nan, "r2": nan, "loss": nan})
        sums, low, high, loss_sum = self._sums_now()
        constant = low == high
        task = self.task
        if task.num_outputs <= SCALAR_OUTPUTS:
            mse, mae, r2 = mse_mae_r2_scalar(sums.tolist(), constant.tolist(), task._var_sigma, n)
        else:
            mse, mae, r2 = mse_mae_r2(sums, constant, task._var_np, task._sigma_np, n).tolist()
        rmse = [math.sqrt(v) for v in mse]  # MSE ≥ 0, or NaN / inf, which sqrt keeps
        # uniform average over outputs (scikit-learn's np.average; in order, on floats)
        means = [sum(row) / len(row) for row in (rmse, mae, r2)]
        values = {"rmse": means[0], "mae": means[1], "r2": means[2], "loss": loss_sum / n}
        notes: tuple[str, ...] = ()
        if n < 2:
            notes = ("fewer than 2 samples in this split: R² undefined (NaN)",)
        elif bool(constant.any()):
            listed = ", ".join(map(str, np.flatnonzero(constant).tolist()))
            notes = (
                f"output(s) {listed} constant in this split: R² is 1 if predicted exactly, "
                "else 0 (scikit-learn's force_finite convention)",
            )
        return SplitMetrics(values, {"rmse": rmse, "mae": mae, "r2": r2}, n, notes)


#: Up to this many outputs a split's final arithmetic runs on Python floats
#: (:func:`~geofl.tasks.scoring.mse_mae_r2_scalar`, ~1 µs per output), above it on numpy
#: vectors (:func:`~geofl.tasks.scoring.mse_mae_r2`, ~20 calls whatever T): the same IEEE
#: operations either way.
SCALAR_OUTPUTS = 8


declare_metrics("regression", {"rmse": "min", "mae": "min", "r2": "max", "loss": "min"})


@TASKS.register("regression", params=RegressionParams)
def build_regression(
    params: RegressionParams, *, num_classes: int, train_targets: torch.Tensor
) -> RegressionTask:
    """Regression: MSE on train-standardised targets; RMSE / MAE / R² in target units.

    ``num_classes`` is not used (the label summary has ``params.bins`` entries).
    """
    t = require_tensor("regression", train_targets)
    outputs = 1 if t.ndim == 1 else int(t.shape[1])
    probe = RegressionTask(
        torch.zeros(outputs), torch.ones(outputs), torch.zeros(0), flat=t.ndim == 1
    )
    probe.check_targets(t)
    y = t.reshape(t.shape[0], -1).to(torch.float64)
    if y.shape[0] < 2:
        raise ConfigError(TARGETS_FIELD, "regression needs at least 2 training samples")
    mean, std = y.mean(dim=0), y.std(dim=0, correction=0)
    constant = torch.nonzero(std == 0).flatten().tolist()
    if constant:
        raise ConfigError(
            TARGETS_FIELD,
            f"regression target output(s) {', '.join(map(str, constant))} constant in the "
            "training split (std 0): nothing to learn; remove them",
        )
    if params.bin_output >= outputs:
        raise ConfigError(
            "task.params.bin_output",
            f"{params.bin_output} is not an output of the {outputs}-output targets; "
            f"choose 0..{outputs - 1}",
        )
    levels = np.arange(1, params.bins) / params.bins
    edges = np.quantile(y[:, params.bin_output].numpy(), levels)
    return RegressionTask(
        mean, std, torch.from_numpy(edges), bin_output=params.bin_output, flat=t.ndim == 1
    )
