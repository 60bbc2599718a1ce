"""Local training: the client step of the round loop (000 §3.1.1).

The client step is a function of (global parameters, the client's data, the server's
directives, a generator) returning a :class:`~geofl.update.ClientUpdate`. A
:class:`LocalSGD` trainer owns one model workspace (:class:`~geofl.models.FlatModel`) and
reuses it for every client it simulates: loading the global model is one ``copy_``.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn
from torch.nn import functional as F

from geofl.client.data import ClientData, batch_indices
from geofl.config.schema import TrainConfig
from geofl.models.base import FlatModel
from geofl.registry import NoParams, Registry
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

__all__ = ["LOCAL_TRAINERS", "LocalSGD", "LocalTrainer"]


class LocalTrainer(Protocol):
    """Runs local optimisation for one client and returns its update."""

    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> ClientUpdate: ...


#: ``(params, *, workspace: FlatModel, train: TrainConfig) -> LocalTrainer``
LOCAL_TRAINERS: Registry[LocalTrainer] = Registry("trainer")


class LocalSGD:
    """Mini-batch SGD (momentum, weight decay) or Adam on the cross-entropy loss.

    Optimiser state starts fresh every round (clients are stateless between rounds, as in
    FedAvg). Models must not draw from a global RNG (no dropout without a generator).

    Args:
        workspace: Model whose flat vector is overwritten with the global parameters.
        train: Optimiser settings and local budget.
    """

    def __init__(self, workspace: FlatModel, train: TrainConfig) -> None:
        self.workspace = workspace
        self.train_cfg = train
        self._params = [p for p in workspace.module.parameters() if p.requires_grad]

    def _optimizer(self) -> torch.optim.Optimizer:
        t = self.train_cfg
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
    ) -> ClientUpdate:
        """Train from ``global_params`` (``[D]``) and return Δw = w_local − w_global."""
        model: nn.Module = self.workspace.module
        self.workspace.load(global_params)
        model.train()
        opt = self._optimizer()
        t = self.train_cfg
        loss_sum, seen, steps = 0.0, 0, 0
        correct = torch.zeros((), dtype=torch.long)
        for idx in batch_indices(
            len(data),
            t.batch_size,
            epochs=t.local_epochs,
            steps=t.local_steps,
            generator=generator,
        ):
            x, y = data.images[idx], data.labels[idx]
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            correct += (logits.detach().argmax(dim=1) == y).sum()
            loss_sum += float(loss.detach()) * len(idx)
            seen += len(idx)
            steps += 1
        delta = self.workspace.flat.detach() - global_params
        meta = UpdateMeta(
            client_id=data.client_id,
            num_samples=len(data),
            round=directives.round,
            label_histogram=data.label_histogram,
            train_loss=loss_sum / max(seen, 1),
            train_accuracy=int(correct) / max(seen, 1),
            steps=steps,
            bytes_sent=delta.numel() * delta.element_size(),
        )
        return ClientUpdate(delta, meta)


@LOCAL_TRAINERS.register("local_sgd")
def build_local_sgd(_: NoParams, *, workspace: FlatModel, train: TrainConfig) -> LocalTrainer:
    """Plain local SGD/Adam on cross-entropy (FedAvg's client, 000 §3.1.1)."""
    return LocalSGD(workspace, train)
