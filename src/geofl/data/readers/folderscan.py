"""Class-folder datasets on disk: find the layout, name the classes, fingerprint the source.

The on-disk classification datasets geofl reads (EuroSAT RGB/MS, UC Merced) share one
layout::

    <root>/<prefix>/<Class>/<file>.<ext>

where ``<prefix>`` is one of a few known sub-paths tried in order (``2750`` inside
``EuroSAT.zip``, ``UCMerced_LandUse/Images`` inside ``UCMerced_LandUse.zip``, or empty when
``root`` already holds the class folders). ``root`` may also be the distributed ``.zip``
itself: members are read into memory, nothing is extracted. Hidden entries and
``__MACOSX`` folders are ignored. Order is deterministic: sorted class names, then sorted
file names.

:func:`scan_folder` lists the files and their labels without reading them; the source
fingerprint keys the decode-once cache of :mod:`geofl.data.readers.imagefolder`. Its ``manifest``
is the :func:`~geofl.data.storage.cache.manifest_digest` of one row per file: the path relative to
``root`` (so the class folder, which gives the label), the size and ``mtime_ns`` (for a zip:
the member's CRC-32 and the archive's mtime). The stat calls are the ones the scan makes
anyway; file contents are not read. File count, total bytes and newest mtime are kept
beside it for people reading a store header; they alone would miss an image moved to
another class folder (geofl issue 31, item 12).
"""

from __future__ import annotations

import os
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geofl.data.storage.cache import manifest_digest
from geofl.errors import DataError

__all__ = ["FolderSpec", "ImageFolder", "scan_folder"]


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
        fingerprint: ``manifest`` (sha256 hex of every file's relative path, size and
            mtime or CRC) and, for reading, ``files``, ``bytes`` and newest ``mtime_ns``.
    """

    root: Path
    is_zip: bool
    paths: tuple[str, ...]
    labels: tuple[int, ...]
    fingerprint: dict[str, int | str]

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


#: One found file: (path relative to root, class folder, file name, bytes, mtime_ns,
#: CRC-32 of a zip member or -1).
_Entry = tuple[str, str, str, int, int, int]


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
                entry = (info.filename, parts[0], parts[1], info.file_size, mtime, info.CRC)
                found.append(entry)
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
                    found.append((rel, cls.name, f.name, st.st_size, st.st_mtime_ns, -1))
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
        fingerprint=_fingerprint(entries),
    )


def _fingerprint(entries: list[_Entry]) -> dict[str, int | str]:
    """The cache-key part of the sorted ``entries`` (see :class:`ImageFolder`)."""
    return {
        "manifest": manifest_digest((e[0], e[3], e[4], e[5]) for e in entries),
        "files": len(entries),
        "bytes": sum(e[3] for e in entries),
        "mtime_ns": max(e[4] for e in entries),
    }
