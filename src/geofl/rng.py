"""Random generators derived from (seed, round, client, purpose) — seeded or secret.

geofl never touches a global RNG. Every random draw takes a generator built here from a
tuple of keys, so that a draw depends only on what it is for, never on what ran before it;
this is what makes resume and parallel execution give identical results.

Where a party's privacy-relevant generators come from is decided here, by its
:class:`RandomSource` (``privacy.randomness``):

* ``seeded`` (:class:`SeededSource`, the simulator's default): the generator of a key tuple
  is seeded by :func:`derive_seed` of the keys — reproducible bit for bit, and therefore
  reproducible by *anyone* who knows the keys. In a deployment the server knows the seed
  (it is in the config fingerprint), the round and the client, so it can regenerate a
  site's DP noise and Poisson batches and subtract them: ε = ∞ against the server.
* ``secure`` (:class:`SecretSource`, ``geofl deploy``'s default): a 256-bit key from the OS
  CSPRNG (:func:`secrets.token_bytes`) held only in memory; the generator of a key tuple
  is seeded by HMAC-SHA256(key, keys) (the first 63 bits). A client draws a new key for
  every client step (:meth:`RandomSource.for_step`), so no two steps share noise; the
  server draws one key for DP-FTRL's tree, whose nodes must keep their noise. Without the
  key the seeds are unpredictable, so nobody else can regenerate the draws. The
  generators themselves are torch's (MT19937) and numpy's (PCG64), which are not
  cryptographic: someone who saw ~624 consecutive raw outputs of one generator could
  predict the rest of *that* generator. geofl never releases raw draws — noise is only
  released added to data-dependent sums — and every (step, purpose) has its own
  independently keyed generator, so nothing links one generator's draws to another's.
  A 63-bit seed also bounds a brute-force search: ~2^62 replays of a client step per
  (round, client) on average, far beyond any server.

Example:
    >>> a = torch_generator(1, "partition")
    >>> b = torch_generator(1, "partition")
    >>> bool(torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b)))
    True
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Literal

import numpy as np
import torch

__all__ = [
    "RANDOMNESS_MODES",
    "SEEDED",
    "RandomSource",
    "Randomness",
    "SecretSource",
    "SeededSource",
    "derive_seed",
    "numpy_generator",
    "random_source",
    "torch_generator",
]

Key = int | str

#: ``privacy.randomness``: where DP noise and sampling come from.
Randomness = Literal["seeded", "secure"]
RANDOMNESS_MODES: tuple[Randomness, ...] = ("seeded", "secure")

_SEED_MASK = (1 << 63) - 1


def _encode(keys: tuple[Key, ...]) -> bytes:
    return "\x1f".join(f"{type(k).__name__}:{k}" for k in keys).encode()


def derive_seed(*keys: Key) -> int:
    """A 63-bit seed from an ordered tuple of keys (stable across processes and machines).

    Args:
        *keys: e.g. ``(seed, "round", 3, "client", 7, "batches")``.

    Returns:
        Non-negative integer below 2**63.
    """
    digest = hashlib.blake2b(_encode(keys), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _SEED_MASK


def torch_generator(*keys: Key) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by :func:`derive_seed` of ``keys``."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(*keys))
    return gen


def numpy_generator(*keys: Key) -> np.random.Generator:
    """A ``numpy.random.Generator`` (PCG64) seeded by :func:`derive_seed` of ``keys``."""
    return np.random.default_rng(derive_seed(*keys))


class RandomSource:
    """Where one party's generators come from: a seed per key tuple (subclasses decide how)."""

    #: The ``privacy.randomness`` mode this source implements.
    mode: Randomness = "seeded"

    def seed(self, *keys: Key) -> int:
        """A non-negative seed below 2**63 for ``keys``."""
        raise NotImplementedError

    def torch(self, *keys: Key) -> torch.Generator:
        """A CPU ``torch.Generator`` seeded by :meth:`seed` of ``keys``."""
        gen = torch.Generator(device="cpu")
        gen.manual_seed(self.seed(*keys))
        return gen

    def numpy(self, *keys: Key) -> np.random.Generator:
        """A ``numpy.random.Generator`` (PCG64) seeded by :meth:`seed` of ``keys``."""
        return np.random.default_rng(self.seed(*keys))

    def for_step(self) -> RandomSource:
        """The source of one client step: this one when seeded (a step is reproducible);
        a fresh secret in secure mode, so that no two steps share noise."""
        return self


class SeededSource(RandomSource):
    """``seeded``: the public derivation :func:`derive_seed` (anyone with the keys can
    regenerate every draw; what makes simulation reproducible)."""

    mode: Randomness = "seeded"

    def seed(self, *keys: Key) -> int:
        return derive_seed(*keys)

    def __repr__(self) -> str:
        return "SeededSource()"


class SecretSource(RandomSource):
    """``secure``: seeds are HMAC-SHA256 of the keys under a secret the party holds.

    The key lives only in this object's memory: it is never logged (``repr`` hides it),
    written to a config, or sent. Whoever needs the same draws again after a restart (the
    server's DP-FTRL tree, whose nodes must keep their noise) stores :attr:`key` with its
    own private state; a site does not, so a restarted site draws fresh noise.

    Args:
        key: At least 32 bytes of secret (:meth:`fresh` draws them from the OS CSPRNG).
    """

    mode: Randomness = "secure"

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError(f"a secret source needs a key of at least 32 bytes, got {len(key)}")
        self.key = bytes(key)

    @classmethod
    def fresh(cls) -> SecretSource:
        """A source keyed by 256 bits from :func:`secrets.token_bytes` (the OS CSPRNG)."""
        return cls(secrets.token_bytes(32))

    def for_step(self) -> SecretSource:
        """A new key per client step: a server that asks for the same (round, client)
        twice — with the same or another model — gets independent noise each time, never
        the same noise twice (which would cancel in the difference of the two uploads)."""
        return SecretSource.fresh()

    def seed(self, *keys: Key) -> int:
        digest = hmac.new(self.key, _encode(keys), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "little") & _SEED_MASK

    def __repr__(self) -> str:
        return "SecretSource(key=<hidden>)"


#: The public derivation (one shared instance: it holds nothing).
SEEDED = SeededSource()


def random_source(mode: Randomness | None) -> RandomSource:
    """The source of ``privacy.randomness`` = ``mode`` (None: ``seeded``, the simulator's
    default); ``secure`` draws a fresh key, so every call gives an independent source."""
    return SecretSource.fresh() if mode == "secure" else SEEDED
