"""Local training, the first stage of the client step (000 §3.1.1).

A trainer maps (global parameters, the client's data, the server's directives, a generator,
an optional gradient correction) to a :class:`~geofl.update.ClientUpdate`. A
:class:`LocalSGD` trainer owns one model workspace (:class:`~geofl.models.FlatModel`) and
reuses it for every client it simulates: loading the global model is one ``copy_``.

Algorithms that change the local objective (FedProx, SCAFFOLD, FedDyn) do so through a
:class:`GradCorrection`: a term added to the flat gradient of the trainable parameters
before every optimiser step, ``g ← g + μ(w − w_anchor) + b`` — one vector operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import torch
from torch import nn

from geofl.client.augment import AugmentPipeline
from geofl.client.data import ClientData, batch_indices
from geofl.client.state import StateSpec
from geofl.device import CPU, to_device
from geofl.models.base import FlatModel
from geofl.models.mlp import GeneratorDropout, reseed_dropout
from geofl.registry import NoParams, Registry
from geofl.rng import torch_generator
from geofl.tasks.base import MetricAccumulator, Task
from geofl.update import (
    LR_DIRECTIVE,
    ClientDirectives,
    ClientUpdate,
    UpdateMeta,
    payload_bytes,
)

__all__ = [
    "LOCAL_TRAINERS",
    "GradCorrection",
    "LocalSGD",
    "LocalTrainParams",
    "LocalTrainer",
    "StatelessTrainer",
    "train_for_round",
]


@dataclass(frozen=True)
class LocalTrainParams:
    """Plain local-optimisation settings (000 §4.1.3: SGD lr 0.01, momentum 0.9, wd 1e-4).

    Attributes:
        optimizer: ``sgd`` or ``adam``.
        lr: η_l.
        momentum: ρ of SGD (ignored by Adam).
        weight_decay: L2 coefficient.
        batch_size: B.
        local_epochs: Passes over the local data (when ``local_steps`` is None).
        local_steps: Exactly this many mini-batches, if given.
        augment: Training-time augmentations of each batch (001 §6.1.2); empty: none.
    """

    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4
    batch_size: int = 64
    local_epochs: int = 1
    local_steps: int | None = None
    augment: AugmentPipeline = field(default_factory=AugmentPipeline)


def train_for_round(train: LocalTrainParams, directives: ClientDirectives) -> LocalTrainParams:
    """``train`` with the round's η_l when the server sent one (a learning-rate schedule over
    rounds, 001 §6.1.2: ``directives.extra["lr"]``); else ``train`` itself, unchanged."""
    lr = directives.extra.get(LR_DIRECTIVE)
    return train if lr is None else replace(train, lr=float(lr))


@dataclass(frozen=True)
class GradCorrection:
    """A term added to the flat gradient before each local step: μ(w − anchor) + linear.

    Attributes:
        prox_mu: μ ≥ 0 of a proximal term μ/2‖w − anchor‖² (FedProx, FedDyn's α).
        anchor: ``[D]`` point of the proximal term (the round's global model).
        linear: ``[D]`` constant added to the gradient (SCAFFOLD's c − c_k, FedDyn's
            −∇L_k(θ_k^{t−1})), or None.
    """

    prox_mu: float = 0.0
    anchor: torch.Tensor | None = None
    linear: torch.Tensor | None = None

    def apply(self, grad: torch.Tensor, params: torch.Tensor, mask: torch.Tensor | None) -> None:
        """Add the correction to ``grad`` (``[D]``, in place) at ``params`` (``[D]``).

        ``mask`` (``[D]``, 1 for trainable entries) keeps buffers' positions at zero.
        """
        term = torch.zeros_like(grad)
        if self.prox_mu and self.anchor is not None:
            term.add_(params.detach() - self.anchor.to(params.device), alpha=self.prox_mu)
        if self.linear is not None:
            term.add_(self.linear.to(grad.device))
        if mask is not None:
            term.mul_(mask)
        grad.add_(term)


class LocalTrainer(Protocol):
    """Runs local optimisation for one client and returns its update.

    A trainer may keep per-client state across rounds (DP-SGD's adaptive clipping
    statistic): it names it in :meth:`state_specs`, reads it from ``state`` and returns new
    values in :attr:`~geofl.update.ClientUpdate.local_state`.
    """

    def state_specs(self) -> Mapping[str, StateSpec]:
        """Per-client state tensors this trainer keeps (name → spec); usually none."""
        ...

    def planned_release(self, n: int) -> list[dict[str, Any]]:
        """The DpEvent specs a round on ``n`` local examples will release (budget checks);
        empty for non-private training."""
        ...

    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
        correction: GradCorrection | None = None,
        augment_generator: torch.Generator | None = None,
        state: Mapping[str, torch.Tensor] | None = None,
    ) -> ClientUpdate: ...


#: ``(params, *, workspace: FlatModel, train: LocalTrainParams, task: Task) -> LocalTrainer``
LOCAL_TRAINERS: Registry[LocalTrainer] = Registry("trainer")


class StatelessTrainer:
    """Mixin of a trainer that keeps no client state and releases nothing private."""

    def state_specs(self) -> Mapping[str, StateSpec]:
        """No per-client state between rounds."""
        return {}

    def planned_release(self, n: int) -> list[dict[str, Any]]:
        """Nothing private is released."""
        return []


class LocalSGD(StatelessTrainer):
    """Mini-batch SGD (momentum, weight decay) or Adam on the task's loss.

    Optimiser state starts fresh every round (clients are stateless between rounds, as in
    FedAvg). Models must not draw from a global RNG (no dropout without a generator).
    While training, the task's accumulator runs over the training batches; the update's
    :attr:`~geofl.update.UpdateMeta.train_metrics` holds the task's primary metric of those
    running predictions (classification: the running training accuracy).

    Args:
        workspace: Model whose flat vector is overwritten with the global parameters.
        train: Optimiser settings and local budget.
        task: The learning task (loss, target collation, metrics).
    """

    def __init__(self, workspace: FlatModel, train: LocalTrainParams, task: Task) -> None:
        self.workspace = workspace
        self.train_cfg = train
        self.task = task
        self._params = [p for p in workspace.module.parameters() if p.requires_grad]
        self._flat_grad: torch.Tensor | None = None
        self._mask: torch.Tensor | None = None
        self._dropout = any(isinstance(m, GeneratorDropout) for m in workspace.module.modules())

    def _reseed_dropout(self, generator: torch.Generator) -> None:
        """Give the model's dropout layers masks from (seed, round, client, "dropout").

        The stream is derived from the seed of the round's ``train`` generator without
        drawing from it, so the batch schedule is unchanged, every (round, client) gets its
        own masks, and a resumed run reproduces them. Models without dropout are untouched.
        """
        if self._dropout:
            reseed_dropout(
                self.workspace.module, torch_generator(generator.initial_seed(), "dropout")
            )

    def _bind_flat_grad(self) -> torch.Tensor:
        """Make every parameter's ``.grad`` a view of one ``[D]`` gradient vector."""
        spec = self.workspace.spec
        if self._flat_grad is None:
            self._flat_grad = torch.zeros(spec.numel, device=self.workspace.device)
            if not all(spec.trainable):
                self._mask = torch.zeros(spec.numel, device=self.workspace.device)
                for off, shape, trainable in zip(
                    spec.offsets, spec.shapes, spec.trainable, strict=True
                ):
                    n = int(torch.Size(shape).numel())
                    if trainable:
                        self._mask[off : off + n] = 1.0
        flat = self._flat_grad
        views = spec.unflatten(flat)
        for name, p in self.workspace.module.named_parameters():
            if p.requires_grad:
                p.grad = views[name]
        return flat

    def _optimizer(self, t: LocalTrainParams) -> torch.optim.Optimizer:
        if t.optimizer == "adam":
            return torch.optim.Adam(self._params, lr=t.lr, weight_decay=t.weight_decay)
        return torch.optim.SGD(
            self._params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay
        )

    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
        correction: GradCorrection | None = None,
        augment_generator: torch.Generator | None = None,
        state: Mapping[str, torch.Tensor] | None = None,
    ) -> ClientUpdate:
        """Train from ``global_params`` (``[D]``) and return Δw = w_local − w_global.

        ``generator`` draws the batch schedule; ``augment_generator`` (required when
        ``train.augment`` is set) draws the augmentations, so they leave the schedule as is.
        """
        model: nn.Module = self.workspace.module
        t, task = train_for_round(self.train_cfg, directives), self.task
        if t.augment and augment_generator is None:
            raise ValueError("train.augment is set but no augment generator was given")
        self.workspace.load(global_params)
        self._reseed_dropout(generator)
        model.train()
        opt = self._optimizer(t)
        flat_grad = self._bind_flat_grad() if correction is not None else None
        loss_sum, seen, steps = 0.0, 0, 0
        # Detection-style models return losses, not predictions, in training.
        running = None if task.model_takes_targets else task.accumulator()
        for idx in batch_indices(
            len(data),
            t.batch_size,
            epochs=t.local_epochs,
            steps=t.local_steps,
            generator=generator,
        ):
            x, y = data.inputs[idx], task.collate(data.targets, idx)
            if augment_generator is not None:
                x = t.augment(x, augment_generator)
            x, y = to_device(x, self.workspace.device), to_device(y, self.workspace.device)
            opt.zero_grad(set_to_none=flat_grad is None)
            output = model(x, y) if task.model_takes_targets else model(x)
            loss = task.loss(output, y)
            loss.backward()  # type: ignore[no-untyped-call]
            if correction is not None and flat_grad is not None:
                correction.apply(flat_grad, self.workspace.flat, self._mask)
            opt.step()
            batch_loss = float(loss.detach()) * len(idx)
            if running is not None:  # the task's accumulators count on CPU
                running.update(to_device(output.detach(), CPU), to_device(y, CPU), batch_loss)
            loss_sum += batch_loss
            seen += len(idx)
            steps += 1
        if flat_grad is not None:  # leave the workspace as plain (unbound) for other users
            for p in self._params:
                p.grad = None
        delta = self.workspace.flat.detach().cpu() - global_params
        metrics = _primary(task, running) if seen and running is not None else {}
        return ClientUpdate(
            delta, _meta(data, directives, delta, loss_sum / max(seen, 1), metrics, steps)
        )


def _meta(
    data: ClientData,
    directives: ClientDirectives,
    delta: torch.Tensor,
    train_loss: float,
    train_metrics: dict[str, float],
    steps: int,
) -> UpdateMeta:
    """The metadata of a plain local update (its bytes: Δw sent as float32)."""
    return UpdateMeta(
        client_id=data.client_id,
        num_samples=len(data),
        round=directives.round,
        label_histogram=data.label_histogram,
        train_loss=train_loss,
        train_metrics=train_metrics,
        steps=steps,
        bytes_sent=payload_bytes(delta),
    )


def _primary(task: Task, running: MetricAccumulator) -> dict[str, float]:
    """``{primary metric: value}`` of the running training predictions."""
    return {task.primary_metric: float(running.compute().values[task.primary_metric])}


@LOCAL_TRAINERS.register("local_sgd")
def build_local_sgd(
    _: NoParams, *, workspace: FlatModel, train: LocalTrainParams, task: Task
) -> LocalTrainer:
    """Plain local SGD/Adam on the task's loss (FedAvg's client, 000 §3.1.1)."""
    return LocalSGD(workspace, train, task)
