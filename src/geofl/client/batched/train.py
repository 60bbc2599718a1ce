"""Local training of a chunk of clients as one stacked computation (the batched trainer).

Every local step of the chunk is one call of :class:`~geofl.client.batched.stacked.StackedModel`
and one :class:`~geofl.client.batched.optim.StackedOptimizer` step over ``[K, P]``; per
client only the batch is drawn (:class:`~geofl.client.batched.plan.ClientPlan`). The
step's order is the sequential trainers': the gradient (LocalSGD: of the batch's mean
loss; DP-SGD: the clipped sum, its noise, ÷ q_k·n_k — 001 Eq. 14–17), then the algorithm's
correction μ(w − anchor) + b, then the optimiser's step (Eq. 18).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from geofl.client.batched.optim import StackedOptimizer
from geofl.client.batched.plan import ClientPlan, StepBatch
from geofl.client.batched.stacked import StackedModel

__all__ = ["ChunkResult", "rank_aucs", "train_chunk"]

#: ``(μ [K, 1], anchor [K, P], linear [K, P] | None)`` of a chunk, or None: no correction.
Correction = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None


class ChunkResult:
    """What the chunk's training leaves per client: final rows and running statistics.

    Attributes:
        params: ``[K, D]`` the trained flat vectors.
        deltas: ``[K, D]`` their updates, trained minus the rows they started from.
        loss_sum: Per client, the summed training loss of its samples.
        seen: Per client, the samples it trained on.
        outputs: Per client, per step, ``(outputs, targets, batch loss)`` (LocalSGD's
            running training metric), empty for DP-SGD (its metrics are not released)
            and when ``hits`` or ``ranks`` stand in for it.
        hits: Per client, how many of its training predictions were right (argmax =
            target), or None: the outputs are kept for the task's own accumulator.
        ranks: Per step, ``(logits [K, B], positive [K, B], valid [K, B])`` of the chunk
            (the binary task's running ROC-AUC), or None.
        aucs: Per client, that ROC-AUC once trained (:func:`rank_aucs`), or None.
    """

    def __init__(self, params: torch.Tensor, k: int, running: str = "outputs") -> None:
        self.params = params
        self.deltas = params  # set to the trained rows' Δw by :func:`train_chunk`
        self.loss_sum = [0.0] * k
        self.seen = [0] * k
        keep = running == "outputs"
        self.outputs: list[list[tuple[torch.Tensor, Any, float]]] = (
            [[] for _ in range(k)] if keep else []
        )
        self.hits: list[int] | None = [0] * k if running == "hits" else None
        self.ranks: list[tuple[torch.Tensor, ...]] | None = [] if running == "ranks" else None
        self.aucs: list[float] | None = None


def _stack(batches: list[StepBatch | None], plans: list[ClientPlan]) -> tuple[Any, ...]:
    """``(x [K, B, …], y [K, B, …], weight [K, B], valid [K, B])`` of one step, padded
    with zeros to the longest batch (at least 1); a client without a batch this step (its
    program ended) is all padding. One padding call per tensor (``pad_sequence``), not a
    copy per client: at K = 10,000 the per-client copies were a tenth of the step."""
    ref = next(b for b in batches if b is not None)
    none_x, none_y = ref.x[:0], ref.y[:0]
    xs = [none_x if b is None else b.x for b in batches]
    ys = [none_y if b is None or b.x.shape[0] == 0 else b.y for b in batches]
    lengths = torch.tensor([t.shape[0] for t in xs])
    x, y = pad_sequence(xs, batch_first=True), pad_sequence(ys, batch_first=True)
    if x.shape[1] == 0:  # every batch empty: one column of padding
        x = ref.x.new_zeros((len(batches), 1, *ref.x.shape[1:]))
        y = ref.y.new_zeros((len(batches), 1, *ref.y.shape[1:]))
    valid = (torch.arange(x.shape[1]) < lengths.view(-1, 1)).to(torch.float32)
    weight = valid / valid.sum(1, keepdim=True).clamp_min(1.0)
    return x, y, weight, valid


def _correction(plans: list[ClientPlan], cols: torch.Tensor, trained: torch.Tensor) -> Correction:
    """``(μ [K, 1], anchor [K, P], linear [K, P] | None)``, or None when no client has a
    correction."""
    if all(p.correction is None for p in plans):
        return None
    k, width = trained.shape
    mu = torch.zeros(k, 1)
    anchor = torch.zeros(k, width)
    linear: torch.Tensor | None = None
    for i, p in enumerate(plans):
        c = p.correction
        if c is None:
            continue
        if c.prox_mu and c.anchor is not None:
            mu[i, 0] = c.prox_mu
            anchor[i] = c.anchor[cols]
        if c.linear is not None:
            linear = torch.zeros(k, width) if linear is None else linear
            linear[i] = c.linear[cols]
    return mu, anchor, linear


def _correct(grad: torch.Tensor, trained: torch.Tensor, corr: Correction) -> torch.Tensor:
    """``grad + (μ(w − anchor) + b)``: :meth:`GradCorrection.apply`'s arithmetic."""
    if corr is None:
        return grad
    mu, anchor, linear = corr
    term = (trained - anchor) * mu
    if linear is not None:
        term = term + linear
    return grad + term


def train_chunk(
    model: StackedModel, plans: list[ClientPlan], dim: int, *, running: str = "outputs"
) -> ChunkResult:
    """Train ``plans`` (clients sharing one round's settings) together.

    Args:
        model: The stacked model.
        plans: The chunk's clients.
        dim: D, the flat vector's length.
        running: How LocalSGD's running training metric is kept: ``outputs`` per client
            for the task's accumulator; ``hits``: each client's right predictions counted
            for the whole chunk at once (single-label classification's accuracy);
            ``ranks``: the chunk's logits per step, for :func:`rank_aucs` (the binary
            task's ROC-AUC).

    Returns:
        Their trained ``[K, D]`` rows and running statistics.
    """
    k = len(plans)
    params = torch.stack([p.job.params for p in plans])
    trained = params[:, model.cols].contiguous()
    buffers = params[:, model.bcols]
    opt = StackedOptimizer(plans[0].train, trained)
    corr = _correction(plans, model.cols, trained)
    out = ChunkResult(params.clone(), k, running)
    dp = plans[0].dp
    clip = torch.tensor([p.clip for p in plans])
    expected = torch.tensor([p.q * len(p.job.data) for p in plans]).view(-1, 1)
    for s in range(max(p.steps for p in plans)):
        batches = [p.next_batch(model.task, dim) if s < p.steps else None for p in plans]
        active = torch.tensor([b is not None for b in batches])
        x, y, weight, valid = _stack(batches, plans)
        if dp is None:
            grad, outputs, per = model.grads(trained, buffers, (x, y, weight))
            _running(out, batches, outputs, (y, valid), per)
        else:
            grad, per = model.clipped_sums(trained, buffers, (x, y, valid), clip)
            grad = _privatise(plans, batches, grad, clip, expected, model.cols)
            _dp_running(out, batches, per, valid)
        opt.step(_correct(grad, trained, corr), active)
    out.params[:, model.cols] = trained
    out.deltas = out.params - params  # each row: the client's w − w^{held}, one op
    if out.ranks:
        out.aucs = rank_aucs(out.ranks)
    return out


def _running(
    out: ChunkResult,
    batches: list[StepBatch | None],
    outputs: torch.Tensor,
    targets: tuple[torch.Tensor, torch.Tensor],
    per: torch.Tensor,
) -> None:
    """LocalSGD's running loss and sample count per client, and its right predictions
    (``out.hits``) or its (outputs, targets) for the task's accumulator."""
    y, valid = targets
    sums = (per * valid).sum(1).tolist()
    hits = None
    if out.hits is not None:
        hits = ((outputs.argmax(-1) == y) * valid.bool()).sum(1).tolist()
    if out.ranks is not None:
        k, width = valid.shape
        logits = outputs.reshape(k, width, -1)
        if logits.shape[2] != 1:
            shape = tuple(outputs.shape[2:])
            raise ValueError(f"binary task: model output must be [B, 1] or [B], got [B, *{shape}]")
        out.ranks.append((logits[:, :, 0], y.reshape(k, width) != 0, valid.bool()))
    keep = out.hits is None and out.ranks is None
    for i, b in enumerate(batches):
        if b is None:
            continue
        m = b.x.shape[0]
        out.loss_sum[i] += sums[i]
        out.seen[i] += m
        if hits is not None and out.hits is not None:
            out.hits[i] += int(hits[i])
        elif keep:
            out.outputs[i].append((outputs[i, :m], y[i, :m], sums[i]))


def rank_aucs(ranks: list[tuple[torch.Tensor, ...]]) -> list[float]:
    """Each row's ROC-AUC over its valid entries of every step, to the bit as the binary
    task's accumulator gives it for that client alone (:func:`~geofl.tasks.kernels.auc_float32`).

    One sort and two batched searches for the whole chunk instead of an accumulator per
    client (a fifth of a 10,000-tractor round was those accumulators). With ``left``
    (``right``) the count of a row's scores below (at or below) a positive's score,
    2U = Σ_{i positive} (left_i + right_i − 1) − n_pos (n_pos − 1) (Mann–Whitney with
    average ranks, the kernel's tie-group sum), an exact integer, and AUC =
    U / (n_pos · n_neg) in float64 as there. Padding sorts last as +inf, above every
    finite score; −0 and +0 are one tie group; a row with a non-finite score or one class
    gives NaN, as the kernel.

    Args:
        ranks: Per step ``(logits [K, B], positive [K, B], valid [K, B])``.
    """
    scores = torch.cat([r[0] for r in ranks], dim=1)
    if scores.dtype not in (torch.float32, torch.float64):
        scores = scores.float()  # numpy_float: what the accumulator ranks
    positive = torch.cat([r[1] for r in ranks], dim=1)
    valid = torch.cat([r[2] for r in ranks], dim=1)
    finite = (torch.isfinite(scores) | ~valid).all(1)
    masked = torch.where(valid & torch.isfinite(scores), scores, torch.inf)
    ordered = torch.sort(masked, dim=1).values
    left = torch.searchsorted(ordered, masked)
    right = torch.searchsorted(ordered, masked, right=True)
    pos = positive & valid
    bounds = ((left + right - 1) * pos).sum(1).tolist()
    n_pos, n = pos.sum(1).tolist(), valid.sum(1).tolist()
    out = []
    for ok, b, p, m in zip(finite.tolist(), bounds, n_pos, n, strict=True):
        if not ok or p == 0 or p == m:
            out.append(float("nan"))
        else:
            out.append((b - p * (p - 1)) / 2 / (float(p) * float(m - p)))
    return out


def _dp_running(
    out: ChunkResult, batches: list[StepBatch | None], per: torch.Tensor, valid: torch.Tensor
) -> None:
    """DP-SGD's summed loss and sample count per client (client-local log only)."""
    sums = (per * valid).sum(1).tolist()
    for i, b in enumerate(batches):
        if b is None:
            continue
        out.loss_sum[i] += sums[i]
        out.seen[i] += b.x.shape[0]


def _privatise(
    plans: list[ClientPlan],
    batches: list[StepBatch | None],
    summed: torch.Tensor,
    clip: torch.Tensor,
    expected: torch.Tensor,
    cols: torch.Tensor,
) -> torch.Tensor:
    """001 Eq. 16–17 per client: N(0, σ²C_k²) on the clipped sum (or the mean), ÷ q_k n_k;
    each active client's ‖g̃‖ is appended to its plan (adaptive clipping, Eq. 15)."""
    dp = plans[0].dp
    assert dp is not None
    noise = torch.stack(
        [b.noise[cols] if b is not None and b.noise is not None else summed[0] * 0 for b in batches]
    )
    std = (dp.params.noise_multiplier * clip).view(-1, 1)
    if dp.params.noise_on == "sum":
        grad = (summed + noise * std) / expected
    else:
        grad = summed / expected + noise * std
    norms = torch.linalg.vector_norm(grad, dim=1)
    for plan, b, norm in zip(plans, batches, norms.tolist(), strict=True):
        if b is not None:
            plan.noisy_norms.append(norm)
    return grad
