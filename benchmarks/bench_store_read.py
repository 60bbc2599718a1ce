"""Random mini-batch reads: in-memory tensor vs numpy memmap vs pread vs zarr (the choice).

Usage::

    .venv/bin/python benchmarks/bench_store_read.py [--quick] [--samples 8192] [--batches 60]

What is measured and why: a larger-than-memory decode cache must serve a client's random
mini-batches (batch 64 of ``13×64×64`` patches, random indices, as local SGD draws them) fast
enough that training does not wait on it. For each sample dtype (``uint16`` as EuroSAT-MS
and the synthetic generator store it, ``float32``) the script writes ``--samples`` random
patches to a raw C-order file under a temporary directory and reads ``--batches`` random
batches of 64 with each method, returning a ``[64, 13, 64, 64]`` float32 tensor:

* ``memory``: fancy indexing of the whole array held in RAM (today's path; the reference);
* ``memmap``: ``np.memmap`` fancy indexing with the batch's indices as drawn;
* ``memmap sorted``: the same with indices sorted (rows read in file order), then put back
  in batch order;
* ``pread sorted``: one ``os.preadv`` per sample into a preallocated buffer, sorted;
* ``StoredRows``: geofl's reader (sorted ``preadv`` per run of rows; a ``WILLNEED`` hint
  for the whole batch first was tried and cost 0.1-0.6 ms more per batch here);
* ``zarr chunk=1`` / ``zarr chunk=64``: a zarr v3 array (no compression) with one sample,
  or 64 samples, per chunk, read with ``oindex`` (only when ``zarr`` is importable).

Two cache states: *warm* (the file in the page cache, as after a first epoch on a machine
with spare RAM) and *cold* (``posix_fadvise(DONTNEED)`` on the file before every batch:
every read goes to disk, the larger-than-RAM case). Reported: ms per batch (median), MB/s of
sample data, and the ratio to ``memory``. Timings are interleaved per batch so all methods
see the same machine state. The temporary directory is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from _common import footer, header, print_table, set_threads
from geofl.data.storage.lazy import StoredRows

SHAPE = (13, 64, 64)
BATCH = 64
Reader = Callable[[np.ndarray], torch.Tensor]


def _write_raw(path: Path, n: int, dtype: np.dtype, seed: int) -> np.ndarray:
    """Random samples written chunk-wise to ``path``; returns the array loaded in RAM."""
    rng = np.random.default_rng(seed)
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n, *SHAPE))
    for lo in range(0, n, 512):
        hi = min(n, lo + 512)
        if dtype == np.uint16:
            mm[lo:hi] = rng.integers(0, 10000, size=(hi - lo, *SHAPE), dtype=np.uint16)
        else:
            mm[lo:hi] = rng.random(size=(hi - lo, *SHAPE), dtype=np.float32)
    mm.flush()
    del mm
    return np.load(path)


def _to_float(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


def _readers(path: Path, ram: np.ndarray, zarr_dir: Path | None) -> dict[str, Reader]:
    mm = np.load(path, mmap_mode="r")
    ram_t = torch.from_numpy(ram.astype(np.float32)) if ram.dtype != np.float32 else None
    fd = os.open(path, os.O_RDONLY)
    offset = int(mm.offset)
    row = int(np.prod(SHAPE)) * ram.itemsize

    def memory(idx: np.ndarray) -> torch.Tensor:
        if ram_t is not None:  # in RAM as float32, as ArrayDataset holds it today
            return ram_t[torch.from_numpy(idx)]
        return torch.from_numpy(ram)[torch.from_numpy(idx)]

    def memmap(idx: np.ndarray) -> torch.Tensor:
        return _to_float(mm[idx])

    def memmap_sorted(idx: np.ndarray) -> torch.Tensor:
        order = np.argsort(idx, kind="stable")
        out = np.empty((len(idx), *SHAPE), dtype=ram.dtype)
        out[order] = mm[idx[order]]
        return _to_float(out)

    def pread_sorted(idx: np.ndarray) -> torch.Tensor:
        out = np.empty((len(idx), *SHAPE), dtype=ram.dtype)
        for i in np.argsort(idx, kind="stable"):
            os.preadv(fd, [memoryview(out[i]).cast("B")], offset + int(idx[i]) * row)
        return _to_float(out)

    readers: dict[str, Reader] = {
        "memory": memory,
        "memmap": memmap,
        "memmap sorted": memmap_sorted,
        "pread sorted": pread_sorted,
    }
    stored = StoredRows(mm)  # scale 1: the raw values as float32, as the others return
    readers["StoredRows"] = lambda idx: stored[idx]
    if zarr_dir is not None:
        import zarr

        for chunk in (1, 64):
            z = zarr.open_array(zarr_dir / f"c{chunk}", mode="r")
            readers[f"zarr chunk={chunk}"] = lambda idx, z=z: _to_float(z.oindex[idx])
    return readers


def _write_zarr(root: Path, ram: np.ndarray, skip: bool) -> Path | None:
    if skip:
        return None
    try:
        import zarr
    except ImportError:
        print("   zarr not importable: skipped (pip install zarr to include it)")
        return None
    for chunk in (1, 64):
        z = zarr.create_array(
            root / f"c{chunk}",
            shape=ram.shape,
            chunks=(chunk, *SHAPE),
            dtype=ram.dtype,
            compressors=None,
        )
        for lo in range(0, ram.shape[0], 512):
            z[lo : lo + 512] = ram[lo : lo + 512]
    return root


def _drop_cache(path: Path, zarr_dir: Path | None, name: str, idx: np.ndarray) -> None:
    """Evict what method ``name`` is about to read from the page cache (cold reads)."""
    if name.startswith("zarr") and zarr_dir is not None:
        chunk = int(name.split("=")[1])
        files = [zarr_dir / f"c{chunk}" / "c" / str(int(i) // chunk) / "0" / "0" / "0" for i in idx]
    else:
        files = [path]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def measure(tmp: Path, dtype: np.dtype, args: argparse.Namespace) -> list[list[object]]:
    """Rows (dtype, cache, method, ms per batch, MB/s, ratio to memory) for one dtype."""
    path = tmp / f"samples-{dtype.name}.npy"
    ram = _write_raw(path, args.samples, dtype, seed=0)
    zarr_dir = _write_zarr(tmp / f"zarr-{dtype.name}", ram, args.no_zarr)
    readers = _readers(path, ram, zarr_dir)
    rng = np.random.default_rng(1)
    batches = [rng.choice(args.samples, BATCH, replace=False) for _ in range(args.batches)]
    ref = readers["memory"](batches[0])
    for name, fn in readers.items():  # every method returns the same tensor
        assert torch.equal(fn(batches[0]), ref), name
    rows: list[list[object]] = []
    mb = BATCH * int(np.prod(SHAPE)) * dtype.itemsize / 1e6
    for cache in ("warm", "cold"):
        times: dict[str, list[float]] = {k: [] for k in readers}
        for idx in batches:
            for name, fn in readers.items():
                if cache == "cold":
                    _drop_cache(path, zarr_dir, name, idx)
                t0 = time.perf_counter()
                fn(idx)
                times[name].append(time.perf_counter() - t0)
        base = statistics.median(times["memory"])
        for name, ts in times.items():
            med = statistics.median(ts)
            rows.append([dtype.name, cache, name, 1e3 * med, mb / med, med / base])
    del ram
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode (a few seconds)")
    parser.add_argument("--samples", type=int, default=8192, help="patches per file")
    parser.add_argument("--batches", type=int, default=60, help="random batches per method")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-zarr", action="store_true", help="leave zarr out (slow to write)")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temp dir")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.batches = 512, 5
    set_threads(args.threads)
    header("bench_store_read", args)
    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="geofl-store-read-", dir=args.dir))
    try:
        rows: list[list[object]] = []
        for dtype in (np.dtype(np.uint16), np.dtype(np.float32)):
            rows += measure(tmp, dtype, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(
        ["dtype", "cache", "method", "ms/batch", "MB/s", "× memory"],
        rows,
        title=f"random batches of {BATCH} × {SHAPE} → float32 tensor, {args.samples} samples",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
