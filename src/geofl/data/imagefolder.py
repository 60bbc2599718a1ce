"""Class-folder image datasets: find the layout, fingerprint it, decode it once.

The on-disk classification datasets geofl reads (EuroSAT RGB/MS, UC Merced) share one
layout::

    <root>/<prefix>/<Class>/<file>.<ext>

where ``<prefix>`` is one of a few known sub-paths tried in order (``2750`` inside
``EuroSAT.zip``, ``UCMerced_LandUse/Images`` inside ``UCMerced_LandUse.zip``, or empty when
``root`` already holds the class folders). ``root`` may also be the distributed ``.zip``
itself: members are read into memory, nothing is extracted. Hidden entries and
``__MACOSX`` folders are ignored. Order is deterministic: sorted class names, then sorted
file names.

A dataset is decoded once (Pillow or tifffile, in a thread pool) into a
:func:`geofl.data.cache.cached_arrays` file keyed by the resolved root, the size and a cheap
source fingerprint (file count, total bytes, newest mtime). The cache holds:

* ``images``: ``[N, C, size, size]`` uint8 (RGB) or uint16 (multispectral);
* ``labels``: ``[N]`` int64 indices into the dataset's class list;
* ``paths``: ``[N]`` unicode (``<U..``) file paths relative to ``root`` (zip member names).
"""

from __future__ import annotations

import io
import os
import threading
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from geofl.data.base import GeoDataset
from geofl.data.cache import cache_key, cached_arrays
from geofl.errors import DataError

__all__ = [
    "FolderSpec",
    "ImageFolder",
    "ImageFormatError",
    "decode_folder",
    "decode_rgb",
    "load_folder_dataset",
    "scan_folder",
]

#: ``(encoded file bytes, target size) -> [C, size, size]`` array.
Decoder = Callable[[bytes, int], np.ndarray]

_CACHE_FORMAT = 1


class ImageFormatError(ValueError):
    """A decoder found a readable file of the wrong form; the message follows the file name."""


@dataclass(frozen=True)
class FolderSpec:
    """What one class-folder dataset looks like on disk.

    Attributes:
        name: Dataset key, also the cache-file prefix (e.g. ``"eurosat_rgb"``).
        title: Human name used in messages (e.g. ``"EuroSAT RGB"``).
        classes: Known class names in label order (sorted); other folders are an error.
        prefixes: Sub-paths of ``root`` that may hold the class folders, tried in order.
        extensions: Accepted lower-case file suffixes, with the dot.
        layout: Human description of the accepted layouts, for error messages.
        download: What to download and from where, for error messages.
        bands: Band names of the channel axis (``C = len(bands)``).
        dtype: Storage dtype of the cached images (uint8 or uint16).
        scale: Stored values are divided by this to give float32 images.
        gsd_m: Ground sample distance in metres (``metadata["gsd_m"]``).
    """

    name: str
    title: str
    classes: tuple[str, ...]
    prefixes: tuple[str, ...]
    extensions: tuple[str, ...]
    layout: str
    download: str
    bands: tuple[str, ...]
    dtype: type[np.generic]
    scale: float
    gsd_m: float


@dataclass(frozen=True)
class ImageFolder:
    """A scanned dataset source (a directory or a zip), not yet decoded.

    Attributes:
        root: The resolved ``root`` (directory or ``.zip`` file).
        is_zip: Whether ``root`` is a zip archive.
        paths: ``N`` file paths relative to ``root`` (posix, zip member names for zips).
        labels: ``N`` class indices, aligned with ``paths``.
        fingerprint: File count, total bytes and newest mtime of the source.
    """

    root: Path
    is_zip: bool
    paths: tuple[str, ...]
    labels: tuple[int, ...]
    fingerprint: dict[str, int]

    def where(self, rel: str) -> str:
        """A readable location of one file, for messages."""
        return f"{rel} in {self.root}" if self.is_zip else str(self.root / rel)

    @contextmanager
    def reader(self) -> Iterator[Callable[[str], bytes]]:
        """Yield a thread-safe ``read(rel) -> bytes`` for the duration of the block."""
        if not self.is_zip:
            yield lambda rel: (self.root / rel).read_bytes()
            return
        lock = threading.Lock()
        with zipfile.ZipFile(self.root) as zf:

            def read(rel: str) -> bytes:
                with lock:
                    return zf.read(rel)

            yield read


#: One found file: (path relative to root, class folder, file name, bytes, mtime_ns).
_Entry = tuple[str, str, str, int, int]


def _wanted(spec: FolderSpec, cls: str, name: str) -> bool:
    hidden = any(not p or p.startswith(".") or p == "__MACOSX" for p in (cls, name))
    return not hidden and Path(name).suffix.lower() in spec.extensions


def _scan_zip(spec: FolderSpec, root: Path) -> list[_Entry]:
    try:
        with zipfile.ZipFile(root) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir()]
    except (zipfile.BadZipFile, OSError) as err:
        raise DataError(f"cannot open {root} as a zip archive ({err}); {spec.download}") from err
    mtime = root.stat().st_mtime_ns
    for prefix in spec.prefixes:
        head = f"{prefix}/" if prefix else ""
        found = []
        for info in infos:
            parts = info.filename[len(head) :].split("/")
            if info.filename.startswith(head) and len(parts) == 2 and _wanted(spec, *parts):
                found.append((info.filename, parts[0], parts[1], info.file_size, mtime))
        if found:
            return found
    return []


def _scan_dir(spec: FolderSpec, root: Path) -> list[_Entry]:
    for prefix in spec.prefixes:
        base = root / prefix
        if not base.is_dir():
            continue
        found = []
        for cls in (d for d in os.scandir(base) if d.is_dir()):
            for f in os.scandir(cls.path):
                if _wanted(spec, cls.name, f.name) and f.is_file():
                    st = f.stat()
                    rel = "/".join(p for p in (prefix, cls.name, f.name) if p)
                    found.append((rel, cls.name, f.name, st.st_size, st.st_mtime_ns))
        if found:
            return found
    return []


def scan_folder(spec: FolderSpec, root: Path) -> ImageFolder:
    """Locate the class folders of ``spec`` under ``root`` (a directory or a ``.zip``).

    Raises:
        DataError: ``root`` is missing or not a zip, no images are found in any accepted
            layout, or a class folder has an unknown name.
    """
    root = Path(root).expanduser().resolve()
    if not root.exists():
        raise DataError(
            f"{spec.title} root {root} does not exist; {spec.download} and pass "
            f"data.params.root=<the extracted folder or the .zip>"
        )
    is_zip = not root.is_dir()
    entries = _scan_zip(spec, root) if is_zip else _scan_dir(spec, root)
    if not entries:
        exts = "/".join(spec.extensions)
        raise DataError(
            f"no {spec.title} images ({exts}) found under {root}; expected {spec.layout}"
        )
    unknown = sorted({e[1] for e in entries} - set(spec.classes))
    if unknown:
        raise DataError(
            f"unexpected class folder(s) {unknown} for {spec.title} under {root}; "
            f"expected folders named {list(spec.classes)}"
        )
    entries.sort(key=lambda e: (e[1], e[2]))
    index = {cls: i for i, cls in enumerate(spec.classes)}
    return ImageFolder(
        root=root,
        is_zip=is_zip,
        paths=tuple(e[0] for e in entries),
        labels=tuple(index[e[1]] for e in entries),
        fingerprint={
            "files": len(entries),
            "bytes": sum(e[3] for e in entries),
            "mtime_ns": max(e[4] for e in entries),
        },
    )


def decode_rgb(data: bytes, size: int) -> np.ndarray:
    """Decode any Pillow-readable image to RGB and resize it to ``size × size``.

    JPEGs are decoded at a reduced scale first (``Image.draft``) when that still leaves at
    least ``size`` pixels; the final resize is bilinear with Pillow's antialiasing.

    Args:
        data: The encoded file.
        size: Output height and width in pixels.

    Returns:
        ``[3, size, size]`` uint8.
    """
    with Image.open(io.BytesIO(data)) as img:
        if img.format == "JPEG":
            img.draft("RGB", (size, size))
        rgb = img.convert("RGB")
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(rgb).transpose(2, 0, 1)


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
    workers = workers or min(8, os.cpu_count() or 1)
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

        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(work, i) for i in range(len(folder.paths))]
            try:
                for fut in futures:
                    fut.result()
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    return out


def load_folder_dataset(
    spec: FolderSpec, root: Path, *, size: int, cache_dir: Path, decode: Decoder
) -> GeoDataset:
    """Scan ``root``, decode it once into the cache, and return the in-memory dataset.

    Args:
        spec: The dataset's layout and band description.
        root: Directory or ``.zip`` holding the dataset.
        size: Output height and width in pixels.
        cache_dir: Directory of the decode-once cache.
        decode: Per-file decoder returning ``[C, size, size]`` of ``spec.dtype``.

    Returns:
        A :class:`GeoDataset` with ``images [N, C, size, size]`` float32 (stored values /
        ``spec.scale``), ``labels [N]`` int64, ``metadata["gsd_m"] [N]`` float32 and
        ``metadata["path"] [N]`` (file paths relative to ``root``).
    """
    folder = scan_folder(spec, root)
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

    arrays = cached_arrays(cache_dir, cache_key(spec.name, key_spec), build)
    images = torch.from_numpy(arrays["images"]).to(torch.float32).div_(spec.scale)
    n = images.shape[0]
    return GeoDataset(
        images=images,
        labels=torch.from_numpy(arrays["labels"].astype(np.int64)),
        classes=spec.classes,
        bands=spec.bands,
        metadata={"gsd_m": np.full(n, spec.gsd_m, dtype=np.float32), "path": arrays["paths"]},
        name=spec.name,
    )
