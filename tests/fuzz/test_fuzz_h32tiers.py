"""Hostile bytes where the hierarchy reads what it opened (issue 32 item 8): the sealed
bookkeeping of a driver/LEO payload and a tractor's χ frame. Whatever the bytes, reading
them either gives back what was packed or raises :class:`PayloadError` (the links then
refuse the payload, logged and counted) — never another exception."""

from __future__ import annotations

import contextlib

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geofl.engine.hierarchy.events import TierModel
from geofl.engine.hierarchy.links import Chi, pack_meta, unpack_meta
from geofl.network.payload import PayloadError

_EMPTY = torch.zeros(0)


@st.composite
def _metas(draw: st.DrawFn) -> TierModel:
    n = draw(st.integers(0, 6))
    ints = st.integers(-(2**31), 2**31 - 1)
    floats = st.floats(allow_nan=False)
    return TierModel(
        _EMPTY,
        _EMPTY,
        draw(ints),
        draw(st.integers(0, 2**40)),
        tuple(draw(st.lists(ints, min_size=n, max_size=n))),
        frozenset(draw(st.lists(ints, max_size=4))),
        tuple(draw(st.lists(ints, min_size=n, max_size=n))),
        draw(ints),
        draw(ints),
        tuple(draw(st.lists(ints, max_size=3))),
        draw(floats),
        tuple(draw(st.lists(floats, min_size=n, max_size=n))),
        tuple(draw(st.lists(ints, min_size=n, max_size=n))),
        tuple(draw(st.lists(floats, min_size=n, max_size=n))),
    )


@settings(max_examples=150, deadline=None)
@given(_metas())
def test_packed_bookkeeping_reads_back_exactly(m: TierModel) -> None:
    assert _fields(unpack_meta(pack_meta(m))) == _fields(m)


def _fields(m: TierModel) -> dict[str, object]:
    return {k: v for k, v in vars(m).items() if k not in ("model", "delta")}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_hostile_bookkeeping_bytes_raise_payload_error_only(raw: bytes) -> None:
    with contextlib.suppress(PayloadError):
        unpack_meta(raw)


@settings(max_examples=150, deadline=None)
@given(_metas(), st.integers(0, 200), st.integers(0, 255))
def test_a_cut_or_flipped_bookkeeping_is_refused_or_reads_a_same_size_record(
    m: TierModel, cut: int, flip: int
) -> None:
    raw = bytearray(pack_meta(m))
    try:
        unpack_meta(bytes(raw[: max(0, len(raw) - 1 - cut)]))
        raise AssertionError("a shortened record must not read")
    except PayloadError:
        pass
    if raw:
        raw[flip % len(raw)] ^= 0xFF
        with contextlib.suppress(PayloadError):
            unpack_meta(bytes(raw))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80))
def test_hostile_chi_bytes_raise_payload_error_only(raw: bytes) -> None:
    try:
        chi = Chi.unpack(raw)
    except PayloadError:
        return
    assert (len(raw) == 32 and Chi.unpack(chi.pack()) == chi) or chi != chi  # NaN fields
