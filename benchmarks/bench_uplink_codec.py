"""Per-update cost of the uplink pipelines next to 003 Table 4's indicative overheads.

Usage::

    .venv/bin/python benchmarks/bench_uplink_codec.py [--quick] [--repeats 7] [--threads 1]

What is measured and why: 003 Table 4 lists per-accepted-update overheads on embedded-class
CPUs for a 120 k-parameter model: cosine checkpointer 3–6 ms, top-k (k = 10 %) 12–25 ms,
4-bit quantisation + packing 4–10 ms, chunking + staleness tags 2–5 ms, AEAD over a 300 kB
payload 1–3 ms. For D = 120,000 (and 1e6) the script times each stage of geofl's real
encoders on one update (median of interleaved repeats): ``row_cosine`` against the last
sent update, ``topk_indices``, ``quantise`` + ``pack_codes`` of the kept values, the whole
compressed encode (``encode_sparse``: + index coding) and its decode, the chunked encode
(8-bit frames with tags) and reassembly, the fallback 8-bit encode and decode, and an
envelope seal of a 300 kB payload. Printed: ms per call, Table 4's range where it has one,
ratio to the range's midpoint (D = 120 k rows), and the encoded bytes of each pipeline
vs float32.
"""

from __future__ import annotations

import argparse
import time

import torch

from _common import footer, header, interleaved_medians, print_table, set_threads
from geofl.client.checkpointer import row_cosine
from geofl.network.chunking import encode_frames, reassemble
from geofl.network.payload import decode_dense, decode_sparse, encode_dense, encode_sparse
from geofl.network.pipelines import Pipeline, PipelineParams, encode_update
from geofl.network.quantize import pack_codes, quantise
from geofl.network.sparse import topk_count, topk_indices
from geofl.rng import numpy_generator
from geofl.security.envelope import Sealer

#: 003 Table 4 (ms, per accepted update).
TABLE4 = {
    "cosine checkpointer": (3.0, 6.0),
    "top-k selection (10 %)": (12.0, 25.0),
    "4-bit quantise + pack": (4.0, 10.0),
    "chunk frames + tags": (2.0, 5.0),
    "seal 300 kB envelope": (1.0, 3.0),
}


def stages(d: int) -> dict[str, object]:
    """The callables timed for one D (names match ``TABLE4`` where Table 4 has a row)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(d, generator=gen)
    prev = x + 0.1 * torch.randn(d, generator=gen)
    k = topk_count(d, 0.1)
    kept = x.numpy()[topk_indices(x, k)]
    sparse, _ = encode_sparse(x)
    dense, _ = encode_dense(x)
    frames, _ = encode_frames(x, round_idx=1, timestamp=0.0)
    sealer, payload = Sealer(bytes(32), 1, 2), bytes(300_000)
    return {
        "cosine checkpointer": lambda: row_cosine(x[None], prev[None]),
        "top-k selection (10 %)": lambda: topk_indices(x, k),
        "4-bit quantise + pack": lambda: pack_codes(quantise(kept, 4, 512).codes, 4),
        "compressed encode (a)": lambda: encode_sparse(x),
        "compressed decode (a)": lambda: decode_sparse(sparse, d),
        "chunk frames + tags": lambda: encode_frames(x, round_idx=1, timestamp=0.0),
        "chunk reassembly (b)": lambda: reassemble(frames, d),
        "fallback 8-bit encode (c)": lambda: encode_dense(x),
        "fallback 8-bit decode (c)": lambda: decode_dense(dense, d),
        "seal 300 kB envelope": lambda: sealer.seal(payload, 1),
    }


def main() -> None:
    """Parse arguments, time every stage for each D, print the tables."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="D = 120 k only, 3 repeats")
    parser.add_argument("--ds", type=float, nargs="+", default=[1.2e5, 1e6])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    set_threads(args.threads)
    if args.quick:
        args.ds, args.repeats = [1.2e5], 3
    header("bench_uplink_codec", args)
    rows, sizes = [], []
    for d in (int(v) for v in args.ds):
        med = interleaved_medians(stages(d), repeats=args.repeats, warmup=2)  # type: ignore[arg-type]
        for name, t in med.items():
            lo_hi = TABLE4.get(name)
            ref = f"{lo_hi[0]:g}–{lo_hi[1]:g}" if lo_hi else "–"
            ratio = t * 1e3 / (sum(lo_hi) / 2) if lo_hi and d == 120_000 else float("nan")
            rows.append([f"{d:.3g}", name, t * 1e3, ref, ratio])
        x = torch.randn(d, generator=torch.Generator().manual_seed(1))
        for pipe in Pipeline:
            enc = encode_update(x, pipe, PipelineParams(), rng=numpy_generator(1, "paq"))
            sizes.append([f"{d:.3g}", pipe.value, len(enc.frames), enc.nbytes, 4 * d / enc.nbytes])
    print_table(
        ["D", "stage", "ms / update", "Table 4 ms", "ratio to midpoint"],
        rows,
        title="per-update cost (median of interleaved repeats)",
    )
    print_table(
        ["D", "pipeline", "frames", "encoded bytes", "float32 ÷ encoded"],
        sizes,
        title="encoded size per update (len of the real payloads)",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
