"""Class-folder image datasets: find the layout, fingerprint it, decode it once.

The on-disk classification datasets geofl reads (EuroSAT RGB/MS, UC Merced) share one
layout, ``<root>/<prefix>/<Class>/<file>.<ext>``, in a directory or the distributed
``.zip`` (:mod:`geofl.data.readers.folderscan` finds it, names the classes and fingerprints the
source; order is deterministic: sorted class names, then sorted file names).

A dataset is decoded once (Pillow or tifffile, in a thread pool) into a
:func:`geofl.data.storage.cache.cached_arrays` file keyed by the resolved root, the size and the
source fingerprint (a digest of every file's relative path, size and mtime, so a file moved
to another class folder is a new key; :mod:`geofl.data.readers.folderscan`). The cache holds:

* ``images``: ``[N, C, size, size]`` uint8 (RGB) or uint16 (multispectral);
* ``labels``: ``[N]`` int64 indices into the dataset's class list;
* ``paths``: ``[N]`` unicode (``<U..``) file paths relative to ``root`` (zip member names).

RGB files are decoded by :func:`~geofl.data.readers.imagedecode.decode_rgb`, which maps every pixel
type to 8 bits by one fixed rule per type (:mod:`geofl.data.readers.imagedecode`). A refused file
raises :class:`ImageFormatError`, which :func:`decode_folder` turns into a one-line
:class:`geofl.errors.DataError` naming the file.

:class:`FolderSpec`, :class:`ImageFolder`, :func:`scan_folder`, :class:`ImageFormatError`
and :func:`decode_rgb` are re-exported here, where the dataset loaders import them from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl.data.base import ArrayDataset, CacheMode, Inputs
from geofl.data.readers.folderscan import FolderSpec, ImageFolder, scan_folder
from geofl.data.readers.imagedecode import ImageFormatError, decode_rgb
from geofl.data.storage.cache import cache_key, cached_arrays
from geofl.data.storage.lazy import StoredRows
from geofl.data.storage.store import cached_store
from geofl.errors import DataError

__all__ = [
    "FolderSpec",
    "ImageFolder",
    "ImageFormatError",
    "decode_folder",
    "decode_rgb",
    "load_folder_dataset",
    "run_parallel",
    "scan_folder",
]

#: ``(encoded file bytes, target size) -> [C, size, size]`` array.
Decoder = Callable[[bytes, int], np.ndarray]

#: 2: 16-bit and float images decode by their range (format 1 cached them as white/black).
_CACHE_FORMAT = 2


def decode_folder(
    folder: ImageFolder, spec: FolderSpec, decode: Decoder, *, size: int, workers: int = 0
) -> np.ndarray:
    """Decode every file of ``folder`` with ``decode`` in a thread pool (0: up to 8 threads).

    Returns:
        ``[N, len(spec.bands), size, size]`` array of ``spec.dtype``, in ``folder.paths`` order.

    Raises:
        DataError: naming the file, when one cannot be read or decoded.
    """
    out = np.empty((len(folder.paths), len(spec.bands), size, size), dtype=spec.dtype)
    with folder.reader() as read:

        def work(i: int) -> None:
            rel = folder.paths[i]
            try:
                arr = decode(read(rel), size)
                if arr.shape != out.shape[1:]:
                    raise ImageFormatError(f"decodes to shape {arr.shape}, not {out.shape[1:]}")
            except ImageFormatError as err:
                raise DataError(f"{folder.where(rel)} {err}; replace or remove it") from err
            except Exception as err:  # Pillow/tifffile raise many types on corrupt files.
                detail = " ".join(str(err).split())  # keep the message on one line
                raise DataError(
                    f"cannot decode image {folder.where(rel)} ({type(err).__name__}: {detail}); "
                    "replace or remove the file"
                ) from err
            out[i] = arr

        run_parallel(len(folder.paths), work, workers)
    return out


def run_parallel(count: int, work: Callable[[int], None], workers: int = 0) -> None:
    """Run ``work(i)`` for ``i < count`` in a thread pool (0: up to 8 threads).

    The first exception (e.g. a :class:`DataError` naming a file) is raised once the pool
    has stopped.
    """
    workers = workers or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(work, i) for i in range(count)]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _cached_folder(
    spec: FolderSpec,
    folder: ImageFolder,
    *,
    size: int,
    cache_dir: Path,
    decode: Decoder,
    cache_mode: CacheMode,
) -> tuple[dict[str, np.ndarray], Inputs]:
    """The folder's decode-once cache (decoded now if absent) and its scaled images.

    Args:
        spec: The dataset's layout and band description.
        folder: The scanned folder (its root and fingerprint key the cache).
        size: Output height and width in pixels.
        cache_dir: Directory of the decode-once cache.
        decode: Per-file decoder returning ``[C, size, size]`` of ``spec.dtype``.
        cache_mode: ``memory`` or ``mmap`` (see :func:`load_folder_dataset`).

    Returns:
        ``(arrays, images)``: the cached ``images``, ``labels`` and ``paths`` arrays, and
        ``images [N, C, size, size]`` float32 (stored values / ``spec.scale``), a tensor
        or a :class:`~geofl.data.storage.lazy.StoredRows` view.
    """
    key_spec: dict[str, Any] = {
        "root": str(folder.root),
        "size": size,
        "source": folder.fingerprint,
        "format": _CACHE_FORMAT,
    }

    def build() -> dict[str, np.ndarray]:
        return {
            "images": decode_folder(folder, spec, decode, size=size),
            "labels": np.asarray(folder.labels, dtype=np.int64),
            "paths": np.asarray(folder.paths, dtype=np.str_),
        }

    key = cache_key(spec.name, key_spec)
    images: Inputs
    if cache_mode == "mmap":
        meta = {"bands": spec.bands, "classes": spec.classes, "source": key_spec}
        arrays, _ = cached_store(cache_dir, key, lambda w: w.put_all(build()), meta)
        images = StoredRows(arrays["images"], scale=spec.scale)
    else:
        arrays = cached_arrays(cache_dir, key, build)
        images = torch.from_numpy(arrays["images"]).to(torch.float32).div_(spec.scale)
    return arrays, images


def load_folder_dataset(
    spec: FolderSpec,
    root: Path,
    *,
    size: int,
    cache_dir: Path,
    decode: Decoder,
    cache_mode: CacheMode = "memory",
) -> ArrayDataset:
    """Scan ``root``, decode it once into the cache, and return the in-memory dataset.

    Args:
        spec: The dataset's layout and band description.
        root: Directory or ``.zip`` holding the dataset.
        size: Output height and width in pixels.
        cache_dir: Directory of the decode-once cache.
        decode: Per-file decoder returning ``[C, size, size]`` of ``spec.dtype``.
        cache_mode: ``memory`` (the cache loaded into RAM) or ``mmap`` (an on-disk store,
            ``inputs`` a :class:`~geofl.data.storage.lazy.StoredRows` view read per batch).

    Returns:
        A :class:`ArrayDataset` with ``images [N, C, size, size]`` float32 (stored values /
        ``spec.scale``), ``labels [N]`` int64, ``metadata["gsd_m"] [N]`` float32 and
        ``metadata["path"] [N]`` (file paths relative to ``root``).
    """
    folder = scan_folder(spec, root)
    arrays, images = _cached_folder(
        spec, folder, size=size, cache_dir=cache_dir, decode=decode, cache_mode=cache_mode
    )
    n = images.shape[0]
    return ArrayDataset(
        inputs=images,
        targets=torch.from_numpy(np.array(arrays["labels"], dtype=np.int64)),
        classes=spec.classes,
        bands=spec.bands,
        metadata={
            "gsd_m": np.full(n, spec.gsd_m, dtype=np.float32),
            "path": np.array(arrays["paths"]),
        },
        name=spec.name,
    )
