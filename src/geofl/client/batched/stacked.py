"""The workspace's model called on K clients' parameters at once (``torch.func``).

:class:`StackedModel` keeps the K clients' trainable entries as one ``[K, P]`` matrix
(P: the trainable entries of the flat vector) and hands :func:`torch.func.functional_call`
views of it, under :func:`torch.func.vmap` over the clients and :func:`torch.func.grad` of
each client's loss: one batched computation (batched matmuls, grouped convolutions) instead
of K forward and backward passes, which is how FedJAX and pfl-research simulate cross-device
cohorts. Batches of unequal size are padded; a per-sample weight (0 on padding) keeps the
padding out of every gradient, loss and clipped sum.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from geofl.models.base import FlatModel
from geofl.tasks.base import Task

__all__ = ["StackedModel"]

#: Norms below this are treated as zero when forming ``C/‖g‖`` (as the sequential engines).
_TINY = 1e-12

Params = dict[str, torch.Tensor]


class StackedModel:
    """``workspace``'s module as a function of stacked per-client parameters.

    Args:
        workspace: The model (its module is called functionally; its own weights unused).
        task: The task whose loss is differentiated.
    """

    def __init__(self, workspace: FlatModel, task: Task) -> None:
        spec = workspace.spec
        self.module: nn.Module = workspace.module
        self.task = task
        self._train: list[tuple[str, int, int, tuple[int, ...]]] = []
        self._buffers: list[tuple[str, int, int, tuple[int, ...]]] = []
        cols: list[torch.Tensor] = []
        bcols: list[torch.Tensor] = []
        at = {True: 0, False: 0}
        for name, shape, off, trainable in zip(
            spec.names, spec.shapes, spec.offsets, spec.trainable, strict=True
        ):
            n = int(torch.Size(shape).numel())
            (self._train if trainable else self._buffers).append((name, at[trainable], n, shape))
            (cols if trainable else bcols).append(torch.arange(off, off + n))
            at[trainable] += n
        self.cols = torch.cat(cols) if cols else torch.zeros(0, dtype=torch.long)
        self.bcols = torch.cat(bcols) if bcols else torch.zeros(0, dtype=torch.long)
        self._plain = torch.func.vmap(torch.func.grad(self._batch_loss, has_aux=True))
        per_sample = torch.func.vmap(
            torch.func.grad(self._sample_loss, has_aux=True), in_dims=(None, None, 0, 0)
        )
        self._per_sample = torch.func.vmap(per_sample)

    @staticmethod
    def _views(flat: torch.Tensor, layout: list[tuple[str, int, int, tuple[int, ...]]]) -> Params:
        k = flat.shape[0]
        return {name: flat[:, a : a + n].view(k, *shape) for name, a, n, shape in layout}

    def _call(self, params: Params, buffers: Params, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.func.functional_call(self.module, (params, buffers), (x,))
        return out

    def _losses(self, out: torch.Tensor, y: Any) -> torch.Tensor:
        """Per-sample losses ``[B]``: the task's mean loss of each one-sample batch."""
        loss: Callable[[torch.Tensor, Any], torch.Tensor] = self.task.loss
        return torch.func.vmap(lambda o, t: loss(o.unsqueeze(0), t.unsqueeze(0)))(out, y)

    def _batch_loss(
        self, params: Params, buffers: Params, x: torch.Tensor, y: Any, w: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out = self._call(params, buffers, x)
        per = self._losses(out, y)
        return (per * w).sum(), (out.detach(), per.detach())

    def _sample_loss(
        self, params: Params, buffers: Params, x: torch.Tensor, y: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self._call(params, buffers, x.unsqueeze(0))
        value = self.task.loss(out, y.unsqueeze(0))
        return value, value.detach()

    def _flat(self, grads: Params, k: int) -> torch.Tensor:
        return torch.cat([grads[name].reshape(k, -1) for name, *_ in self._train], dim=1)

    def grads(
        self, trained: torch.Tensor, buffers: torch.Tensor, batch: tuple[Any, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each client's gradient of its weighted loss Σ_i w_i ℓ_i.

        Args:
            trained: ``[K, P]`` trainable entries.
            buffers: ``[K, Q]`` float buffers (Q may be 0).
            batch: ``(x [K, B, …], y [K, B, …], w [K, B])``; w = 1/b_k on a client's b_k
                real samples (its batch's mean loss, as the sequential trainer), 0 on
                padding.

        Returns:
            ``([K, P] gradients, [K, B, …] outputs, [K, B] per-sample losses)``.
        """
        x, y, w = batch
        k = trained.shape[0]
        grads, (out, per) = self._plain(
            self._views(trained, self._train), self._views(buffers, self._buffers), x, y, w
        )
        return self._flat(grads, k), out, per

    def clipped_sums(
        self,
        trained: torch.Tensor,
        buffers: torch.Tensor,
        batch: tuple[Any, ...],
        clip: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each client's sum of per-sample gradients clipped to its C_k (001 Eq. 14, 16).

        The per-sample norm is taken over every trainable entry together, per tensor in
        float32 and their squares summed in float64, as
        :func:`~geofl.client.persample.clip_and_sum`.

        Args:
            trained: ``[K, P]`` trainable entries.
            buffers: ``[K, Q]`` float buffers.
            batch: ``(x [K, B, …], y [K, B, …], valid [K, B] float 0/1)``.
            clip: ``[K]`` C_k.

        Returns:
            ``([K, P] clipped sums, [K, B] per-sample losses)``.
        """
        x, y, valid = batch
        k, b = valid.shape
        grads, losses = self._per_sample(
            self._views(trained, self._train), self._views(buffers, self._buffers), x, y
        )
        sq = torch.zeros(k, b, dtype=torch.float64)
        for g in grads.values():
            sq += torch.linalg.vector_norm(g.reshape(k, b, -1), dim=2).double().square()
        ratio = clip.view(-1, 1).double() / sq.sqrt().clamp_min(_TINY)
        factors = ratio.clamp(max=1.0).to(torch.float32) * valid
        summed = {n: torch.einsum("kb,kb...->k...", factors, g) for n, g in grads.items()}
        return self._flat(summed, k), losses
