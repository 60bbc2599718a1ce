"""Benchmark the UC Merced loader: cold decode into a fresh cache vs. warm cache load.

Usage::

    .venv/bin/python benchmarks/bench_ucmerced.py [--root DIR_OR_ZIP] [--size 64]

``--root`` defaults to ``$GEOFL_SHARED_DATA/ucmerced_landuse`` or, failing that, the
``shared/data/ucmerced_landuse`` folder next to the repository. Both runs happen in one
process against one temporary cache directory, so their ratio is measured on one machine
state. Prints plain ``key: value`` lines.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from geofl.data.base import DATASETS
from geofl.data.readers import ucmerced


def default_root() -> Path:
    """The shared UC Merced copy: ``$GEOFL_SHARED_DATA`` first, then next to the repo."""
    env = os.environ.get("GEOFL_SHARED_DATA")
    if env:
        return Path(env) / "ucmerced_landuse"
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "ucmerced_landuse"


def main() -> None:
    """Parse arguments, time a cold and a warm build, print the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=default_root())
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    params = {"root": args.root, "size": args.size}

    with tempfile.TemporaryDirectory(prefix="geofl-bench-") as tmp:
        cache = Path(tmp)
        t0 = time.perf_counter()
        cold = DATASETS.build(ucmerced.UCMERCED_SPEC.name, params, cache_dir=cache)
        cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = DATASETS.build(ucmerced.UCMERCED_SPEC.name, params, cache_dir=cache)
        warm_s = time.perf_counter() - t0
        cache_bytes = sum(p.stat().st_size for p in cache.glob("*.npz"))

    n = len(cold)
    if len(warm) != n:
        raise SystemExit(f"warm load returned {len(warm)} images, cold decode {n}")
    print(f"root: {args.root}")
    print(f"images: {n} shape: {tuple(cold.inputs.shape)} classes: {cold.num_classes}")
    print(f"cpu_count: {os.cpu_count()}")
    print(f"cold_decode_s: {cold_s:.3f}")
    print(f"cold_images_per_s: {n / cold_s:.0f}")
    print(f"warm_load_s: {warm_s:.3f}")
    print(f"warm_images_per_s: {n / warm_s:.0f}")
    print(f"cache_mib: {cache_bytes / 2**20:.1f}")
    print(f"warm_over_cold: {warm_s / cold_s:.3f}")


if __name__ == "__main__":
    main()
