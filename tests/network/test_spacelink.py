"""Staleness-tagged frames of an encoded payload (the driver → LEO hop, 003 Table 4) and the
space hops' energy proxy E = P_tx · 8 · bytes / rate, by hand."""

from __future__ import annotations

import pytest

from geofl.network.chunking import TAG_HEADER_BYTES, join_tagged, tag_frames
from geofl.network.payload import PayloadError
from geofl.network.spacelink import SpaceLinkParams, hop_energy


def test_tagged_frames_cut_rebuild_and_carry_the_tags() -> None:
    payload = bytes(range(256)) * 10  # 2560 B
    frames = tag_frames(payload, round_idx=7, timestamp=12.5, frame_bytes=1000)
    assert TAG_HEADER_BYTES == 32
    assert [len(f) for f in frames] == [1032, 1032, 592]  # 1000 + 1000 + 560, +32 each
    got = join_tagged(frames[::-1])  # any order
    assert (got.payload, got.round, got.timestamp) == (payload, 7, 12.5)
    (one,) = tag_frames(b"", round_idx=0, timestamp=0.0)  # an empty payload is one frame
    assert len(one) == 32 and join_tagged([one]).payload == b""


@pytest.mark.parametrize(
    ("mangle", "needle"),
    [
        (lambda fs: fs[:2], "1 of 3 tagged frames missing"),
        (lambda fs: [fs[0], fs[0], fs[2]], "twice"),
        (lambda fs: [fs[0][:10]], "shorter than its header"),
        (lambda fs: [bytes([9]) + fs[0][1:]], "malformed"),
        (
            lambda fs: (
                fs[:2] + tag_frames(b"x" * 2560, round_idx=8, timestamp=0.0, frame_bytes=1000)[2:]
            ),
            "different payloads",
        ),
        (lambda fs: [], "no tagged frame"),
    ],
)
def test_join_refuses_malformed_frame_sets(mangle, needle) -> None:  # type: ignore[no-untyped-def]
    frames = tag_frames(bytes(2560), round_idx=7, timestamp=1.0, frame_bytes=1000)
    with pytest.raises(PayloadError, match=needle):
        join_tagged(mangle(frames))


def test_hop_energy_is_power_times_bytes_over_rate() -> None:
    # 250 B at 1 Mbps: 2000 bits → 2 ms; at 2 W → 4 mJ
    assert hop_energy(250, 1.0, 2.0) == pytest.approx((0.002, 0.004))
    # 1 MB at 0.5 Mbps, 5 W: 16 s, 80 J
    assert hop_energy(1_000_000, 0.5, 5.0) == pytest.approx((16.0, 80.0))
    d = SpaceLinkParams()
    assert (d.driver_leo_mbps, d.driver_leo_w, d.leo_geo_mbps, d.leo_geo_w) == (1.0, 2.0, 1.0, 5.0)
    assert d.compress is None and d.pipelines.k_frac == 0.1 and d.pipelines.sparse_bits == 4
