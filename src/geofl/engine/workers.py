"""Parallel client workers: a round's client steps in N processes (``federation.workers``).

Each worker process is started once per (method, seed) run (forked from a ``forkserver``
that imported torch and geofl once, so a start costs milliseconds) with the run's config, the
prepared split and the partition. It builds its own client program and model workspace
(:func:`~geofl.engine.components.build_program`, the simulator's builder) and its clients'
data once; the split's tensors cross into the workers as shared memory
(``torch.multiprocessing``'s reductions: one copy, no pickling), and stored inputs
(``data.cache: mmap``) as the path of their store, reopened read-only. The global model
crosses each round through one shared ``[D]`` buffer the parent overwrites before a
round's jobs are submitted; per round only the directives, the client's state rows and the
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

__all__ = ["PRELOAD", "ClientWorkers", "worker_threads"]

#: What the fork server imports once per parent process, so that each worker starts by
#: fork in milliseconds instead of re-importing for seconds: this module, every plug-in,
#: and ``torch._dynamo``, which torch's optimisers import on their first step (seconds).
PRELOAD = [__name__, "torch._dynamo", *plugins._PLUGIN_MODULES]


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
    params: torch.Tensor  # [D] shared with the parent


_WORKER: _Worker | None = None


def _init_worker(
    cfg: ExperimentConfig,
    method: MethodConfig,
    seed: int,
    data: PreparedData,
    partition: Partition,
    params: torch.Tensor,
    threads: int,
) -> None:
    """Build the worker's program and client data once (process initializer)."""
    global _WORKER
    torch.set_num_threads(threads)
    plugins.load_all()
    parts = build_program(cfg, method, seed, data)
    clients = client_datasets(data, partition, parts.task)
    _WORKER = _Worker(seed, parts.program, clients, params)


@dataclass(frozen=True)
class _Declined:
    """A :class:`BudgetExhaustedError` as plain data (its constructor is not pickle's)."""

    client: int
    epsilon: float
    target: float


def _run_job(blob: bytes) -> bytes:
    """One client step in a worker: pickled :class:`ClientJob` in, pickled outcome out."""
    w = _WORKER
    if w is None:
        raise RuntimeError("geofl worker used before its initializer ran")
    job: ClientJob = pickle.loads(blob)
    d = job.directives
    streams = ClientStreams((w.seed, "round", d.round, "client", d.client_id))
    try:
        res: Any = client_step(w.program, w.params, w.clients[d.client_id], job.state, d, streams)
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
    ) -> None:
        self.seed, self.program, self.clients = seed, program, clients
        self.workers = workers
        self._params = torch.empty(program_dim, dtype=torch.float32).share_memory_()  # type: ignore[no-untyped-call]
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
                self._params,
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
        """Submit every job, then yield outcomes in job order."""
        self._params.copy_(global_params)
        futures: list[Future[bytes] | None] = []
        for job in jobs:
            if self._in_parent(job.directives.client_id):
                futures.append(None)
                continue
            blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
            futures.append(self._pool.submit(_run_job, blob))
        try:
            for job, fut in zip(jobs, futures, strict=True):
                yield self._local(global_params, job) if fut is None else _outcome(fut.result())
        finally:
            for fut in futures:
                if fut is not None:
                    fut.cancel()

    def _local(self, global_params: torch.Tensor, job: ClientJob) -> StepOutcome:
        d = job.directives
        streams = ClientStreams((self.seed, "round", d.round, "client", d.client_id))
        try:
            return client_step(
                self.program, global_params, self.clients[d.client_id], job.state, d, streams
            )
        except BudgetExhaustedError as err:
            return err

    def close(self) -> None:
        """Stop the worker processes."""
        self._pool.shutdown(wait=True, cancel_futures=True)
