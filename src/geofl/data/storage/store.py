"""A memory-mappable array store: the larger-than-memory form of the decode cache.

A store is a directory ``<key>.store/`` holding one ``.npy`` file per array (C order, so
row ``i`` of ``[N, …]`` is one contiguous byte range) and a small ``header.json``::

    {"format": "geofl-store-v1", "meta": {"bands": [...], "classes": [...],
     "source": {...}}, "arrays": {"inputs": {"dtype": "<u2", "shape": [N, 13, 64, 64],
     "offset": 128}, ...}}

It is written once and atomically: every file goes into a private temporary directory next
to the destination (unique per process and call), is flushed and ``fsync``-ed, the header
is written last, and one ``rename`` of the directory publishes the store. Two processes
building the same store each write their own temporary directory; the first rename wins
and the loser removes its copy and opens the winner's, so a reader never sees a half-
written store. Opening checks the header and that every array file has exactly the size
the header states: a truncated or damaged store is named with the fix (delete it and run
again) instead of producing garbage. (A flipped byte inside the sample data is not
detected: hashing gigabytes on every open would cost more than the decode it saves.)

Arrays open as read-only ``np.memmap``; :class:`~geofl.data.storage.lazy.StoredRows` reads only
the rows a mini-batch needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from geofl.errors import DataError

__all__ = ["STORE_FORMAT", "StoreWriter", "cached_store", "open_store", "store_path"]

STORE_FORMAT = "geofl-store-v1"
HEADER = "header.json"


def store_path(cache_dir: Path, key: str) -> Path:
    """The store directory of ``key`` under ``cache_dir``."""
    return Path(cache_dir) / f"{key}.store"


def _damaged(path: Path, what: str) -> DataError:
    return DataError(
        f"cache store {path} is damaged ({what}); delete it and run again to rebuild it"
    )


class StoreWriter:
    """Writes a store chunk by chunk into a temporary directory, then publishes it.

    Use as a context manager: arrays are created with :meth:`create` (a writable memmap;
    fill it in chunks with :meth:`write_rows` to never hold the array in RAM) or
    :meth:`put` (an array at once); leaving the block without an error calls
    :meth:`commit`, an error discards the temporary directory.

    Args:
        path: The store directory to publish (``<key>.store``).
        meta: JSON-serialisable description (bands, classes, source fingerprint, …).
    """

    def __init__(self, path: Path, meta: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.meta = dict(meta or {})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        self.tmp.mkdir()
        self._arrays: dict[str, np.memmap[Any, Any]] = {}

    def create(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any] | type) -> np.ndarray:
        """A new writable ``[shape]`` array of ``dtype`` backed by the store's file ``name``."""
        if name in self._arrays:
            raise ValueError(f"array {name!r} is already in the store being written")
        arr = np.lib.format.open_memmap(
            self.tmp / f"{name}.npy", mode="w+", dtype=np.dtype(dtype), shape=shape
        )
        self._arrays[name] = arr
        return arr

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """Write ``rows`` (``[m, …]``) at row ``start`` of array ``name`` (from :meth:`create`).

        The bytes go through the file (``pwrite``), not the mapping, so none of the store's
        pages become resident in this process: building a store larger than RAM holds
        one chunk at a time.
        """
        arr = self._arrays[name]
        rows = np.ascontiguousarray(rows, dtype=arr.dtype)
        if rows.shape[1:] != arr.shape[1:] or start < 0 or start + len(rows) > arr.shape[0]:
            raise ValueError(f"rows {rows.shape} at {start} do not fit {name!r} {arr.shape}")
        row_bytes = arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
        data = rows.reshape(-1).view(np.uint8).data
        pos = int(arr.offset) + start * row_bytes
        with open(self.tmp / f"{name}.npy", "r+b") as fh:
            done = 0
            while done < len(data):
                done += os.pwrite(fh.fileno(), data[done:], pos + done)

    def put(self, name: str, value: np.ndarray) -> None:
        """Store ``value`` (copied) as array ``name``."""
        value = np.ascontiguousarray(value)
        if value.dtype.hasobject:
            raise TypeError(f"array {name!r} holds Python objects; use a fixed-width dtype")
        self.create(name, value.shape, value.dtype)[...] = value

    def put_all(self, arrays: Mapping[str, np.ndarray]) -> None:
        """:meth:`put` every array of ``arrays``."""
        for name, value in arrays.items():
            self.put(name, value)

    def commit(self) -> Path:
        """Flush, write the header and publish; returns the published store's path.

        When another process published the same store first, ours is discarded and the
        existing one is returned (both were built from the same source).
        """
        arrays: dict[str, Any] = {}
        for name, arr in self._arrays.items():
            arr.flush()
            arrays[name] = {
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "offset": int(arr.offset),
            }
            _fsync_file(self.tmp / f"{name}.npy")
        self._arrays.clear()
        header = {"format": STORE_FORMAT, "meta": self.meta, "arrays": arrays}
        with open(self.tmp / HEADER, "w", encoding="utf-8") as fh:
            json.dump(header, fh, indent=1, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.rename(self.tmp, self.path)
        except OSError:
            if not (self.path / HEADER).exists():
                self.discard()
                raise
            self.discard()  # another writer won the race: keep theirs
        _fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        """Remove the temporary directory (nothing is published)."""
        self._arrays.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        _fsync_file(path)


def read_header(path: Path) -> dict[str, Any]:
    """The parsed ``header.json`` of the store at ``path``.

    Raises:
        DataError: naming the store when the header is missing, unreadable or not a
            ``geofl-store-v1`` header.
    """
    try:
        header = json.loads((Path(path) / HEADER).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _damaged(path, f"no {HEADER}") from None
    except (OSError, ValueError) as err:
        raise _damaged(path, f"{HEADER}: {type(err).__name__}") from None
    if not isinstance(header, dict) or header.get("format") != STORE_FORMAT:
        raise _damaged(path, f"{HEADER} is not a {STORE_FORMAT} header")
    if not isinstance(header.get("arrays"), dict):
        raise _damaged(path, f"{HEADER} lists no arrays")
    return header


def open_store(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Open every array of the store at ``path`` read-only (memory-mapped) and its meta.

    Returns:
        ``(arrays, meta)``: read-only ``np.memmap`` per array name, and the header's
        ``meta`` dict.

    Raises:
        DataError: naming the store when its header is damaged, an array file is missing
            or its size, dtype or shape differs from the header (a truncated write).
    """
    path = Path(path)
    header = read_header(path)
    arrays: dict[str, np.ndarray] = {}
    for name, spec in header["arrays"].items():
        file = path / f"{name}.npy"
        try:
            dtype = np.dtype(spec["dtype"])
            shape = tuple(int(s) for s in spec["shape"])
            expected = int(spec["offset"]) + dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        except (KeyError, TypeError, ValueError):
            raise _damaged(path, f"{HEADER} entry of {name!r} is malformed") from None
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            raise _damaged(path, f"{file.name} is missing") from None
        if size != expected:
            raise _damaged(path, f"{file.name} has {size} bytes, the header says {expected}")
        try:
            arr = np.load(file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as err:
            raise _damaged(path, f"{file.name}: {type(err).__name__}") from None
        if arr.dtype != dtype or arr.shape != shape:
            raise _damaged(path, f"{file.name} is {arr.dtype}{list(arr.shape)}, not as the header")
        arrays[name] = arr
    meta = header.get("meta", {})
    return arrays, meta if isinstance(meta, dict) else {}


def cached_store(
    cache_dir: Path,
    key: str,
    build: Callable[[StoreWriter], None],
    meta: Mapping[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Open ``cache_dir/<key>.store``, or build and publish it first.

    Args:
        cache_dir: Directory of the decode cache.
        key: Store name, normally from :func:`~geofl.data.storage.cache.cache_key`.
        build: Fills a :class:`StoreWriter` (``create`` + chunk-wise writes, or ``put``);
            called only when the store is absent.
        meta: Header description written with a new store.

    Returns:
        As :func:`open_store`.
    """
    path = store_path(cache_dir, key)
    if not path.exists():
        with StoreWriter(path, meta) as writer:
            build(writer)
    return open_store(path)
