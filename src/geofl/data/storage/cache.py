"""Decode-once array cache for datasets.

A loader turns its source (a folder of JPGs, a zip, GeoTIFFs, or the synthetic generator)
into a dict of numpy arrays once and stores them as an uncompressed ``.npz`` under the cache
directory; later runs load that file. Writes are atomic (temporary file, then rename), so an
interrupted decode never leaves a half-written cache behind.

The cache is trusted without re-reading the source, so its key must change whenever what
decoding reads changes: every loader puts a *manifest digest* in its key spec, a sha256 of
one row per input file in sample order (:func:`manifest_digest`). Image files are only
stat'd (path relative to the root, which also carries the class folder and so the label;
size; ``mtime_ns``: :func:`file_manifest`); label files enter by content (their sha256, or
:func:`array_digest` of the parsed boxes and labels). A count, a total size and a newest
mtime are not enough: moving an image to another class folder keeps all three (geofl issue
31, item 12).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from geofl.errors import DataError
from geofl.io import atomic_write

__all__ = [
    "array_digest",
    "cache_key",
    "cached_arrays",
    "check_cache_dir",
    "default_cache_dir",
    "file_digest",
    "file_manifest",
    "manifest_digest",
]

#: One manifest row: strings and integers (e.g. relative path, size, mtime_ns).
ManifestRow = tuple[str | int, ...]


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


def manifest_digest(rows: Iterable[ManifestRow]) -> str:
    """sha256 (hex) of ``rows`` in the given order (the sample order is part of the data).

    The rows are written as one JSON array of arrays, so field and row boundaries cannot
    be shifted to give two different manifests the same bytes; one ``json.dumps`` call
    (about 5 ms for 5000 rows) rather than one per row (about 20 ms).
    """
    blob = json.dumps([list(row) for row in rows], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def file_manifest(
    paths: Iterable[Path], *, root: Path | None = None, content: bool = False
) -> list[ManifestRow]:
    """``(path, size, mtime_ns)`` of each file, in order; ``-1, -1`` for a missing one.

    Args:
        paths: The files decoding reads.
        root: Paths are written relative to it (posix) when given and below it, so moving
            the whole dataset keeps its manifest; otherwise as given.
        content: Rows are ``(path, size, sha256 hex)`` instead: for small label files,
            whose edits need not change the size and may keep the mtime (a copy with
            ``cp -p``, a restore from an archive), and whose touch alone changes nothing.
    """
    head = os.path.join(os.fspath(root), "") if root is not None else None
    rows: list[ManifestRow] = []
    for path in paths:  # plain strings: Path.relative_to would cost more than the stat
        name = os.fspath(path)
        if head is not None and name.startswith(head):
            name = name[len(head) :]
        name = name.replace(os.sep, "/")
        try:
            st = os.stat(path)
            rows.append((name, st.st_size, file_digest(path) if content else st.st_mtime_ns))
        except FileNotFoundError:
            rows.append((name, -1, -1))
    return rows


def file_digest(path: Path) -> str:
    """sha256 (hex) of the bytes of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def array_digest(arrays: Iterable[np.ndarray]) -> str:
    """sha256 (hex) of the dtype, shape and bytes of each array, in order.

    Keys the cache by parsed annotations: every value counts, unlike a sum of
    coordinates, which swapping a box's x and y (or changing its class) leaves unchanged.
    """
    digest = hashlib.sha256()
    for arr in arrays:
        arr = np.ascontiguousarray(arr)
        digest.update(f"{arr.dtype.str}{list(arr.shape)}\n".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


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
