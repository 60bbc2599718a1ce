"""Per-hop XSalsa20-Poly1305 envelopes with an authenticated header (003 §2.1.8, Eq. 7).

Wire format (one hop, e.g. tractor → driver)::

    header (24 B) ‖ Poly1305 tag (16 B) ‖ XSalsa20 ciphertext (len B)

The header is ``<BBHIIIQ``: version, reserved (0), epoch e (u16), round t (u32), sender
ID_i (u32), payload length (u32), counter ctr (u64). **The header is the nonce.**
XSalsa20-Poly1305 (libsodium ``crypto_secretbox``) takes no associated data, but it derives
both the keystream and the one-time Poly1305 key from (key, nonce): a header changed in
any bit yields an unrelated Poly1305 key, so the tag fails to verify except with
probability ≈ 2⁻¹⁰⁶ — the header is authenticated exactly like associated data, at no
cost in bytes or time, and no copy of it rides in the plaintext. Nonce uniqueness under a
key, which the cipher requires, holds because the header contains (epoch, sender,
counter) and the sender never reuses a counter within an epoch (the paper's "nonces from
(epoch, sender, ctr)"); the key itself is per (sender, receiver, epoch) (Eq. 6,
:func:`~geofl.security.keys.derive_epoch_key`). The receiver is bound by the key: an
envelope sent to another hop fails authentication. Because the layout is exactly
``nonce ‖ secretbox``, any libsodium binding opens it (``SecretBox(key).decrypt(wire)``,
``crypto_secretbox_open_easy(wire[24:], wire[:24], key)``).

The :class:`Opener` never raises on what arrives: every envelope yields an
:class:`OpenResult` with the payload or a :class:`RejectReason`, and rejections are
counted and logged, so a round goes on without them.
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import NamedTuple

from nacl._sodium import ffi as _ffi  # pynacl's cffi binding of libsodium
from nacl._sodium import lib as _lib
from nacl.bindings import crypto_secretbox_easy

from geofl.security.keys import derive_epoch_key
from geofl.security.replay import ReplayVerdict, ReplayWindow

__all__ = [
    "HEADER_BYTES",
    "OVERHEAD_BYTES",
    "VERSION",
    "EnvelopeHeader",
    "OpenResult",
    "Opener",
    "RejectReason",
    "Sealer",
    "open_sealed",
    "parse_header",
    "rotate_all",
    "seal",
]

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<BBHIIIQ")
#: Header bytes (= the XSalsa20 nonce length).
HEADER_BYTES = _HEADER.size
#: Poly1305 tag bytes.
TAG_BYTES = 16
#: Bytes an envelope adds to its payload.
OVERHEAD_BYTES = HEADER_BYTES + TAG_BYTES
#: Envelope format version.
VERSION = 1
_MAX_EPOCH = 2**16 - 1
_MAX_U32 = 2**32 - 1
_MAX_COUNTER = 2**64 - 1


class EnvelopeHeader(NamedTuple):
    """The authenticated header (sent in clear, bound to the tag); a named tuple because
    one is built per message on the receiver's hot path.

    Attributes:
        epoch: Key epoch e (u16).
        round: Round index t the payload belongs to (u32).
        sender: ID_i of the sending hop (u32).
        length: Payload length in bytes (u32).
        counter: ctr, monotonic per (sender, receiver, epoch) (u64).
        version: Format version.
    """

    epoch: int
    round: int
    sender: int
    length: int
    counter: int
    version: int = VERSION

    def pack(self) -> bytes:
        """The 24 header bytes (also the nonce)."""
        return _HEADER.pack(
            self.version, 0, self.epoch, self.round, self.sender, self.length, self.counter
        )


class RejectReason(StrEnum):
    """Why an envelope was refused."""

    TRUNCATED = "truncated"  # shorter than header + tag, or than the header's length
    BAD_HEADER = "bad_header"  # unknown version, reserved byte set, or trailing bytes
    UNKNOWN_SENDER = "unknown_sender"  # no long-term secret for the sender id
    WRONG_EPOCH = "wrong_epoch"  # epoch outside the receiver's accepted epochs
    REPLAYED = "replayed"  # counter already accepted inside the window
    TOO_OLD = "too_old"  # counter below the window (reordered beyond it)
    AUTH_FAILED = "auth_failed"  # tag mismatch: tampered bits or a wrong key


class OpenResult(NamedTuple):
    """Outcome of opening one envelope: ``payload`` xor ``reason`` is None."""

    payload: bytes | None
    header: EnvelopeHeader | None
    reason: RejectReason | None

    @property
    def ok(self) -> bool:
        """Whether the envelope was accepted."""
        return self.reason is None


def seal(key: bytes, header: EnvelopeHeader, payload: bytes) -> bytes:
    """``header ‖ XSalsa20-Poly1305(key, nonce=header, payload)`` (003 Eq. 7).

    Args:
        key: 32-byte link key of the epoch.
        header: Its ``length`` must equal ``len(payload)``.
        payload: Bytes to protect.
    """
    if header.length != len(payload):
        raise ValueError(f"header length {header.length} != payload length {len(payload)}")
    nonce = header.pack()
    return nonce + crypto_secretbox_easy(payload, nonce, key)


def parse_header(wire: bytes) -> EnvelopeHeader | RejectReason:
    """The header of ``wire`` (not yet authenticated), or why it cannot be one."""
    if len(wire) < OVERHEAD_BYTES:
        return RejectReason.TRUNCATED
    version, reserved, epoch, rnd, sender, length, ctr = _HEADER.unpack_from(wire)
    if version != VERSION or reserved != 0:
        return RejectReason.BAD_HEADER
    body = len(wire) - OVERHEAD_BYTES
    if body != length:
        return RejectReason.TRUNCATED if body < length else RejectReason.BAD_HEADER
    return EnvelopeHeader(epoch, rnd, sender, length, ctr, version)


def open_sealed(key: bytes, wire: bytes) -> bytes | None:
    """The payload of ``wire`` (``header ‖ ciphertext ‖ tag``) if its tag verifies under
    ``key``, else None.

    Calls libsodium's ``crypto_secretbox_open_easy`` through pynacl's own cffi binding
    with pointers into ``wire`` (nonce = the header, then the box), the same C function
    pynacl's ``crypto_secretbox_open_easy`` wraps, minus its two slice copies and argument
    checks (done here: key and minimum length) — at 1 kB payloads those cost about as much
    as the cipher (``benchmarks/bench_envelope.py``).
    """
    n = len(wire) - OVERHEAD_BYTES
    if n < 0 or len(key) != 32:
        return None
    out = _ffi.new("unsigned char[]", max(n, 1))
    src = _ffi.from_buffer(wire)
    if _lib.crypto_secretbox_open_easy(out, src + HEADER_BYTES, n + TAG_BYTES, src, key) != 0:
        return None
    return bytes(_ffi.buffer(out, n))


class Sealer:
    """One sender's side of a link: keys per epoch, a counter that never repeats in one.

    Args:
        secret: The sender's long-term secret K_i.
        sender: ID_i.
        receiver: ID_x of the next hop.
        epoch: Initial epoch.
    """

    def __init__(self, secret: bytes, sender: int, receiver: int, epoch: int = 0) -> None:
        self.secret, self.sender, self.receiver = secret, sender, receiver
        self.rotate(epoch)

    def rotate(self, epoch: int) -> None:
        """Switch to ``epoch`` (key rotation, §2.1.8); its counter restarts at 0."""
        if not 0 <= epoch <= _MAX_EPOCH:
            raise ValueError(f"epoch: {epoch} is outside [0, 65535]; rotate less often")
        self.epoch = epoch
        self.key = derive_epoch_key(self.secret, self.sender, self.receiver, epoch)
        self.counter = 0

    def seal(self, payload: bytes, round_idx: int) -> bytes:
        """Seal ``payload`` for round ``round_idx`` under the next counter."""
        if self.counter > _MAX_COUNTER:
            raise ValueError("counter exhausted in this epoch; rotate the epoch")
        if len(payload) > _MAX_U32 or not 0 <= round_idx <= _MAX_U32:
            raise ValueError(f"payload of {len(payload)} B or round {round_idx} out of range")
        header = EnvelopeHeader(self.epoch, round_idx, self.sender, len(payload), self.counter)
        self.counter += 1
        return seal(self.key, header, payload)


class Opener:
    """One receiver's side: long-term secrets of its senders, replay windows, counters.

    Args:
        receiver: ID_x of this hop.
        secrets: Sender id → its long-term secret (provisioned by the trust anchor).
        epoch: Current epoch.
        window: Replay-window width W (counters).
        epoch_grace: Also accept this many epochs before the current one (messages
            buffered across a rotation, e.g. during a satellite contact gap).
    """

    def __init__(
        self,
        receiver: int,
        secrets: Mapping[int, bytes],
        epoch: int = 0,
        *,
        window: int = 64,
        epoch_grace: int = 0,
    ) -> None:
        if epoch_grace < 0:
            raise ValueError(f"epoch_grace: {epoch_grace}; use 0 or more epochs")
        ReplayWindow(window)  # validates the width
        self.receiver, self.secrets, self.epoch = receiver, dict(secrets), epoch
        self.window, self.epoch_grace = window, epoch_grace
        self.accepted = 0
        self.rejected: Counter[RejectReason] = Counter()
        self._slots: dict[tuple[int, int], tuple[bytes, ReplayWindow]] = {}

    def _reject(self, reason: RejectReason, header: EnvelopeHeader | None) -> OpenResult:
        self.rejected[reason] += 1
        who = f"sender {header.sender} epoch {header.epoch} ctr {header.counter}" if header else ""
        log.info("receiver %d rejected an envelope: %s %s", self.receiver, reason.value, who)
        return OpenResult(None, header, reason)

    def _slot(self, head: EnvelopeHeader) -> tuple[bytes, ReplayWindow] | RejectReason:
        """Key and replay window of (sender, epoch), made on first use, or why none."""
        if head.sender not in self.secrets:
            return RejectReason.UNKNOWN_SENDER
        if not self.epoch - self.epoch_grace <= head.epoch <= self.epoch:
            return RejectReason.WRONG_EPOCH
        key = derive_epoch_key(self.secrets[head.sender], head.sender, self.receiver, head.epoch)
        slot = self._slots[(head.sender, head.epoch)] = (key, ReplayWindow(self.window))
        return slot

    def open(self, wire: bytes) -> OpenResult:
        """Authenticate and decrypt ``wire``; never raises on its content.

        Checks in order: length and header format, known sender, accepted epoch, replay
        window (before decrypting: a replay costs no cipher work), then the tag. Only an
        authenticated counter moves the window. A (sender, epoch) slot exists only for a
        known sender in an accepted epoch (:meth:`rotate` prunes), so the common case is
        one dictionary lookup.
        """
        if type(wire) is not bytes:
            wire = bytes(wire)
        head = parse_header(wire)
        if isinstance(head, RejectReason):
            return self._reject(head, None)
        slot = self._slots.get((head.sender, head.epoch))
        if slot is None:
            made = self._slot(head)
            if isinstance(made, RejectReason):
                return self._reject(made, head)
            slot = made
        key, window = slot
        if head.counter <= window.highest:  # only then can it be a replay
            verdict = window.check(head.counter)
            if verdict is ReplayVerdict.REPLAYED:
                return self._reject(RejectReason.REPLAYED, head)
            if verdict is ReplayVerdict.TOO_OLD:
                return self._reject(RejectReason.TOO_OLD, head)
        payload = open_sealed(key, wire)
        if payload is None:
            return self._reject(RejectReason.AUTH_FAILED, head)
        window.commit(head.counter)
        self.accepted += 1
        return OpenResult(payload, head, None)

    def rotate(self, epoch: int) -> None:
        """Advance to ``epoch``; windows and keys of epochs out of grace are dropped."""
        self.epoch = epoch
        keep = epoch - self.epoch_grace
        self._slots = {k: v for k, v in self._slots.items() if keep <= k[1] <= epoch}


def rotate_all(epoch: int, sealers: Iterable[Sealer], openers: Iterable[Opener]) -> None:
    """Move every sealer and opener not yet at ``epoch`` to it (003 §2.1.8 key epochs)."""
    endpoints: list[Sealer | Opener] = [*sealers, *openers]
    for endpoint in endpoints:
        if endpoint.epoch != epoch:
            endpoint.rotate(epoch)
