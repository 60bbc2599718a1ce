"""Client state that persists across rounds, and the store that holds it for all clients.

A stateful algorithm keeps per-client tensors between rounds (SCAFFOLD's control variate
c_k, FedDyn's linear term ∇L_k(θ_k^{t−1})); every client also keeps its own privacy ledger,
the DpEvents of everything it has released, so ε is the client's own account and the
server only reads what clients report.

:class:`ClientStateStore` holds one ``[K, ...]`` array per state tensor — in memory, or
memory-mapped from ``.npy`` files so that K = 1,000 clients × D = 1.1M parameters need not
fit in RAM. Writes of a round are *staged* and applied only by :meth:`~ClientStateStore.commit`,
after the round's checkpoint (which carries the staged rows) is on disk; a kill at any point
is recovered by re-applying the checkpoint's staged rows, so the store and the checkpoint
never disagree.
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl.errors import RunDirError

__all__ = ["ClientState", "ClientStateStore", "StateSpec"]


@dataclass(frozen=True)
class StateSpec:
    """One per-client state tensor.

    Attributes:
        shape: Shape for one client (e.g. ``(D,)``).
        fill: Initial value of every entry.
    """

    shape: tuple[int, ...]
    fill: float = 0.0


@dataclass(frozen=True)
class ClientState:
    """What one client carries from round to round.

    Attributes:
        tensors: Named state tensors (read-only views into the store; a client step returns
            new tensors rather than writing these).
        dp_events: The client's privacy ledger: one JSON-ready event per private release
            (``{"mechanism": "gaussian", "noise_multiplier": z}``), in release order.
    """

    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict)
    dp_events: tuple[Mapping[str, Any], ...] = ()


class ClientStateStore:
    """Per-client state of K clients: one ``[K, *shape]`` float32 array per tensor.

    Args:
        num_clients: K.
        specs: Name → :class:`StateSpec` of each per-client tensor (may be empty).
        path: Directory for memory-mapped ``<name>.npy`` arrays; None keeps them in RAM.
            An existing array of the right shape is reopened (resume).
    """

    def __init__(
        self, num_clients: int, specs: Mapping[str, StateSpec], *, path: Path | None = None
    ) -> None:
        self.num_clients = num_clients
        self.specs = dict(specs)
        self.path = None if path is None else Path(path)
        self._arrays: dict[str, torch.Tensor] = {}
        self._mmaps: dict[str, np.memmap[Any, Any]] = {}
        for name, spec in self.specs.items():
            self._arrays[name] = self._allocate(name, spec)
        self._events: list[list[Mapping[str, Any]]] = [[] for _ in range(num_clients)]
        self._staged: dict[int, ClientState] = {}

    def _allocate(self, name: str, spec: StateSpec) -> torch.Tensor:
        shape = (self.num_clients, *spec.shape)
        if self.path is None:
            return torch.full(shape, spec.fill, dtype=torch.float32)
        self.path.mkdir(parents=True, exist_ok=True)
        file = self.path / f"{name}.npy"
        if file.exists():
            arr = np.lib.format.open_memmap(file, mode="r+")
            if arr.shape != shape or arr.dtype != np.float32:
                raise RunDirError(
                    f"{file}: client state has shape {arr.shape} {arr.dtype}, expected "
                    f"{shape} float32; delete it or start a new run directory"
                )
        else:
            arr = np.lib.format.open_memmap(file, mode="w+", dtype=np.float32, shape=shape)
            if spec.fill != 0.0:  # a new .npy memmap is zero-filled already
                arr[:] = spec.fill
        self._mmaps[name] = arr
        return torch.from_numpy(arr)

    def get(self, client: int) -> ClientState:
        """The committed state of ``client`` (views; do not modify)."""
        return ClientState(
            {name: arr[client] for name, arr in self._arrays.items()},
            tuple(self._events[client]),
        )

    def stage(self, client: int, state: ClientState) -> None:
        """Record ``client``'s new state; applied by :meth:`commit`."""
        missing = set(self.specs) - set(state.tensors)
        if missing:
            raise ValueError(f"client {client}: new state lacks {sorted(missing)}")
        self._staged[client] = state

    def staged(self, client: int) -> ClientState | None:
        """The state staged for ``client`` this round, if any."""
        return self._staged.get(client)

    def commit(self) -> None:
        """Apply every staged state (and flush memory-mapped arrays)."""
        for client, state in sorted(self._staged.items()):
            for name, arr in self._arrays.items():
                arr[client].copy_(state.tensors[name])
            self._events[client] = list(state.dp_events)
        self._staged.clear()
        self._release_pages()

    def _release_pages(self) -> None:
        """Flush memory-mapped arrays and drop their pages from this process's resident set
        (they stay in the page cache), so RSS does not grow with every row ever touched."""
        for mm in self._mmaps.values():
            mm.flush()
            raw = getattr(mm, "_mmap", None)  # numpy.memmap keeps its mmap.mmap here
            if raw is not None and hasattr(mmap, "MADV_DONTNEED"):
                raw.madvise(mmap.MADV_DONTNEED)

    def events(self, client: int) -> tuple[Mapping[str, Any], ...]:
        """The committed privacy ledger of ``client``."""
        return tuple(self._events[client])

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs: staged rows, ledgers and (in RAM) the arrays."""
        # No copies: the checkpoint is serialised before :meth:`commit` writes the arrays,
        # and staged tensors are the client step's own fresh tensors.
        staged = {k: dict(s.tensors) for k, s in self._staged.items()}
        events = [list(e) for e in self._events]
        for k, s in self._staged.items():
            events[k] = list(s.dp_events)
        out: dict[str, Any] = {"staged": staged, "events": events}
        if self.path is None:
            out["arrays"] = dict(self._arrays)
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (re-applies the staged rows of its round)."""
        if self.path is None:
            for name, arr in self._arrays.items():
                arr.copy_(state["arrays"][name])
        for k, tensors in state.get("staged", {}).items():
            for name, arr in self._arrays.items():
                arr[int(k)].copy_(tensors[name])
        self._events = [list(e) for e in state["events"]]
        self._staged.clear()
        for mm in self._mmaps.values():
            mm.flush()
