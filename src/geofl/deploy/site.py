"""A site: the clients one SuperNode hosts, running the simulator's client step.

The site builds the client program with :func:`~geofl.engine.components.build_program`
(the simulator's builder) and runs :func:`~geofl.client.step.client_step` with the
generators of (seed, round, client), so its uploads are the simulator's. Client state
that persists across rounds (algorithm tensors such as SCAFFOLD's c_k, and the client's
privacy ledger) stays on the site, in Flower's per-run context state: a step's new state is
*staged*, and committed when the server acknowledges with the client's next request that
the upload was admitted — an upload that was not keeps the old tensors and only the new
ledger entries, as the simulator does (:meth:`~geofl.engine.scheduler.SyncScheduler._forget_state`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from geofl.client.data import ClientData
from geofl.client.state import ClientState
from geofl.client.step import ClientProgram, ClientStreams, client_step
from geofl.deploy.setup import DeploySetup, fingerprint
from geofl.deploy.wire import TrainRequest, encode_declined, encode_reply
from geofl.engine.components import build_program, client_datasets
from geofl.errors import BudgetExhaustedError, DeployError

__all__ = ["Site", "parse_clients"]


def parse_clients(text: str, num_clients: int) -> list[int]:
    """Client ids from a node config value such as ``"0"``, ``"0,1"`` or ``"2-5"``.

    Raises:
        DeployError: naming the value when it is not ids in ``[0, num_clients)``.
    """
    ids: list[int] = []
    try:
        for part in str(text).replace(" ", "").split(","):
            lo, _, hi = part.partition("-")
            ids.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise DeployError(
            f"node config clients={text!r}: expected ids such as 0,1 or 2-5"
        ) from None
    bad = [k for k in ids if not 0 <= k < num_clients]
    if bad or not ids:
        raise DeployError(
            f"node config clients={text!r}: ids must lie in [0, {num_clients}) "
            f"(federation.num_clients), got {bad or 'none'}"
        )
    return ids


class Site:
    """The clients a SuperNode hosts.

    Args:
        setup: The experiment's (method, seed) with its data and partition.
        clients: The client ids this site hosts.
    """

    def __init__(self, setup: DeploySetup, clients: Sequence[int]) -> None:
        parts = build_program(setup.cfg, setup.method, setup.seed, setup.data)
        everyone = client_datasets(setup.data, setup.partition, parts.task)
        self.seed = setup.seed
        self.program: ClientProgram = parts.program
        self.dim = parts.workspace.spec.numel
        self.clients: dict[int, ClientData] = {k: everyone[k] for k in clients}
        self.specs = self.program.state_specs(self.dim)
        self.fingerprint = fingerprint(setup.cfg, setup.method, setup.seed)

    def train(self, req: TrainRequest, state: RecordDict) -> RecordDict:
        """Run the requested client step on this site's data; the reply's content."""
        d = req.directives
        data = self.clients.get(d.client_id)
        if data is None:
            raise DeployError(
                f"client {d.client_id} is not hosted here (hosts {sorted(self.clients)})"
            )
        self._acknowledge(state, d.client_id, req.ack_round, req.ack_accepted)
        streams = ClientStreams((self.seed, "round", d.round, "client", d.client_id))
        try:
            res = client_step(
                self.program, req.params, data, self._state(state, d.client_id), d, streams
            )
        except BudgetExhaustedError as err:
            return encode_declined(d.client_id, d.round, err.epsilon, err.target)
        self._stage(state, d.client_id, d.round, res.state)
        return encode_reply(res)

    # ---------------------------------------------------------------- state on the site
    def _state(self, state: RecordDict, k: int) -> ClientState:
        """Client ``k``'s committed state (spec fills before its first step)."""
        arrays = state.array_records.get(f"geofl.state.{k}")
        tensors = {}
        for name, spec in self.specs.items():
            if arrays is not None and name in arrays:
                tensors[name] = torch.from_numpy(np.array(arrays[name].numpy(), copy=True))
            else:
                tensors[name] = torch.full(spec.shape, spec.fill, dtype=torch.float32)
        ledger = state.config_records.get(f"geofl.ledger.{k}")
        events = tuple(json.loads(str(ledger["events"]))) if ledger is not None else ()
        return ClientState(tensors, events)

    def _stage(self, state: RecordDict, k: int, round_idx: int, new: ClientState) -> None:
        arrays = {
            n: Array(np.ascontiguousarray(t.detach().numpy())) for n, t in new.tensors.items()
        }
        state[f"geofl.staged.{k}"] = ArrayRecord(arrays)
        events = json.dumps([dict(e) for e in new.dp_events])
        state[f"geofl.staged_meta.{k}"] = ConfigRecord({"round": round_idx, "events": events})

    def _acknowledge(self, state: RecordDict, k: int, ack_round: int, accepted: bool) -> None:
        """Commit (admitted upload) or forget the tensors of (not admitted) the state staged
        in round ``ack_round``; its ledger entries are kept either way."""
        meta = state.config_records.get(f"geofl.staged_meta.{k}")
        if meta is None:
            return
        if int(meta["round"]) == ack_round:  # type: ignore[arg-type]
            staged = state.array_records[f"geofl.staged.{k}"]
            if accepted:
                state[f"geofl.state.{k}"] = staged
            state[f"geofl.ledger.{k}"] = ConfigRecord({"events": meta["events"]})
        del state[f"geofl.staged.{k}"]
        del state[f"geofl.staged_meta.{k}"]
