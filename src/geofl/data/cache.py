"""Decode-once array cache for datasets.

A loader turns its source (a folder of JPGs, a zip, GeoTIFFs, or the synthetic generator)
into a dict of numpy arrays once and stores them as an uncompressed ``.npz`` under the cache
directory; later runs load that file. Writes are atomic (temporary file, then rename), so an
interrupted decode never leaves a half-written cache behind.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from geofl.io import atomic_write

__all__ = ["cache_key", "cached_arrays", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``$GEOFL_CACHE`` if set, else ``~/.cache/geofl``."""
    env = os.environ.get("GEOFL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "geofl"


def cache_key(name: str, spec: Mapping[str, Any]) -> str:
    """A file-name-safe key: ``name`` plus a hash of the JSON of ``spec``."""
    blob = json.dumps(spec, sort_keys=True, default=str).encode()
    return f"{name}-{hashlib.blake2b(blob, digest_size=8).hexdigest()}"


def cached_arrays(
    cache_dir: Path, key: str, build: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Load ``cache_dir/key.npz``, or build, store atomically and return the arrays.

    Args:
        cache_dir: Directory for cache files (created if needed).
        key: File stem, normally from :func:`cache_key`.
        build: Produces the arrays when the cache file is absent.

    Returns:
        Mapping from array name to array, as ``build`` returned it.
    """
    path = Path(cache_dir) / f"{key}.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    arrays = build()
    atomic_write(path, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]
    return arrays
