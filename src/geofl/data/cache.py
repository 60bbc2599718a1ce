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
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from geofl.errors import DataError
from geofl.io import atomic_write

__all__ = ["cache_key", "cached_arrays", "check_cache_dir", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``$GEOFL_CACHE`` if set, else ``~/.cache/geofl``."""
    env = os.environ.get("GEOFL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "geofl"


def check_cache_dir(cache_dir: Path) -> None:
    """Fail early (before decoding a dataset) if ``cache_dir`` cannot hold cache files.

    Raises:
        DataError: naming the directory when it is a file, cannot be created or is not
            writable.
    """
    hint = "set GEOFL_CACHE (or data.cache_dir) to a writable directory"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise DataError(f"cache directory {cache_dir} is a file; {hint}") from None
    except OSError as err:
        raise DataError(f"cache directory {cache_dir}: {err.strerror}; {hint}") from None
    if not os.access(cache_dir, os.W_OK | os.X_OK):
        raise DataError(f"cache directory {cache_dir} is not writable; {hint}")


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
        try:
            with np.load(path, allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise DataError(
                f"cache file {path} is damaged ({type(err).__name__}); delete it and run "
                "again to rebuild it"
            ) from None
    check_cache_dir(Path(cache_dir))
    arrays = build()
    atomic_write(path, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]
    return arrays
