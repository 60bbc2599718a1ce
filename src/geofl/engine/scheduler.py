"""The synchronous round scheduler (000 §3.1.1; the loop of papers 000, 001 and 004).

One round: sample a cohort → permission gate → the strategy configures the round → each
client runs :func:`~geofl.client.step.client_step` on its own state → transport (network
model) → validation → the strategy aggregates the accepted updates → a typed
:class:`~geofl.records.RoundRecord`. Evaluation, checkpoints and subscribers are the run's
business (:mod:`geofl.engine.run`), so an event-driven scheduler (the asynchronous satellite
hierarchy of 003) can reuse every piece here without copying the client step.

Where client steps run (:mod:`geofl.engine.clients.runner`: :class:`ClientRunner`,
:class:`ClientJob`, :class:`LostUpload`, :data:`StepOutcome`) and how a round's uploads are
collected and recorded (:mod:`geofl.engine.records.round`) live in their own modules; the
runner's names are re-exported here.

Every random draw comes from a generator derived from (seed, round, client, purpose).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import numpy as np
import torch

from geofl.attacks.observe import update_statistics
from geofl.client.batched import BatchJob
from geofl.client.data import ClientData
from geofl.client.state import ClientState
from geofl.client.step import ClientResult, ClientStreams, client_step
from geofl.engine.clients.runner import ClientJob, ClientRunner, LostUpload, StepOutcome
from geofl.engine.components import RunComponents
from geofl.engine.records.round import Collected, declined, sync_record, with_hashes
from geofl.engine.uplink.ground import ROUTINE, Transmission, TransmitStatus, link_bytes
from geofl.errors import AggregationError, BudgetExhaustedError
from geofl.records import Rejection, RejectionReason, RoundRecord, RoundStatus
from geofl.rng import numpy_generator
from geofl.server.sampling import Cohort
from geofl.server.strategy import StrategyResult, UpdateBatch
from geofl.server.validate import validate_header, validate_update
from geofl.update import LR_DIRECTIVE, ClientDirectives, ClientUpdate

__all__ = [
    "ClientJob",
    "ClientRunner",
    "Collected",
    "LostUpload",
    "RoundOutcome",
    "Scheduler",
    "StepOutcome",
    "SyncScheduler",
]

#: :meth:`SyncScheduler.round` looks ``_with_hashes`` up here (the engine-overhead benchmark
#: times it by replacing it).
_with_hashes = with_hashes

log = logging.getLogger("geofl")


@dataclass(frozen=True)
class RoundOutcome:
    """A finished round: the new global model, its record and the server's view."""

    params: torch.Tensor
    record: RoundRecord
    observed: dict[str, Any] | None = None


class Scheduler(Protocol):
    """Drives rounds over a run's components."""

    def round(self, global_params: torch.Tensor, round_idx: int) -> RoundOutcome: ...


class SyncScheduler:
    """The synchronous round loop over :class:`~geofl.engine.components.RunComponents`.

    Args:
        comps: The run's components.
        seed: Experiment seed (generator keys).
        allowed: The permission gate: ``allowed(client, round)`` (000 §3.5.3).
        observe_layers: Layer bounds for the server-view statistics, or None to skip them.
        runner: Where client steps run; None: one after another in this process.
    """

    def __init__(
        self,
        comps: RunComponents,
        *,
        seed: int,
        allowed: Callable[[int, int], bool] = lambda c, r: True,
        observe_layers: Sequence[tuple[str, int, int]] | None = None,
        runner: ClientRunner | None = None,
    ) -> None:
        self.c, self.seed, self.allowed = comps, seed, allowed
        self.runner = runner
        self.dim = comps.workspace.spec.numel
        self.observe_layers = observe_layers
        #: The uplink carries a round's uploads as one cohort (:meth:`Uplink.transmit_cohort`);
        #: False: one :meth:`Uplink.transmit` per client, the reference the benchmark and
        #: the equivalence tests compare it with (same results, bit for bit).
        self.cohort_uplink = True
        self.num_classes = _class_count(comps.clients)
        self.previous_aggregate: torch.Tensor | None = None
        # Accepted uploads are copied as they arrive into rows of [K, D] buffers reused
        # across rounds (no per-round allocation of the update tensor).
        self._buffers: dict[str, torch.Tensor] = {}

    def _buffer(self, name: str, rows: int) -> torch.Tensor:
        buf = self._buffers.get(name)
        if buf is None or buf.shape[0] < rows:
            buf = self._buffers[name] = torch.empty(rows, self.dim)
        return buf

    def lr(self, round_idx: int) -> float | None:
        """η_l of round ``round_idx`` when the run schedules it, else None."""
        schedule = self.c.lr_schedule
        return None if schedule is None else float(schedule(round_idx))

    def cohort(self, round_idx: int) -> Cohort:
        """The sampler's draw for ``round_idx`` (generator (seed, round, "participation"))."""
        rng = numpy_generator(self.seed, "round", round_idx, "participation")
        return self.c.sampler(len(self.c.clients), round_idx, rng)

    def run_client(
        self, global_params: torch.Tensor, client: int, directives: ClientDirectives
    ) -> ClientResult:
        """One client's step on its committed state; its new state is staged."""
        streams = ClientStreams((self.seed, "round", directives.round, "client", client))
        state = self.c.store.get(client)
        res = client_step(
            self.c.program, global_params, self.c.clients[client], state, directives, streams
        )
        self.c.store.stage(client, res.state)
        return res

    def _steps(
        self,
        global_params: torch.Tensor,
        directives: Sequence[ClientDirectives],
        held: Callable[[int], torch.Tensor] | None = None,
    ) -> Iterator[StepOutcome]:
        """Each client's step outcome in cohort order (a new state is staged as it comes).

        ``held(k)``: the model client k trains from when clients hold different versions
        (the asynchronous hierarchy); None: every client trains from ``global_params``.
        """
        if self.runner is None and self.c.batched is not None:
            yield from self._batched_steps(global_params, directives, held)
            return
        if self.runner is None:
            for d in directives:
                params = global_params if held is None else held(d.client_id)
                try:
                    yield self.run_client(params, d.client_id, d)
                except BudgetExhaustedError as err:
                    yield err
            return
        jobs = [
            ClientJob(d, self.c.store.get(d.client_id), None if held is None else held(d.client_id))
            for d in directives
        ]
        for d, res in zip(directives, self.runner(global_params, jobs), strict=True):
            if isinstance(res, ClientResult):
                self.c.store.stage(d.client_id, res.state)
            yield res

    def _batched_steps(
        self,
        global_params: torch.Tensor,
        directives: Sequence[ClientDirectives],
        held: Callable[[int], torch.Tensor] | None,
    ) -> Iterator[StepOutcome]:
        """The cohort's steps as one batched computation (``federation.batch_clients``),
        each outcome as :meth:`run_client` would give it; new states staged in order."""
        assert self.c.batched is not None
        jobs = []
        for d in directives:
            k = d.client_id
            params = global_params if held is None else held(k)
            streams = ClientStreams((self.seed, "round", d.round, "client", k))
            jobs.append(BatchJob(params, self.c.clients[k], self.c.store.get(k), d, streams))
        for d, res in zip(directives, self.c.batched.run(jobs), strict=True):
            if isinstance(res, ClientResult):
                self.c.store.stage(d.client_id, res.state)
            yield res

    def _forget_state(self, client: int) -> None:
        """An upload that did not arrive leaves the client's algorithm state as it was (the
        client keeps new state only on the server's acknowledgement, so SCAFFOLD's c stays
        the mean of the c_k); what it released still counts in its privacy ledger."""
        old = self.c.store.get(client)
        new = self.c.store.staged(client)
        if new is not None and old.tensors:
            self.c.store.stage(client, ClientState(old.tensors, new.dp_events))

    def _admit(self, update: ClientUpdate, sender: int, round_idx: int) -> Rejection | None:
        """Why ``sender``'s upload is not accepted (lost in transit or malformed), or None.

        The network model routes an upload by its metadata header, so an upload whose header
        it cannot read, or that claims another sender, never reaches it and is refused as
        malformed.
        """
        meta, network = update.meta, self.c.network
        sure = getattr(network, "always_delivers", False)  # no generator to derive
        if not sure and validate_header(meta) is None and meta.client_id == sender:
            rng = numpy_generator(self.seed, "round", round_idx, "client", sender, "network")
            if not network(meta, rng).delivered:
                return Rejection(sender, RejectionReason.LOST_IN_TRANSIT)
        detail = self._malformed(update, sender)
        return None if detail is None else Rejection(sender, RejectionReason.MALFORMED, detail)

    def _uplink(self, outcomes: Sequence[tuple[int, StepOutcome]]) -> list[Transmission | None]:
        """The 003 uplink (``method.uplink``) of the round's well-formed uploads, in cohort
        order, as one cohort (:attr:`cohort_uplink`) or one client at a time: each
        outcome's transmission, None where the upload never entered the uplink (none, or
        malformed: its buffer would carry it on)."""
        uplink = self.c.uplink
        txs: list[Transmission | None] = [None] * len(outcomes)
        if uplink is None:
            return txs
        rows = [
            i
            for i, (k, res) in enumerate(outcomes)
            if isinstance(res, ClientResult) and self._malformed(res.update, k) is None
        ]
        deltas = [cast(ClientResult, outcomes[i][1]).update.delta for i in rows]
        senders = [outcomes[i][0] for i in rows]
        if not self.cohort_uplink or len(set(senders)) < len(senders):
            got = [uplink.transmit(d, k) for d, k in zip(deltas, senders, strict=True)]
        else:
            got = uplink.transmit_cohort(deltas, senders) if rows else []
        for i, tx in zip(rows, got, strict=True):
            txs[i] = tx
        return txs

    def _transmit(
        self, update: ClientUpdate, sender: int, out: Collected, tx: Transmission | None
    ) -> tuple[ClientUpdate, Rejection | None, Transmission | None]:
        """Take in the uplink's transmission ``tx`` of an upload (None: it never entered
        the uplink): Δw left encoded and sealed, the server opened and decoded it; what
        did not arrive is refused like a lost upload (or held back).

        The decoded Δw replaces the client's, and ``bytes_sent`` becomes the bytes of
        every hop (envelopes included) plus any extra uploaded tensors, sent dense.
        """
        if tx is None:
            return update, None, None
        out.transmissions.append(tx)
        if tx.values is None:
            held = tx.status in (TransmitStatus.HELD, TransmitStatus.SKIPPED)
            reason = RejectionReason.HELD_BACK if held else RejectionReason.LOST_IN_TRANSIT
            why = f"uplink {tx.status.value}" + (f": {tx.detail}" if tx.detail else "")
            return update, Rejection(sender, reason, why), tx
        extra = sum(t.numel() * t.element_size() for t in update.tensors.values())
        meta = replace(update.meta, bytes_sent=link_bytes(tx) + extra)
        return replace(update, delta=tx.values, meta=meta), None, tx

    def _malformed(self, update: ClientUpdate, sender: int) -> str | None:
        """Why ``sender``'s upload is malformed (:func:`validate_update`, or it claims to
        come from another client), or None. The round record, the update-set hash and
        reputation credit an update to its ``client_id``, so it must be its sender's."""
        detail = validate_update(
            update,
            self.dim,
            self.c.strategy.uploads,
            self.c.strategy.scalars,
            num_classes=self.num_classes,
        )
        if detail is None and update.meta.client_id != sender:
            detail = f"client_id {update.meta.client_id} does not match sender {sender}"
        return detail

    def collect(
        self,
        global_params: torch.Tensor,
        trained: list[int],
        round_idx: int,
        held: Callable[[int], torch.Tensor] | None = None,
    ) -> Collected:
        """The round pipeline's client half, shared by every scheduler: the strategy's
        round plan, each trained client's step (``held``: as in :meth:`_steps`), the
        uplink and validation, in cohort order; accepted uploads are copied into the
        ``[K, D]`` buffers. :meth:`round` aggregates what this returns on the flat server;
        the 003 hierarchy (:mod:`geofl.engine.hierarchy.scheduler`) sends it up its tiers instead.

        Args:
            global_params: ``[D]`` the model every client trains from when ``held`` is None.
            trained: The clients that train this round (cohort order, after the gate).
            round_idx: The round.
            held: ``held(k)`` the model client ``k`` trains from (clients holding
                different model versions); None: ``global_params`` for all.
        """
        plan = self.c.strategy.configure(round_idx, trained)
        out = Collected()
        out.payload_bytes = sum(t.numel() * t.element_size() for t in plan.payload.values())
        if self.c.uplink is not None:
            self.c.uplink.begin_round(round_idx)
        directives = self._directives(round_idx, trained, plan.extra, plan.payload)
        steps = self._steps(global_params, directives, held)
        outcomes = self._timed(trained, steps, out)
        if self.c.uplink is None:  # one step's result alive at a time
            for k, res in outcomes:
                self._take(k, res, round_idx, out, len(trained), None)
            return out
        cohort = list(outcomes)  # the uplink takes the cohort's uploads at once, in order
        for (k, res), tx in zip(cohort, self._uplink(cohort), strict=True):
            self._take(k, res, round_idx, out, len(trained), tx)
        return out

    @staticmethod
    def _timed(
        trained: Sequence[int], steps: Iterator[StepOutcome], out: Collected
    ) -> Iterator[tuple[int, StepOutcome]]:
        """Each trained client with its step's outcome; a result's step time adds to
        ``out.train_time``."""
        for k in trained:
            t0 = time.perf_counter()
            res = next(steps)
            if isinstance(res, ClientResult):
                out.train_time += time.perf_counter() - t0
            yield k, res

    def _take(
        self,
        k: int,
        res: StepOutcome,
        round_idx: int,
        out: Collected,
        rows: int,
        tx: Transmission | None,
    ) -> None:
        """A declined step becomes its rejection; a result is received (:meth:`_receive`)."""
        if isinstance(res, BudgetExhaustedError | LostUpload):
            out.rejected.append(declined(res, k, round_idx))
        else:
            self._receive(res, k, round_idx, out, rows, tx)

    def _directives(
        self,
        round_idx: int,
        trained: list[int],
        extra: Mapping[int, Mapping[str, Any]],
        payload: Mapping[str, torch.Tensor],
    ) -> list[ClientDirectives]:
        """Each trained client's directives: the strategy's ``extra`` for it, plus the
        round's η_l when the run schedules it (train.lr_schedule, 001 §6.1.2)."""
        lr = self.lr(round_idx)
        directives = []
        for k in trained:
            mine = extra.get(k, {})
            if lr is not None:
                mine = {**mine, LR_DIRECTIVE: lr}
            directives.append(ClientDirectives(round_idx, k, mine, payload))
        return directives

    def _receive(
        self,
        res: ClientResult,
        k: int,
        round_idx: int,
        out: Collected,
        rows: int,
        sent: Transmission | None = None,
    ) -> None:
        """Take in client ``k``'s step: its logs, then its upload's transmission over the
        uplink (``sent``, from :meth:`_uplink`) and admission; accepted, it fills the next
        row of the ``[rows, D]`` buffers."""
        if res.local_log:
            out.client_log[str(k)] = dict(res.local_log)
        if res.epsilon is not None:
            out.epsilon[str(k)] = res.epsilon
        update, rejection, tx = res.update, None, None
        if self.c.uplink is not None:
            update, rejection, tx = self._transmit(update, k, out, sent)
        if rejection is None:
            rejection = self._admit(update, k, round_idx)
        if rejection is not None:
            self._forget_state(k)
            routine = tx is not None and tx.status in ROUTINE  # the uplink's gate and links
            log.log(
                logging.DEBUG if routine else logging.WARNING,
                "round %d: rejected update of client %d: %s",
                round_idx,
                k,
                rejection.detail or rejection.reason,
            )
            out.rejected.append(rejection)
            return
        row = len(out.accepted)
        self._buffer("delta", rows)[row].copy_(update.delta)
        for name in self.c.strategy.uploads:
            self._buffer(name, rows)[row].copy_(update.tensors[name])
        out.accepted.append(update)

    def round(self, global_params: torch.Tensor, round_idx: int) -> RoundOutcome:
        """Run round ``round_idx`` from ``global_params`` (``[D]``, not modified)."""
        t0 = time.perf_counter()
        cohort = self.cohort(round_idx)
        excluded = [k for k in cohort.clients if not self.allowed(k, round_idx)]
        trained = [k for k in cohort.clients if k not in excluded]
        got = self.collect(global_params, trained, round_idx)
        n_acc = len(got.accepted)
        if self.c.uplink is not None:  # AirComp-FL: the noisy over-the-air sum
            self.c.uplink.superpose(self._buffer("delta", n_acc)[:n_acc])
        batch = UpdateBatch(
            self._buffer("delta", n_acc)[:n_acc],
            [u.meta for u in got.accepted],
            {name: self._buffer(name, n_acc)[:n_acc] for name in self.c.strategy.uploads},
            len(self.c.clients),
        )
        t_agg = time.perf_counter()
        status, result, error = self._aggregate(
            global_params, batch, round_idx, bool(cohort.clients)
        )
        agg_time = time.perf_counter() - t_agg
        params = result.params if result is not None else global_params
        observed = None
        if result is not None and self.observe_layers is not None:
            observed = self._observe(batch, result, round_idx, self.observe_layers)
        record = sync_record(
            round_idx,
            cohort,
            excluded,
            got,
            batch,
            status,
            result,
            error,
            primary=self.c.task.primary_metric,
            dim=self.dim,
            lr=self.lr(round_idx),
            uplink=self.c.uplink,
        )
        record = _with_hashes(record, params, batch)
        record.time_s.update(
            train=got.train_time, aggregate=agg_time, total=time.perf_counter() - t0
        )
        return RoundOutcome(params, record, observed)

    def _aggregate(
        self, global_params: torch.Tensor, batch: UpdateBatch, round_idx: int, sampled: bool
    ) -> tuple[RoundStatus, StrategyResult | None, str | None]:
        if not batch.metas:
            status = RoundStatus.NO_UPDATES if sampled else RoundStatus.EMPTY_COHORT
            why = "no valid update arrived" if sampled else "the sampler drew no client"
            log.warning("round %d: %s; global model unchanged", round_idx, why)
            return status, None, None
        try:
            res = self.c.strategy.aggregate(round_idx, global_params, batch)
        except AggregationError as err:  # e.g. too few updates left for Krum
            log.warning("round %d: %s; global model unchanged", round_idx, err)
            return RoundStatus.AGGREGATION_FAILED, None, str(err)
        return RoundStatus.AGGREGATED, res, None

    def _observe(
        self,
        batch: UpdateBatch,
        result: StrategyResult,
        round_idx: int,
        layers: Sequence[tuple[str, int, int]],
    ) -> dict[str, Any]:
        """The server's legitimate view of this round's updates (for passive attacks)."""
        feats = update_statistics(
            batch.deltas,
            aggregate=result.aggregate,
            previous=self.previous_aggregate,
            layers=layers,
        )
        self.previous_aggregate = result.aggregate.clone()
        clients = [m.client_id for m in batch.metas]
        return {"round": round_idx, "clients": clients, "features": feats.tolist()}


def _class_count(clients: Sequence[ClientData]) -> int | None:
    """C, the label-histogram length all clients share, or None if they do not agree."""
    shapes = {np.shape(c.label_histogram) for c in clients}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    return shape[0] if len(shape) == 1 else None
