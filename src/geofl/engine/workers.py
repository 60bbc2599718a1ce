"""Parallel client workers: a round's client steps in N processes (``federation.workers``).

Each worker process is started once per (method, seed) run (forked from a ``forkserver``
that imported torch and geofl once, so a start costs milliseconds) with the run's config, the
prepared split and the partition. It builds its own client program and model workspace
(:func:`~geofl.engine.components.build_program`, the simulator's builder) and its clients'
data once; the split's tensors cross into the workers as shared memory
(``torch.multiprocessing``'s reductions: one copy, no pickling), and stored inputs
(``data.cache: mmap``) as the path of their store, reopened read-only. The model a client
starts from crosses through shared ``[D]`` slots the parent overwrites before a round's
jobs are submitted: one slot for the flat engine (every client starts from the global
model), a few for the 003 hierarchy, where each job carries the model version its tractor
holds (:attr:`~geofl.engine.clients.runner.ClientJob.held`: tractors in the asynchronous
hierarchy start from different versions, or from personalized models). The most used
models of the round take the slots; a job whose model found no slot carries it pickled.
Per round only the directives, the client's state rows (and such a model) and the
resulting upload are pickled — what a real client would receive and send.

Results are bit-identical to ``workers: 1``: every draw of a client step comes from
generators keyed by (seed, round, client, purpose) (:class:`~geofl.client.step.ClientStreams`),
the scheduler consumes outcomes in cohort order whatever finished first, and a malicious
client whose behaviour remembers what it saw across clients and rounds (an adaptive
attacker, :class:`~geofl.client.step.ObservesBroadcast`) runs in the parent, in order, as
it would in-process. Floating-point kernels are deterministic for a fixed intra-op thread
count; workers get ``max(1, threads // N)`` threads each (no oversubscription), so runs are
bit-identical to ``workers: 1`` whenever that equals the parent's count (e.g. both 1 —
``OMP_NUM_THREADS=1``, as the tests run); otherwise a kernel that splits a reduction by
thread count may differ in the last bits.

How it scales: a round's wall time is ``max`` over workers of their clients' training
(the critical path: ⌈cohort / N⌉ client steps when clients are alike) plus the serial
server share — validation, aggregation, evaluation, checkpoint — which workers do not
shorten (Amdahl). ``benchmarks/bench_workers.py`` measures both parts.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as torch_mp

from geofl import plugins
from geofl.client.data import ClientData
from geofl.client.step import (
    ClientProgram,
    ClientResult,
    ClientStreams,
    ObservesBroadcast,
    client_step,
)
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.data.splitting.partition import Partition
from geofl.data.storage.lazy import StoredRows
from geofl.engine.components import PreparedData, build_program, client_datasets
from geofl.engine.scheduler import ClientJob, StepOutcome
from geofl.errors import BudgetExhaustedError

__all__ = [
    "HELD_SLOTS",
    "HELD_SLOT_BYTES",
    "PRELOAD",
    "ClientWorkers",
    "model_slots",
    "worker_threads",
]

#: What the fork server imports once per parent process, so that each worker starts by
#: fork in milliseconds instead of re-importing for seconds: this module, every plug-in,
#: and ``torch._dynamo``, which torch's optimisers import on their first step (seconds).
PRELOAD = [__name__, "torch._dynamo", *plugins._PLUGIN_MODULES]


#: Shared model slots of a hierarchy run at most (distinct versions its tractors start from
#: in a round: the newest and the few a downlink has not yet replaced), and the shared memory
#: they may take together; models beyond the slots travel pickled with their job.
HELD_SLOTS = 4
HELD_SLOT_BYTES = 256 << 20


def model_slots(method: MethodConfig, dim: int) -> int:
    """Shared ``[D]`` model slots for ``method``'s jobs: 1 for the flat engine (every client
    starts from the global model), else up to :data:`HELD_SLOTS` within
    :data:`HELD_SLOT_BYTES` (at least one)."""
    if method.hierarchy is None:
        return 1
    return max(1, min(HELD_SLOTS, HELD_SLOT_BYTES // (4 * max(dim, 1))))


def worker_threads(workers: int, threads: int | None = None) -> int:
    """Intra-op threads per worker: the parent's ``threads`` shared out, at least 1."""
    total = torch.get_num_threads() if threads is None else threads
    return max(1, total // workers)


def _reopen_stored_rows(
    filename: str, dtype: str, shape: tuple[int, ...], offset: int, fields: dict[str, Any]
) -> StoredRows:
    source = np.memmap(filename, dtype=np.dtype(dtype), mode="r", shape=shape, offset=offset)
    return StoredRows(source, **fields)


def _reduce_stored_rows(rows: StoredRows) -> tuple[Any, ...]:
    """A stored view crosses into a worker as its store's path, reopened read-only."""
    src = rows.source
    fields = {
        "rows": rows.rows,
        "channels": rows.channels,
        "scale": rows.scale,
        "mean": rows.mean,
        "std": rows.std,
    }
    filename = str(getattr(src, "filename", ""))
    offset = int(getattr(src, "offset", 0))
    return _reopen_stored_rows, (filename, src.dtype.str, tuple(src.shape), offset, fields)


ForkingPickler.register(StoredRows, _reduce_stored_rows)


@dataclass
class _Worker:
    """What a worker process holds for the run's life."""

    seed: int
    program: ClientProgram
    clients: list[ClientData]
    slots: torch.Tensor  # [S, D] shared with the parent: the models jobs start from


_WORKER: _Worker | None = None


def _init_worker(
    cfg: ExperimentConfig,
    method: MethodConfig,
    seed: int,
    data: PreparedData,
    partition: Partition,
    slots: torch.Tensor,
    threads: int,
) -> None:
    """Build the worker's program and client data once (process initializer)."""
    global _WORKER
    torch.set_num_threads(threads)
    plugins.load_all()
    parts = build_program(cfg, method, seed, data)
    clients = client_datasets(data, partition, parts.task)
    _WORKER = _Worker(seed, parts.program, clients, slots)


@dataclass(frozen=True)
class _Declined:
    """A :class:`BudgetExhaustedError` as plain data (its constructor is not pickle's)."""

    client: int
    epsilon: float
    target: float


def _run_job(blob: bytes, slot: int) -> bytes:
    """One client step in a worker: pickled :class:`ClientJob` in, pickled outcome out; the
    client starts from the job's own model when it carries one, else from shared ``slot``."""
    w = _WORKER
    if w is None:
        raise RuntimeError("geofl worker used before its initializer ran")
    job: ClientJob = pickle.loads(blob)
    d = job.directives
    start = w.slots[slot] if job.held is None else job.held
    streams = ClientStreams((w.seed, "round", d.round, "client", d.client_id))
    try:
        res: Any = client_step(w.program, start, w.clients[d.client_id], job.state, d, streams)
    except BudgetExhaustedError as err:
        res = _Declined(err.client, err.epsilon, err.target)
    return pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)


def _outcome(blob: bytes) -> StepOutcome:
    res = pickle.loads(blob)
    if isinstance(res, _Declined):
        return BudgetExhaustedError(res.client, res.epsilon, res.target)
    if not isinstance(res, ClientResult):
        raise TypeError(f"worker returned {type(res).__name__}, not a ClientResult")
    return res


class ClientWorkers:
    """N worker processes running client steps (a :class:`~geofl.engine.scheduler.ClientRunner`).

    Args:
        cfg: The experiment.
        method: The method being run.
        seed: Experiment seed.
        data: The prepared split (its tensors move to shared memory once).
        partition: Client index sets over ``data.train``.
        program: The parent's client program (runs stateful attackers in order).
        clients: The parent's client data (for those attackers).
        program_dim: D, the flat model's length.
        workers: N ≥ 2.
        threads: Intra-op threads per worker (default :func:`worker_threads`).
        slots: Shared ``[D]`` model slots (default :func:`model_slots` of ``method``).
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        method: MethodConfig,
        seed: int,
        data: PreparedData,
        partition: Partition,
        *,
        program: ClientProgram,
        clients: Sequence[ClientData],
        program_dim: int,
        workers: int,
        threads: int | None = None,
        slots: int | None = None,
    ) -> None:
        self.seed, self.program, self.clients = seed, program, clients
        self.workers = workers
        n_slots = model_slots(method, program_dim) if slots is None else slots
        self._slots = torch.empty(n_slots, program_dim, dtype=torch.float32).share_memory_()  # type: ignore[no-untyped-call]
        ctx: Any = torch_mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        self._pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(
                cfg,
                method,
                seed,
                data,
                partition,
                self._slots,
                worker_threads(workers, threads),
            ),
        )

    def _in_parent(self, client: int) -> bool:
        """Whether ``client`` runs here: an attacker that remembers across steps."""
        attack = self.program.attack
        return (
            attack is not None
            and client in attack.clients
            and isinstance(attack, ObservesBroadcast)
        )

    def __call__(
        self, global_params: torch.Tensor, jobs: Sequence[ClientJob]
    ) -> Iterator[StepOutcome]:
        """Fill the shared slots, submit every job, then yield outcomes in job order."""
        remote = [j for j in jobs if not self._in_parent(j.directives.client_id)]
        slot_of = self._fill_slots(global_params, remote)
        futures: list[Future[bytes] | None] = []
        for job in jobs:
            if self._in_parent(job.directives.client_id):
                futures.append(None)
                continue
            start = global_params if job.held is None else job.held
            slot = slot_of.get(id(start))
            if slot is not None:  # the worker reads the model from its slot
                job = ClientJob(job.directives, job.state)
            blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
            futures.append(self._pool.submit(_run_job, blob, -1 if slot is None else slot))
        try:
            for job, fut in zip(jobs, futures, strict=True):
                yield self._local(global_params, job) if fut is None else _outcome(fut.result())
        finally:
            for fut in futures:
                if fut is not None:
                    fut.cancel()

    def _fill_slots(self, global_params: torch.Tensor, jobs: Sequence[ClientJob]) -> dict[int, int]:
        """Copy the models the most ``jobs`` start from into the shared slots (ties: first
        used first); returns ``id(model) → slot``. The jobs keep their models alive."""
        starts = [global_params if j.held is None else j.held for j in jobs]
        by_id = {id(t): t for t in starts}
        ranked = [key for key, _ in Counter(id(t) for t in starts).most_common()]
        slot_of: dict[int, int] = {}
        for slot, key in enumerate(ranked[: self._slots.shape[0]]):
            self._slots[slot].copy_(by_id[key])
            slot_of[key] = slot
        return slot_of

    def _local(self, global_params: torch.Tensor, job: ClientJob) -> StepOutcome:
        d = job.directives
        start = global_params if job.held is None else job.held
        streams = ClientStreams((self.seed, "round", d.round, "client", d.client_id))
        try:
            return client_step(
                self.program, start, self.clients[d.client_id], job.state, d, streams
            )
        except BudgetExhaustedError as err:
            return err

    def close(self) -> None:
        """Stop the worker processes."""
        self._pool.shutdown(wait=True, cancel_futures=True)
