"""Envelopes (003 §2.1.8): round trip, interoperability, every rejection reason."""

from __future__ import annotations

import hashlib
import struct

import pytest
from nacl.bindings import crypto_secretbox_open
from nacl.secret import SecretBox

from geofl.security.envelope import (
    HEADER_BYTES,
    OVERHEAD_BYTES,
    EnvelopeHeader,
    Opener,
    RejectReason,
    Sealer,
    open_sealed,
    parse_header,
    seal,
)
from geofl.security.keys import KDF_PERSON, derive_epoch_key
from geofl.security.replay import ReplayVerdict, ReplayWindow

SECRET = bytes(range(32))
OTHER = bytes(range(1, 33))

# NaCl distribution, tests/secretbox.c (also in pynacl's and libsodium's test suites).
NACL_KEY = "1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389"
NACL_NONCE = "69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37"
NACL_MSG = (
    "be075fc53c81f2d5cf141316ebeb0c7b5228c52a4c62cbd44b66849b64244ffce5ecbaaf33bd751a1ac728d45e"
    "6c61296cdc3c01233561f41db66cce314adb310e3be8250c46f06dceea3a7fa1348057e2f6556ad6b1318a024a83"
    "8f21af1fde048977eb48f59ffd4924ca1c60902e52f0a089bc76897040e082f937763848645e0705"
)
NACL_BOX = (
    "f3ffc7703f9400e52a7dfb4b3d3305d98e993b9f48681273c29650ba32fc76ce48332ea7164d96a4476fb8c531"
    "a1186ac0dfc17c98dce87b4da7f011ec48c97271d2c20f9b928fe2270d6fb863d51738b48eeee314a7cc8ab93216"
    "4548e526ae90224368517acfeabd6bb3732bc0e9da99832b61ca01b6de56244a9e88d5f9b37973f622a43d14a659"
    "9b1f654cb45a74e355a5"
)


def link(window: int = 8, grace: int = 0) -> tuple[Sealer, Opener]:
    return Sealer(SECRET, sender=7, receiver=100), Opener(
        100, {7: SECRET}, window=window, epoch_grace=grace
    )


def test_round_trip_and_layout() -> None:
    sealer, opener = link()
    wire = sealer.seal(b"model update", round_idx=3)
    assert len(wire) == len(b"model update") + OVERHEAD_BYTES == 12 + 40
    res = opener.open(wire)
    assert res.ok and res.payload == b"model update"
    assert res.header == EnvelopeHeader(epoch=0, round=3, sender=7, length=12, counter=0)
    assert opener.accepted == 1 and not opener.rejected
    empty = opener.open(sealer.seal(b"", round_idx=3))
    assert empty.ok and empty.payload == b""


def test_known_answer_vector_in_envelope_layout() -> None:
    """The NaCl secretbox vector, laid out as nonce ‖ box, opens with our code path."""
    wire = bytes.fromhex(NACL_NONCE) + bytes.fromhex(NACL_BOX)
    assert open_sealed(bytes.fromhex(NACL_KEY), wire) == bytes.fromhex(NACL_MSG)


def test_envelope_opens_with_raw_libsodium_bindings() -> None:
    sealer, _ = link()
    wire = sealer.seal(b"x" * 1000, round_idx=1)
    key = derive_epoch_key(SECRET, 7, 100, 0)
    # classic NaCl API (zero-padded buffers, libsodium crypto_secretbox_open, not _easy)
    padded = crypto_secretbox_open(wire[HEADER_BYTES:], wire[:HEADER_BYTES], key)
    assert padded == b"x" * 1000
    assert SecretBox(key).decrypt(wire) == b"x" * 1000


def test_kdf_is_keyed_blake2b_and_separates_links_and_epochs() -> None:
    ref = hashlib.blake2b(
        struct.pack("<III", 7, 100, 3), digest_size=32, key=SECRET, person=KDF_PERSON
    ).digest()
    assert derive_epoch_key(SECRET, 7, 100, 3) == ref
    keys = {derive_epoch_key(SECRET, s, r, e) for s in (1, 2) for r in (5, 6) for e in (0, 1)}
    assert len(keys) == 8
    with pytest.raises(ValueError, match="secret"):
        derive_epoch_key(b"short", 1, 2, 3)
    with pytest.raises(ValueError, match="epoch"):
        derive_epoch_key(SECRET, 1, 2, -1)


def test_every_flipped_bit_is_rejected() -> None:
    """A small envelope: each of its 8·len bits flipped alone is refused, never raised."""
    sealer, _ = link()
    wire = sealer.seal(b"abcdefgh", round_idx=2)
    opener = Opener(100, {7: SECRET}, window=8)
    for pos in range(len(wire)):
        for bit in range(8):
            bad = bytearray(wire)
            bad[pos] ^= 1 << bit
            res = opener.open(bytes(bad))
            assert not res.ok and res.payload is None, (pos, bit)
    assert opener.accepted == 0
    assert sum(opener.rejected.values()) == 8 * len(wire)
    # header bits are caught by parsing or by the tag; body bits only by the tag
    assert set(opener.rejected) <= {
        RejectReason.AUTH_FAILED,
        RejectReason.BAD_HEADER,
        RejectReason.TRUNCATED,
        RejectReason.UNKNOWN_SENDER,
        RejectReason.WRONG_EPOCH,
    }
    assert opener.open(wire).ok  # the untouched envelope still opens: nothing was burnt


def test_replay_reorder_and_window() -> None:
    sealer, opener = link(window=4)
    wires = [sealer.seal(bytes([i]), round_idx=1) for i in range(8)]
    assert opener.open(wires[2]).ok
    assert opener.open(wires[2]).reason is RejectReason.REPLAYED
    assert opener.open(wires[0]).ok  # reordered, inside the window
    assert opener.open(wires[7]).ok  # window slides to (3, 7]
    assert opener.open(wires[5]).ok
    assert opener.open(wires[1]).reason is RejectReason.TOO_OLD
    assert opener.open(wires[5]).reason is RejectReason.REPLAYED
    assert opener.rejected == {RejectReason.REPLAYED: 2, RejectReason.TOO_OLD: 1}


def test_wrong_key_wrong_epoch_unknown_sender_truncated() -> None:
    sealer, opener = link()
    wire = sealer.seal(b"payload", round_idx=1)
    assert Opener(100, {7: OTHER}).open(wire).reason is RejectReason.AUTH_FAILED
    assert Opener(101, {7: SECRET}).open(wire).reason is RejectReason.AUTH_FAILED  # other hop
    assert Opener(100, {8: SECRET}).open(wire).reason is RejectReason.UNKNOWN_SENDER
    assert Opener(100, {7: SECRET}, epoch=1).open(wire).reason is RejectReason.WRONG_EPOCH
    assert Opener(100, {7: SECRET}, epoch=1, epoch_grace=1).open(wire).ok
    for cut in (0, 10, OVERHEAD_BYTES - 1, len(wire) - 1):
        assert opener.open(wire[:cut]).reason is RejectReason.TRUNCATED
    assert opener.open(wire + b"\x00").reason is RejectReason.BAD_HEADER
    assert opener.open(wire).ok


def test_rotation_changes_key_and_resets_counter() -> None:
    sealer, opener = link()
    first = sealer.seal(b"a", round_idx=1)
    sealer.rotate(1)
    second = sealer.seal(b"a", round_idx=1)
    head = parse_header(second)
    assert isinstance(head, EnvelopeHeader) and (head.epoch, head.counter) == (1, 0)
    assert opener.open(second).reason is RejectReason.WRONG_EPOCH
    opener.rotate(1)
    assert opener.open(second).ok
    assert opener.open(first).reason is RejectReason.WRONG_EPOCH
    with pytest.raises(ValueError, match="epoch"):
        sealer.rotate(70000)


def test_replay_window_by_hand() -> None:
    w = ReplayWindow(3)
    assert w.check(0) is ReplayVerdict.FRESH
    w.commit(0)
    w.commit(5)  # far jump: only 5 remembered, window (2, 5]
    assert w.check(0) is ReplayVerdict.TOO_OLD
    assert w.check(3) is ReplayVerdict.FRESH and w.check(5) is ReplayVerdict.REPLAYED
    w.commit(3)
    assert w.check(3) is ReplayVerdict.REPLAYED and w.check(4) is ReplayVerdict.FRESH
    with pytest.raises(ValueError, match="window"):
        ReplayWindow(0)


def test_opener_never_raises_on_random_bytes() -> None:
    import random

    rnd = random.Random(0)
    opener = Opener(100, {7: SECRET, 0: SECRET})
    for _ in range(500):
        n = rnd.choice([0, 1, 23, 24, 39, 40, 41, 64, 200])
        junk = bytes(rnd.getrandbits(8) for _ in range(n))
        if n >= 2 and rnd.random() < 0.5:  # a plausible header: version 1, reserved 0
            junk = b"\x01\x00" + junk[2:]
        assert not opener.open(junk).ok
    assert sum(opener.rejected.values()) == 500 and opener.accepted == 0


@pytest.mark.parametrize("size", [0, 1, 1000, 70_001])
def test_open_sealed_equals_pynacls_public_binding(size: int) -> None:
    from nacl.bindings import crypto_secretbox_open_easy

    key = bytes(range(32))
    payload = bytes((7 * i + size) % 256 for i in range(size))
    wire = seal(key, EnvelopeHeader(0, 3, 1, size, 5), payload)
    assert (
        open_sealed(key, wire)
        == payload
        == crypto_secretbox_open_easy(wire[HEADER_BYTES:], wire[:HEADER_BYTES], key)
    )
    tampered = bytearray(wire)
    tampered[-1] ^= 1
    assert open_sealed(key, bytes(tampered)) is None
    assert open_sealed(bytes(32), wire) is None  # wrong key
    assert open_sealed(key[:31], wire) is None  # not a 32-byte key
    assert open_sealed(key, wire[: HEADER_BYTES + 15]) is None  # shorter than header + tag
