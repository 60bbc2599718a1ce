"""Content hashes of models and update sets, for commitments and audits (000 §3.5, §4.7).

A model hash is SHA-256 of the flat float32 parameter vector's little-endian bytes, so an
auditor recomputes it from a checkpoint (``geofl ledger verify``). An update-set hash
covers the round's accepted updates in client-id order, each as its id (8 bytes,
little-endian) followed by its float32 bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["params_sha256", "update_set_sha256"]


def _le_bytes(x: torch.Tensor) -> memoryview:
    """The float32 little-endian bytes of ``x`` without a copy where it already is so."""
    arr = x.detach().to(torch.float32).contiguous().numpy().astype("<f4", copy=False)
    return memoryview(arr.data).cast("B")


def params_sha256(params: torch.Tensor) -> str:
    """SHA-256 hex of a ``[D]`` parameter vector (float32, little-endian)."""
    return hashlib.sha256(_le_bytes(params)).hexdigest()


def update_set_sha256(clients: Sequence[int], updates: torch.Tensor) -> str:
    """SHA-256 hex of a round's accepted updates ``[K, D]`` with their client ids."""
    h = hashlib.sha256()
    for i in np.argsort(np.asarray(clients, dtype=np.int64), kind="stable"):
        h.update(int(clients[i]).to_bytes(8, "little", signed=True))
        h.update(_le_bytes(updates[int(i)]))
    return h.hexdigest()
