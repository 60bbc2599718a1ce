"""Envelope seal/open throughput vs raw pynacl ``SecretBox`` on the same payloads.

Usage::

    .venv/bin/python benchmarks/bench_envelope.py [--quick] [--repeats 7]

What is measured and why: the per-hop envelope of 003 §2.1.8
(:mod:`geofl.security.envelope`) adds a header that doubles as the nonce, a per-epoch key
and a receiver replay window on top of libsodium's XSalsa20-Poly1305. Its cost should be
that of the cipher itself. For payloads of 1 kB, 30 kB, 300 kB (Table 4's "AEAD encrypt +
auth (300 kB payload)": 1–3 ms) and 3 MB the script times, interleaved within every repeat,

* ``Sealer.seal`` (header pack + ``crypto_secretbox_easy`` + concatenation) vs
  ``SecretBox.encrypt(payload, nonce)`` with an explicit nonce;
* ``Opener.open`` of ``n`` distinct envelopes (fresh receiver each repeat, so the replay
  window accepts each once) vs ``SecretBox.decrypt`` of the same wires.

Reported: MB/s of each and the ratio envelope ÷ raw throughput (target ≥ 0.8×).
"""

from __future__ import annotations

import argparse
import time

from nacl.secret import SecretBox

from _common import footer, header, interleaved_medians, print_table
from geofl.security.envelope import HEADER_BYTES, Opener, Sealer
from geofl.security.keys import derive_epoch_key

TARGET_RATIO = 0.8
SECRET = bytes(range(32))


def main() -> None:
    """Parse arguments, time every payload size, print the table."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 30_000, 300_000, 3_000_000])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats = [1_000, 300_000], 3
    header("bench_envelope", args)

    key = derive_epoch_key(SECRET, 1, 2, 0)
    box = SecretBox(key)
    rows = []
    for size in args.sizes:
        n = max(1, int(30e6 // size))  # ~30 MB per repeat
        payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
        sealer = Sealer(SECRET, 1, 2)
        wires = [sealer.seal(payload, round_idx=1) for _ in range(n)]
        nonce = wires[0][:HEADER_BYTES]

        def env_seal(p: bytes = payload, s: Sealer = sealer, k: int = n) -> None:
            for _ in range(k):
                s.seal(p, round_idx=1)

        def raw_seal(p: bytes = payload, nc: bytes = nonce, k: int = n) -> None:
            for _ in range(k):
                box.encrypt(p, nc)

        def env_open(w: list[bytes] = wires) -> None:
            opener = Opener(2, {1: SECRET})  # default 64-counter window
            if not all(opener.open(x).ok for x in w):
                raise RuntimeError("an envelope failed to open")

        def raw_open(w: list[bytes] = wires) -> None:
            for x in w:
                box.decrypt(x)

        med = interleaved_medians(
            {
                "env_seal": env_seal,
                "raw_seal": raw_seal,
                "env_open": env_open,
                "raw_open": raw_open,
            },
            repeats=args.repeats,
        )
        mb = n * size / 1e6
        rs, ro = med["raw_seal"] / med["env_seal"], med["raw_open"] / med["env_open"]
        rows.append(
            [
                size,
                n,
                mb / med["env_seal"],
                mb / med["raw_seal"],
                rs,
                mb / med["env_open"],
                mb / med["raw_open"],
                ro,
                1e3 * med["env_seal"] / n,
                "ok" if min(rs, ro) >= TARGET_RATIO else "BELOW",
            ]
        )
    print_table(
        [
            "payload B",
            "msgs",
            "seal MB/s",
            "raw seal MB/s",
            "seal ratio",
            "open MB/s",
            "raw open MB/s",
            "open ratio",
            "seal ms/msg",
            f"≥{TARGET_RATIO}×",
        ],
        rows,
        title="envelope ÷ raw SecretBox throughput (interleaved medians)",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
