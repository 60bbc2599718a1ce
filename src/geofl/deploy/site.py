"""A site: the clients one SuperNode hosts, running the simulator's client step.

The site builds the client program with :func:`~geofl.engine.components.build_program`
(the simulator's builder) and runs :func:`~geofl.client.step.client_step` with the
generators of (seed, round, client), so its uploads are the simulator's. Client state
that persists across rounds (algorithm tensors such as SCAFFOLD's c_k, DP-SGD's clip
statistic, and the client's privacy ledger) stays on the site, in Flower's per-run context
state: a step's new state is *staged*, and settled by the client's next request, which
names its last admitted round — staged tensors of that round are committed, those of an
upload that was refused or lost are forgotten, and the ledger keeps every release either
way, as the simulator does (:meth:`~geofl.engine.scheduler.SyncScheduler._forget_state`).
Every step is also saved to the site's state directory (:mod:`geofl.deploy.sitestate`),
from which a client whose context state is gone (a run resumed after a SuperLink restart
is a new Flower run) is restored as of the server's checkpoint.

Randomness: with ``privacy.randomness: secure`` (a deployment's default) the program
draws every step's noise and batches from a new secret (:mod:`geofl.rng`), so the
uploads are *not* the simulator's and the server cannot regenerate them; a resumed or
restarted site cannot replay its old noise, so its ledger keeps the releases of steps
after the checkpoint (:meth:`~geofl.deploy.sitestate.SiteStateDir.restore`). With
``seeded`` the uploads equal the simulator's bit for bit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from geofl.client.data import ClientData
from geofl.client.state import ClientState
from geofl.client.step import ClientProgram, ClientStreams, client_step
from geofl.deploy.setup import DeploySetup, fingerprint
from geofl.deploy.sitestate import DEFAULT_STATE_DIR, SiteStateDir, run_key
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
        state_dir: Where the site saves its clients' steps (node config ``state-dir``).
    """

    def __init__(
        self, setup: DeploySetup, clients: Sequence[int], state_dir: Path | None = None
    ) -> None:
        data, partition = setup.data, setup.partition
        if data is None or partition is None:
            raise DeployError("a site needs its data (site-local data: geofl.deploy.sitedata)")
        parts = build_program(setup.cfg, setup.method, setup.seed, data)
        everyone = client_datasets(data, partition, parts.task)
        self.seed = setup.seed
        self.program: ClientProgram = parts.program
        self.replayable = parts.program.randomness.mode == "seeded"  # a rerun repeats noise
        self.workspace, self.task, self.held_out = parts.workspace, parts.task, data.sites
        self.dim = parts.workspace.spec.numel
        self.clients: dict[int, ClientData] = {k: everyone[k] for k in clients}
        self.specs = self.program.state_specs(self.dim)
        self.fingerprint = fingerprint(setup.cfg, setup.method, setup.seed)
        # secure aggregation (geofl.deploy.secagg): the site weighs and sums its clients
        self.secure_aggregation = setup.cfg.privacy.secure_aggregation
        self.weighting = setup.method.weighting.name
        root = DEFAULT_STATE_DIR if state_dir is None else state_dir
        self.disk = SiteStateDir(root, run_key(self.fingerprint), self.specs)

    def check_resume(
        self, plan: Mapping[int, tuple[int, int]], checkpoint: int, flower_run: int
    ) -> None:
        """Check that every hosted client can be restored as of the server's round-
        ``checkpoint`` checkpoint; ``plan``: client → (last admitted round, ledger length).

        Raises:
            DeployError: the first client the site cannot restore (one line).
        """
        for k in sorted(self.clients):
            a, m = plan.get(k, (0, 0))
            self.disk.restore(
                k,
                admitted=a,
                checkpoint=checkpoint,
                ledger=m,
                flower_run=flower_run,
                current=checkpoint + 1,
                replayable=self.replayable,
            )

    def train(self, req: TrainRequest, state: RecordDict, flower_run: int = 0) -> RecordDict:
        """Run the requested client step on this site's data; the reply's content."""
        d = req.directives
        k = d.client_id
        data = self.clients.get(k)
        if data is None:
            raise DeployError(f"client {k} is not hosted here (hosts {sorted(self.clients)})")
        if not self._known(state, k):  # a new Flower run (resumed) or a restarted node
            restored = self.disk.restore(
                k,
                admitted=req.admitted_round,
                checkpoint=req.resume_round,
                ledger=req.ledger_events,
                flower_run=flower_run,
                current=d.round,
                replayable=self.replayable,
            )
            self._commit(state, k, restored)
        self._acknowledge(state, k, req.admitted_round)
        streams = ClientStreams((self.seed, "round", d.round, "client", k))
        try:
            res = client_step(self.program, req.params, data, self._state(state, k), d, streams)
        except BudgetExhaustedError as err:
            return encode_declined(k, d.round, err.epsilon, err.target)
        self.disk.save(k, d.round, res.state, flower_run)  # before the reply leaves
        self._stage(state, k, d.round, res.state)
        self.disk.prune(k, admitted=req.admitted_round, current=d.round)
        return encode_reply(res)

    # ---------------------------------------------------------------- state on the site
    @staticmethod
    def _known(state: RecordDict, k: int) -> bool:
        names = (f"geofl.state.{k}", f"geofl.ledger.{k}", f"geofl.staged_meta.{k}")
        return any(n in state for n in names)

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

    @staticmethod
    def _arrays(new: ClientState) -> ArrayRecord:
        return ArrayRecord(
            {n: Array(np.ascontiguousarray(t.detach().numpy())) for n, t in new.tensors.items()}
        )

    def _commit(self, state: RecordDict, k: int, new: ClientState) -> None:
        state[f"geofl.state.{k}"] = self._arrays(new)
        events = json.dumps([dict(e) for e in new.dp_events])
        state[f"geofl.ledger.{k}"] = ConfigRecord({"events": events})

    def _stage(self, state: RecordDict, k: int, round_idx: int, new: ClientState) -> None:
        state[f"geofl.staged.{k}"] = self._arrays(new)
        events = json.dumps([dict(e) for e in new.dp_events])
        state[f"geofl.staged_meta.{k}"] = ConfigRecord({"round": round_idx, "events": events})

    def _acknowledge(self, state: RecordDict, k: int, admitted: int) -> None:
        """Settle the state staged in client ``k``'s previous step: its tensors are
        committed when that round is the client's last admitted one, else forgotten (the
        upload was refused or lost); its ledger entries are kept either way."""
        meta = state.config_records.get(f"geofl.staged_meta.{k}")
        if meta is None:
            return
        if int(meta["round"]) == admitted:  # type: ignore[arg-type]
            state[f"geofl.state.{k}"] = state.array_records[f"geofl.staged.{k}"]
        state[f"geofl.ledger.{k}"] = ConfigRecord({"events": meta["events"]})
        del state[f"geofl.staged.{k}"]
        del state[f"geofl.staged_meta.{k}"]
