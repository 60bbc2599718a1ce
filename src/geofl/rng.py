"""Deterministic random generators derived from (seed, round, client, purpose).

geofl never touches a global RNG. Every random draw takes a generator built here from a
tuple of keys, so that a draw depends only on what it is for, never on what ran before it;
this is what makes resume and parallel execution give identical results.

Example:
    >>> a = torch_generator(1, "partition")
    >>> b = torch_generator(1, "partition")
    >>> bool(torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b)))
    True
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

__all__ = ["derive_seed", "numpy_generator", "torch_generator"]

Key = int | str


def derive_seed(*keys: Key) -> int:
    """A 63-bit seed from an ordered tuple of keys (stable across processes and machines).

    Args:
        *keys: e.g. ``(seed, "round", 3, "client", 7, "batches")``.

    Returns:
        Non-negative integer below 2**63.
    """
    text = "\x1f".join(f"{type(k).__name__}:{k}" for k in keys)
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def torch_generator(*keys: Key) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by :func:`derive_seed` of ``keys``."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(*keys))
    return gen


def numpy_generator(*keys: Key) -> np.random.Generator:
    """A ``numpy.random.Generator`` (PCG64) seeded by :func:`derive_seed` of ``keys``."""
    return np.random.default_rng(derive_seed(*keys))
