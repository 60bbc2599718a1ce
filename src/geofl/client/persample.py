"""Per-sample gradients and their clipped sum, the inner step of DP-SGD (001 Eq. 14, 16).

Two engines compute the ``[b, …]`` per-sample gradients of a physical micro-batch:

* ``func`` — :func:`torch.func.vmap` over :func:`torch.func.grad` of the one-sample loss,
  with the model called functionally on its own parameters (no hooks, no wrapper);
* ``opacus`` — Opacus's :class:`~opacus.GradSampleModule` hooks (per-layer rules), used
  without its optimizer or accountant (optional dependency; the reference of the speed
  benchmark ``benchmarks/bench_dp_step.py``).

Both feed :func:`clip_and_sum` (their ``clipped_sum``): per-sample L2 norms over *all*
trainable parameters, factors ``min(1, C/‖g_i‖)`` and the clipped sum ``Σ_i f_i g_i``
written into the flat gradient layout of a :class:`~geofl.models.base.FlatModel` — one
norm and one contraction per parameter tensor, never a loop over samples.
:func:`per_sample_grads_loop` is the slow one-example-at-a-time reference the tests compare
the engines with. The third engine,
``bk`` (:class:`~geofl.client.bookkeeping.BookKeepingEngine`, the default of ``dp_sgd``),
forms the clipped sum without materialising every per-sample gradient.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

import torch
from torch import nn

from geofl.client.bookkeeping import BookKeepingEngine
from geofl.models.base import FlatModel

__all__ = [
    "PerSampleEngine",
    "clip_and_sum",
    "make_engine",
    "per_sample_grads_loop",
]

#: ``loss(output, targets)`` → mean loss of a batch (a task's :meth:`Task.loss`).
LossFn = Callable[[torch.Tensor, Any], torch.Tensor]
EngineName = Literal["func", "opacus", "bk"]

#: Norms below this are treated as zero when forming ``C/‖g‖`` (no division by zero).
_TINY = 1e-12


class PerSampleEngine(Protocol):
    """Per-sample gradients of the mean-free (one-sample) loss, and the batch losses."""

    def __call__(self, x: torch.Tensor, y: Any) -> tuple[dict[str, torch.Tensor], float]:
        """``({name: [b, *shape]}, summed loss of the b samples)`` at the current weights."""
        ...

    def clipped_sum(
        self, x: torch.Tensor, y: Any, clip: float, out: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, float]:
        """Add the clipped sum into ``out``: ``([b] norms before clipping, summed loss)``."""
        ...


class _Materialising:
    """``clipped_sum`` from materialised per-sample gradients (:func:`clip_and_sum`)."""

    def __call__(self, x: torch.Tensor, y: Any) -> tuple[dict[str, torch.Tensor], float]:
        raise NotImplementedError

    def clipped_sum(
        self, x: torch.Tensor, y: Any, clip: float, out: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, float]:
        """:func:`clip_and_sum` of ``self(x, y)``; an empty batch adds nothing."""
        if x.shape[0] == 0:
            return torch.zeros(0), 0.0
        grads, loss = self(x, y)
        return clip_and_sum(grads, clip, out), loss


class _FuncEngine(_Materialising):
    """:func:`torch.func.vmap` of :func:`torch.func.grad` over the samples."""

    def __init__(self, model: nn.Module, loss: LossFn) -> None:
        self.model, self.loss = model, loss
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]

        def one(
            params: dict[str, torch.Tensor],
            buffers: dict[str, torch.Tensor],
            x: torch.Tensor,
            y: Any,
        ) -> tuple[torch.Tensor, torch.Tensor]:
            xb = x.unsqueeze(0)
            yb = _unsqueeze(y)
            out = torch.func.functional_call(self.model, (params, buffers), (xb,))
            value = self.loss(out, yb)
            return value, value.detach()

        grad_fn = torch.func.grad(one, has_aux=True)
        self._vmapped = torch.func.vmap(grad_fn, in_dims=(None, None, 0, 0), randomness="different")

    def __call__(self, x: torch.Tensor, y: Any) -> tuple[dict[str, torch.Tensor], float]:
        named = dict(self.model.named_parameters())
        params = {n: named[n].detach() for n in self.names}
        buffers = dict(self.model.named_buffers())
        grads, losses = self._vmapped(params, buffers, x, y)
        return dict(grads), float(losses.sum())


class _OpacusEngine(_Materialising):
    """Opacus's per-layer grad-sample hooks (its optimizer and accountant are not used)."""

    def __init__(self, model: nn.Module, loss: LossFn) -> None:
        try:
            from opacus import GradSampleModule
        except ImportError as err:  # optional dependency
            raise ImportError(
                "the opacus per-sample engine needs opacus; pip install 'opacus>=1.6,<1.7' "
                "or use engine: func"
            ) from err
        self.model, self.loss = model, loss
        for mod in model.modules():  # Opacus's hooks forbid in-place ops on their outputs
            if isinstance(mod, nn.ReLU | nn.ReLU6 | nn.LeakyReLU | nn.ELU):
                mod.inplace = False
            if hasattr(mod, "channels_last"):  # Opacus's conv rule is wrong on channels-last
                mod.channels_last = False  # type: ignore[assignment]  # (0.29 off on conv)
        self.gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def __call__(self, x: torch.Tensor, y: Any) -> tuple[dict[str, torch.Tensor], float]:
        for _, p in self.params:
            setattr(p, "grad_sample", None)  # noqa: B010 (Opacus's attribute)
            p.grad = None
        # The hooks scale by the reduction they are told about: the summed loss.
        total = self.loss(self.gsm(x), y) * x.shape[0]
        with warnings.catch_warnings():  # inputs need no grad; Opacus's hooks still fire
            warnings.filterwarnings("ignore", "Full backward hook is firing")
            total.backward()  # type: ignore[no-untyped-call]
        grads = {n: getattr(p, "grad_sample", None) for n, p in self.params}
        for _, p in self.params:
            p.grad = None
            setattr(p, "grad_sample", None)  # noqa: B010
        return {n: g for n, g in grads.items() if isinstance(g, torch.Tensor)}, float(
            total.detach()
        )


def make_engine(name: EngineName, model: nn.Module, loss: LossFn) -> PerSampleEngine:
    """The per-sample gradient engine ``name`` over ``model`` and a task's ``loss``."""
    if name == "opacus":
        return _OpacusEngine(model, loss)
    if name == "bk":
        return BookKeepingEngine(model, loss)
    return _FuncEngine(model, loss)


def clip_and_sum(
    grads: Mapping[str, torch.Tensor],
    clip: float,
    out: Mapping[str, torch.Tensor],
) -> torch.Tensor:
    """Clip each sample's gradient to L2 norm ``clip`` and add the sum into ``out``.

    001 Eq. 14: ``ḡ_i = g_i / max(1, ‖g_i‖₂ / C)``, the norm taken over every trainable
    parameter together; Eq. 16's sum ``Σ_i ḡ_i`` is accumulated (the caller divides).

    Args:
        grads: ``{name: [b, *shape]}`` per-sample gradients.
        clip: C > 0.
        out: ``{name: [*shape]}`` accumulators (views of the flat gradient), added to.

    Returns:
        ``[b]`` per-sample norms before clipping.
    """
    b = next(iter(grads.values())).shape[0]
    sq = torch.zeros(b, dtype=torch.float64)
    for g in grads.values():  # per-tensor norms in float32, their squares summed in float64
        sq += torch.linalg.vector_norm(g.reshape(b, -1), dim=1).double().square()
    norms = sq.sqrt()
    factors = (clip / norms.clamp_min(_TINY)).clamp(max=1.0).to(torch.float32)
    for name, g in grads.items():
        out[name].add_(torch.tensordot(factors, g, dims=1))
    return norms.to(torch.float32)


def per_sample_grads_loop(
    model: nn.Module, loss: LossFn, x: torch.Tensor, y: Any
) -> dict[str, torch.Tensor]:
    """The slow reference: one forward/backward per example (``{name: [b, *shape]}``)."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    rows: dict[str, list[torch.Tensor]] = {n: [] for n, _ in params}
    for i in range(x.shape[0]):
        grads = torch.autograd.grad(loss(model(x[i : i + 1]), _index(y, i)), [p for _, p in params])
        for (n, _), g in zip(params, grads, strict=True):
            rows[n].append(g.detach().clone())
    return {n: torch.stack(r) for n, r in rows.items()}


def _unsqueeze(y: Any) -> Any:
    return y.unsqueeze(0) if isinstance(y, torch.Tensor) else y


def _index(y: Any, i: int) -> Any:
    return y[i : i + 1]


def trainable_views(workspace: FlatModel, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{parameter name: view of flat}`` for the trainable entries of ``workspace``."""
    spec = workspace.spec
    views = spec.unflatten(flat)
    return {n: views[n] for n, t in zip(spec.names, spec.trainable, strict=True) if t}
