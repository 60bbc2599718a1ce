"""Local SGD and Adam over a stack of clients' parameters ``[K, D]``, one step for all.

The arithmetic is :class:`torch.optim.SGD`'s and :class:`torch.optim.Adam`'s single-tensor
step written out (L2 weight decay added to the gradient; SGD's momentum buffer starts as
the first gradient, no dampening; Adam's bias corrections by the step count), so a client's
row follows the same recurrence as the sequential trainer's optimiser. A client whose local
program has ended (fewer steps than the longest in its chunk) keeps its row unchanged:
``active`` masks it.
"""

from __future__ import annotations

import math

import torch

from geofl.client.trainer import LocalTrainParams

__all__ = ["StackedOptimizer"]

#: Adam's defaults (torch.optim.Adam), which the sequential trainer uses.
_BETAS = (0.9, 0.999)
_EPS = 1e-8


class StackedOptimizer:
    """SGD (momentum, weight decay) or Adam on ``[K, D]`` rows, fresh state per round.

    Args:
        train: The round's settings (every client of the stack shares them).
        params: ``[K, D]`` the rows it updates in place.
    """

    def __init__(self, train: LocalTrainParams, params: torch.Tensor) -> None:
        self.t, self.params = train, params
        self._buf: torch.Tensor | None = None  # SGD momentum, or Adam's first moment
        self._sq: torch.Tensor | None = None  # Adam's second moment
        self._steps = 0

    def step(self, grad: torch.Tensor, active: torch.Tensor) -> None:
        """One step with ``grad`` (``[K, D]``, may be modified) on the ``active`` rows
        (``[K]`` bool); the other rows and their optimiser state stay as they were.

        Every active row takes its ``i``-th step when this is the ``i``-th call: all
        clients start together and a client is active for its first ``steps_k`` calls.
        """
        t = self.t
        self._steps += 1
        if t.weight_decay:
            grad = grad.add(self.params, alpha=t.weight_decay)
        new = self._adam(grad) if t.optimizer == "adam" else self._sgd(grad)
        keep = active.view(-1, 1)
        self.params.copy_(torch.where(keep, new, self.params))

    def _sgd(self, grad: torch.Tensor) -> torch.Tensor:
        t = self.t
        if t.momentum:
            if self._buf is None:
                self._buf = grad.clone()
            else:
                self._buf = self._buf.mul(t.momentum).add_(grad)
            grad = self._buf
        return self.params.add(grad, alpha=-t.lr)

    def _adam(self, grad: torch.Tensor) -> torch.Tensor:
        b1, b2 = _BETAS
        if self._buf is None or self._sq is None:
            self._buf, self._sq = torch.zeros_like(grad), torch.zeros_like(grad)
        self._buf = self._buf.lerp(grad, 1 - b1)
        self._sq = self._sq.mul(b2).addcmul_(grad, grad, value=1 - b2)
        bc1, bc2 = 1 - b1**self._steps, 1 - b2**self._steps
        denom = (self._sq.sqrt() / math.sqrt(bc2)).add_(_EPS)
        return self.params.addcdiv(self._buf, denom, value=-self.t.lr / bc1)
