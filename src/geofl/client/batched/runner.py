"""Many clients' steps as one batched computation, and when a program cannot batch.

:class:`BatchedClients` runs a round's client steps for clients that share an architecture
and a local program: it plans each client (budget check, correction, generators), trains
them in chunks that fit ``max_bytes`` (:func:`~geofl.client.batched.train.train_chunk`),
builds each client's update as its sequential trainer would, and finishes every step with
:func:`~geofl.client.step.finish_step` — the algorithm's state update, the release
pipeline and the privacy ledger are the sequential path's own code.

:func:`batch_refusal` names why a program cannot batch (the engine then runs the
sequential step): a trainer other than LocalSGD or DP-SGD, an algorithm that has not
declared itself ``batchable``, an attack, dropout or BatchNorm, or a task whose model
takes its targets.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from geofl.client.batched.plan import BatchJob, ClientPlan
from geofl.client.batched.stacked import StackedModel
from geofl.client.batched.train import ChunkResult, train_chunk
from geofl.client.data import ClientData
from geofl.client.dpsgd import CLIP_STATE, DpSgd
from geofl.client.step import ClientProgram, ClientResult, check_budget, finish_step
from geofl.client.trainer import LocalSGD, _meta, _primary
from geofl.errors import BudgetExhaustedError
from geofl.models.base import FlatModel
from geofl.models.mlp import GeneratorDropout
from geofl.tasks.base import Task
from geofl.tasks.binary import BinaryTask
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientUpdate

__all__ = ["DEFAULT_MAX_BYTES", "BatchedClients", "batch_refusal", "collections_paused"]

#: Memory one chunk's stacked tensors may take (parameters, optimiser state, per-sample
#: gradients of DP-SGD, a heuristic for activations): 512 MiB.
DEFAULT_MAX_BYTES = 512 * 2**20

Outcome = ClientResult | BudgetExhaustedError


@contextmanager
def collections_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off for the block (re-enabled after it,
    if it was on).

    A 10,000-tractor round allocates a few hundred thousand short-lived objects (updates,
    records, events) beside the run's long-lived ones; each allocation threshold starts a
    collection that walks them, and the full ones walk every tracked object of the run
    (``benchmarks/bench_hierarchy.py`` shows the cost). Reference counting still frees what the
    round drops; only cyclic garbage waits for the first collection after the round.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def batch_refusal(
    program: ClientProgram, workspace: FlatModel, task: Task, clients: Sequence[ClientData]
) -> str | None:
    """Why ``program``'s steps cannot run batched, in one line, or None when they can."""
    trainer, alg = program.trainer, program.algorithm
    if type(trainer) not in (LocalSGD, DpSgd):
        return f"trainer {type(trainer).__name__} has no batched step"
    if not type(alg).__dict__.get("batchable", False):
        return f"algorithm client {type(alg).__name__} keeps state the batch cannot stack"
    if program.attack is not None:
        return "an attack acts on its clients' steps"
    if task.model_takes_targets:
        return f"the {task.name} task's model takes its targets"
    for name, mod in workspace.module.named_modules():
        if isinstance(mod, GeneratorDropout | nn.Dropout | nn.modules.batchnorm._BatchNorm):
            return f"layer {name!r} ({type(mod).__name__}) draws or mixes across a batch"
    if not all(isinstance(c.targets, torch.Tensor) for c in clients):
        return "client targets are not tensors"
    return None


class BatchedClients:
    """Runs clients' steps stacked ``[K, D]`` (:func:`batch_refusal` must be None).

    Args:
        program: The client program every client runs.
        workspace: The model (called functionally; its weights are not touched).
        task: The task.
        max_bytes: Memory one chunk may take; the cohort is split into chunks below it.
    """

    def __init__(
        self,
        program: ClientProgram,
        workspace: FlatModel,
        task: Task,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.program, self.task = program, task
        self.dim = workspace.spec.numel
        self.model = StackedModel(workspace, task)
        self.dp = program.trainer if isinstance(program.trainer, DpSgd) else None
        self.max_bytes = max_bytes
        # LocalSGD's running training metric, kept chunk-wide where the task's is exact
        # that way: single-label classification's accuracy is right predictions / samples
        # (its accumulator's trace / n, the same float64 division); the binary task's
        # ROC-AUC is ranked for the whole chunk at once (:func:`rank_aucs`).
        self._running = "outputs"
        if self.dp is None and type(task) is ClassificationTask:
            self._running = "hits"
        elif self.dp is None and type(task) is BinaryTask:
            self._running = "ranks"

    def run(self, jobs: Sequence[BatchJob]) -> list[Outcome]:
        """Every job's outcome, in job order: its result, or the budget refusal
        :func:`~geofl.client.step.client_step` would raise (the garbage collector held
        off meanwhile: :func:`collections_paused`)."""
        with collections_paused():
            return self._run(jobs)

    def _run(self, jobs: Sequence[BatchJob]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(jobs)
        plans: list[tuple[int, ClientPlan]] = []
        for i, job in enumerate(jobs):
            try:
                check_budget(self.program, job.data, job.state, job.directives)
            except BudgetExhaustedError as err:
                outcomes[i] = err
                continue
            plans.append((i, ClientPlan.build(self.program, job, self.dp)))
        for chunk in self._chunks(plans):
            trained = train_chunk(
                self.model, [p for _, p in chunk], self.dim, running=self._running
            )
            for row, (i, plan) in enumerate(chunk):
                outcomes[i] = self._finish(plan, trained, row)
        return [o for o in outcomes if o is not None]

    def _chunks(self, plans: list[tuple[int, ClientPlan]]) -> list[list[tuple[int, ClientPlan]]]:
        """Consecutive runs of plans with one round's settings (η_l), at most
        :meth:`_chunk_size` clients each."""
        out: list[list[tuple[int, ClientPlan]]] = []
        for item in plans:
            plan = item[1]
            last = out[-1] if out else None
            if last is None or _differ(last[0][1], plan) or len(last) >= self._size(plan):
                out.append([item])
            else:
                last.append(item)
        return out

    def _size(self, plan: ClientPlan) -> int:
        """Clients per chunk: ``max_bytes`` over one client's share (8 rows of D for the
        parameters, optimiser state and correction; B rows more for DP-SGD's per-sample
        gradients; 16 activations per input entry of a batch)."""
        b = plan.train.batch_size
        x = plan.job.data.inputs
        per_input = int(torch.Size(x.shape[1:]).numel())
        rows = 8 + (b if self.dp is not None else 0)
        per_client = 4 * (self.dim * rows + 16 * b * per_input)
        return max(1, self.max_bytes // per_client)

    def _finish(self, plan: ClientPlan, trained: ChunkResult, row: int) -> ClientResult:
        """The client's update as its trainer builds it, then the shared tail."""
        job = plan.job
        delta = trained.deltas[row]  # trained.params[row] − job.params, chunk-wide
        if self.dp is None:
            update = self._plain_update(plan, trained, row, delta)
        else:
            update = self._dp_update(plan, trained, row, delta)
        return finish_step(
            self.program,
            job.params,
            job.data,
            job.state,
            job.directives,
            job.streams,
            plan.source,
            update,
        )

    def _plain_update(
        self, plan: ClientPlan, trained: ChunkResult, row: int, delta: torch.Tensor
    ) -> ClientUpdate:
        """LocalSGD's update: Δw, the mean training loss and the running primary metric."""
        task, seen = self.task, trained.seen[row]
        if trained.hits is not None:
            metrics = {"accuracy": trained.hits[row] / seen} if seen else {}
        elif trained.aucs is not None:
            metrics = {task.primary_metric: trained.aucs[row]} if seen else {}
        else:
            running = task.accumulator()
            for output, y, batch_loss in trained.outputs[row]:
                running.update(output, y, batch_loss)
            metrics = _primary(task, running) if seen else {}
        loss = trained.loss_sum[row] / max(seen, 1)
        return ClientUpdate(
            delta, _meta(plan.job.data, plan.job.directives, delta, loss, metrics, plan.steps)
        )

    def _dp_update(
        self, plan: ClientPlan, trained: ChunkResult, row: int, delta: torch.Tensor
    ) -> ClientUpdate:
        """DP-SGD's update: Δw, the round's DpEvent report and adaptive clipping's Ĉ."""
        dp, job = self.dp, plan.job
        assert dp is not None
        norms = plan.noisy_norms
        args: Any = (plan.steps, plan.clip, norms, trained.loss_sum[row], trained.seen[row])
        update = dp._update(job.data, job.directives, delta, *args)
        state = job.state.tensors
        if dp.params.adaptive_clip is not None and norms:
            c_hat = float(state[CLIP_STATE][0]) if CLIP_STATE in state else 0.0
            c_next = dp._next_clip_hat(c_hat, plan.clip, norms, plan.q * len(job.data))
            update.local_state[CLIP_STATE] = torch.tensor([c_next], dtype=torch.float32)
            update.local_log["dp_sgd"]["clip_hat_next"] = c_next
        return update


def _differ(a: ClientPlan, b: ClientPlan) -> bool:
    """Whether two plans train with different settings (the same object, the usual case
    without an η_l schedule, is compared by identity: no field-by-field comparison per
    client)."""
    return a.train is not b.train and a.train != b.train
