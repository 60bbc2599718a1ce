"""Per-epoch link keys derived from a long-term secret (003 Eq. 6).

``K_{i→x}^{(e)} = KDF(K_i, ID_i, ID_x, e)`` is instantiated as *keyed BLAKE2b*: the
long-term secret K_i is the BLAKE2b key, the message is the little-endian encoding of
(sender id, receiver id, epoch) and the personalisation string fixes the purpose. Why this
and not HKDF: the long-term secret is already a uniform 32-byte key, so HKDF's extract step
adds nothing; keyed BLAKE2b is a PRF in one call, is what libsodium's own ``crypto_kdf``
uses, and comes with pynacl (no second crypto dependency). Distinct (sender, receiver,
epoch) give independent keys, so a key that leaks in epoch e tells nothing about e ± 1
(the rotation of §2.1.8) and a driver's key says nothing of a LEO's.
"""

from __future__ import annotations

import struct

import nacl.hash
from nacl.encoding import RawEncoder

__all__ = ["KDF_PERSON", "KEY_BYTES", "derive_epoch_key"]

#: Key length of XSalsa20-Poly1305.
KEY_BYTES = 32
#: BLAKE2b personalisation (16 bytes): domain separation from any other use of K_i.
KDF_PERSON = b"geofl.uplink.kdf"
_MAX_U32 = 2**32 - 1


def derive_epoch_key(secret: bytes, sender: int, receiver: int, epoch: int) -> bytes:
    """The 32-byte key of link sender → receiver in ``epoch`` (003 Eq. 6).

    Args:
        secret: Long-term secret K_i, 16–64 bytes (32 recommended).
        sender: ID_i, 0 ≤ id < 2³².
        receiver: ID_x of the next hop (driver, LEO, GEO or server), 0 ≤ id < 2³².
        epoch: e, 0 ≤ e < 2³²; incrementing it rotates the key.

    Returns:
        ``BLAKE2b-256(key=secret, person=KDF_PERSON, msg=u32 sender ‖ u32 receiver ‖ u32 e)``.

    Raises:
        ValueError: A secret of the wrong length or an id / epoch out of range.
    """
    if not 16 <= len(secret) <= 64:
        raise ValueError(f"secret: {len(secret)} bytes; use a 32-byte long-term secret")
    for name, value in (("sender", sender), ("receiver", receiver), ("epoch", epoch)):
        if not 0 <= value <= _MAX_U32:
            raise ValueError(f"{name}: {value} is outside [0, 2^32); use a 32-bit id")
    msg = struct.pack("<III", sender, receiver, epoch)
    return nacl.hash.blake2b(
        msg, digest_size=KEY_BYTES, key=secret, person=KDF_PERSON, encoder=RawEncoder
    )
