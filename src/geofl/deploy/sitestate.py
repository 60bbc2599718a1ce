"""A site's client state on its own disk, so that a deployment outlives its SuperLink.

Flower keeps a site's per-run context state only for one run: a deployment resumed after a
SuperLink restart is a new Flower run, and its sites would start their clients afresh
(SCAFFOLD's c_k at zero, DP-SGD's clip statistic at its initial value, an empty privacy
ledger). So every client step a site takes is also written to a site-local directory::

    <state-dir>/<run key>/client-<k>/round-<r>.pt

where the run key hashes the config fingerprint (every result-relevant section and the
seed, :func:`run_key`), and ``round-<r>.pt`` holds the state client ``k`` staged in round
``r`` (its tensors and its whole privacy ledger), written atomically before the reply
leaves. Nothing is committed by writing it: whether round r's tensors became the client's
state is the server's word, carried by every request as the client's last *admitted* round
(:mod:`geofl.deploy.wire`).

A resumed run restarts from the server's round-c checkpoint. The server tells the site c,
the client's last admitted round a ≤ c and the length m of the client's ledger in its
checkpoint; the site rebuilds (:meth:`SiteStateDir.restore`)

* the tensors of its round-a step (the spec's fill when a = 0) — the simulator keeps a
  client's tensors only from admitted uploads (SCAFFOLD's c stays the mean of the c_k);
* the ledger of its newest step at or before c (a step the server never admitted still
  released noise and counts, as in the simulator);

and refuses with one line when it lacks the round-a step or its ledger is shorter than m
(a state directory older than the checkpoint). Steps after c belong to rounds the
checkpoint does not cover: with seeded randomness they are dropped (those rounds rerun
identically, releasing nothing new); with secure randomness (``privacy.randomness``) the
rerun draws fresh noise, so the steps after c stay on disk and the restored ledger is the
longest saved one — their releases happened and count, the rerun's count on top.

Pruning keeps at most three steps per client: a future resume starts from a checkpoint no
older than the round before the current request, so it needs only the last admitted step,
the newest step before the current round, and the steps from the current round on.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from geofl.client.state import ClientState, StateSpec
from geofl.errors import DeployError
from geofl.io import atomic_write

__all__ = ["DEFAULT_STATE_DIR", "SiteStateDir", "run_key"]

#: Where a site keeps its clients' steps when its node config names no ``state-dir``.
DEFAULT_STATE_DIR = Path("~/.geofl/site-state")

_STEP = re.compile(r"round-(\d+)\.pt")


def run_key(fp: Mapping[str, str]) -> str:
    """The run's identity on a site's disk: a hash of the config fingerprint (with seed)."""
    text = json.dumps(dict(fp), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SiteStateDir:
    """The saved client steps of one deployment (run key) on a site.

    Args:
        root: The site's state directory (node config ``state-dir``).
        key: :func:`run_key` of the deployment.
        specs: The client program's state tensors (shape and initial fill).
    """

    def __init__(self, root: Path, key: str, specs: Mapping[str, StateSpec]) -> None:
        self.path = Path(root).expanduser() / key
        self.specs = dict(specs)

    def _client(self, k: int) -> Path:
        return self.path / f"client-{k}"

    def _file(self, k: int, r: int) -> Path:
        return self._client(k) / f"round-{r}.pt"

    def rounds(self, k: int) -> list[int]:
        """Rounds whose step of client ``k`` is saved, ascending."""
        d = self._client(k)
        if not d.is_dir():
            return []
        found = (_STEP.fullmatch(p.name) for p in d.iterdir())
        return sorted(int(m.group(1)) for m in found if m is not None)

    def save(self, k: int, r: int, state: ClientState, flower_run: int) -> None:
        """Write client ``k``'s state staged in round ``r`` (atomic, ``fsync``-ed)."""
        doc: dict[str, Any] = {
            "round": r,
            "flower_run": int(flower_run),
            "tensors": {n: t.detach().clone() for n, t in state.tensors.items()},
            "events": json.dumps([dict(e) for e in state.dp_events]),
        }
        atomic_write(self._file(k, r), lambda fh: torch.save(doc, fh))

    def load(self, k: int, r: int) -> tuple[ClientState, int]:
        """Client ``k``'s step of round ``r`` and the Flower run that wrote it.

        Raises:
            DeployError: naming the file when it is damaged.
        """
        path = self._file(k, r)
        try:
            doc = torch.load(path, weights_only=True)
            events = tuple(json.loads(doc["events"]))
            tensors = {n: doc["tensors"][n] for n in self.specs}
        except (
            OSError,
            RuntimeError,
            ValueError,
            KeyError,
            EOFError,
            pickle.UnpicklingError,
        ) as err:
            raise DeployError(
                f"{path} is damaged ({type(err).__name__}); restore the site's state-dir "
                "from a backup or start a new run"
            ) from None
        return ClientState(tensors, events), int(doc["flower_run"])

    def fresh(self) -> dict[str, torch.Tensor]:
        """The state tensors before a client's first step (the specs' fills)."""
        return {n: torch.full(s.shape, s.fill, dtype=torch.float32) for n, s in self.specs.items()}

    def restore(
        self,
        k: int,
        *,
        admitted: int,
        checkpoint: int,
        ledger: int,
        flower_run: int,
        current: int,
        replayable: bool = True,
    ) -> ClientState:
        """Client ``k``'s state as of the server's round-``checkpoint`` checkpoint.

        Args:
            k: Client id.
            admitted: The client's last admitted round (0: none).
            checkpoint: The round of the checkpoint the server resumed from (c; 0: none).
            ledger: Events in the client's ledger on the server (m).
            flower_run: This Flower run's id: its own steps after ``checkpoint`` and
                before ``current`` stay usable (a SuperNode that lost its context
                mid-run); every other step after ``checkpoint`` is dropped.
            current: The round now asked for.
            replayable: Whether a rerun step repeats its noise (seeded randomness); False
                (secure): the ledger keeps the releases of the steps after ``checkpoint``.

        Raises:
            DeployError: one line naming the client, the round and the directory when the
                site lacks the round-``admitted`` step or its ledger is shorter than the
                server's.
        """
        keep: list[int] = []
        released: tuple[Any, ...] = ()  # secure: the longest ledger of a dropped step
        for r in self.rounds(k):
            if r <= checkpoint or (r < current and self.load(k, r)[1] == flower_run):
                keep.append(r)
            elif replayable:
                self._file(k, r).unlink(missing_ok=True)
            else:
                released = max(released, self.load(k, r)[0].dp_events, key=len)
        hint = (
            "start this SuperNode with the state-dir it used before the restart (node "
            "config state-dir), or start the run afresh"
        )
        if admitted and admitted not in keep:
            raise DeployError(
                f"client {k}: no saved state of its round-{admitted} step (its last admitted "
                f"upload) under {self._client(k)}; {hint}"
            )
        tensors = self.load(k, admitted)[0].tensors if admitted else self.fresh()
        events = self.load(k, keep[-1])[0].dp_events if keep else ()
        events = max(events, released, key=len)  # ledgers only grow: the longest holds all
        if len(events) < ledger:
            raise DeployError(
                f"client {k}: saved privacy ledger under {self._client(k)} has {len(events)} "
                f"events, the server's {ledger}; {hint}"
            )
        return ClientState(dict(tensors), events)

    def prune(self, k: int, *, admitted: int, current: int) -> None:
        """Drop client ``k``'s steps no resume can need once round ``current`` is asked
        for with ``admitted`` as its last admitted round: those before ``admitted`` and,
        between ``admitted`` and ``current``, all but the newest."""
        before = [r for r in self.rounds(k) if r < current]
        newest = before[-1] if before else None
        for r in before:
            if r != admitted and r != newest:
                self._file(k, r).unlink(missing_ok=True)
