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

:func:`decode_rgb` maps every pixel type to 8-bit RGB by one fixed rule per type, never by
a per-image statistic, so all images of a dataset share one brightness scale:

* 8-bit Pillow modes (``1``, ``L``, ``LA``, ``P``, ``PA``, ``RGB``, ``RGBA``, ``RGBX``,
  ``CMYK``, ``YCbCr``): Pillow's ``convert("RGB")``, unchanged.
* 16-bit unsigned (``I;16``, ``I;16B``, uint16 TIFF, 16-bit RGB PNG): the high byte,
  ``v >> 8`` (``v / 65536`` truncated to 8 bits; 32768 -> 128, 65535 -> 255). It is the
  reduction Pillow itself applies to multi-channel 16-bit PNGs, so every 16-bit source goes
  through one rule.
* Other integers (mode ``I``, signed or 32-bit TIFF): read as 16-bit data when every value
  lies in 0..65535, then as above; any other value is refused.
* Float (mode ``F``, float16/32/64 TIFF): brightness in [0, 1], ``rint(v * 255)``; values
  within half a step (0.5 / 255) outside [0, 1] are clipped, NaN, infinities and anything
  further out are refused.
* TIFFs wider than 8 bits are read with tifffile (exact for band-separate layouts, which
  Pillow misreads) as greyscale (MINISBLACK, 1 sample + optional alpha) or RGB (3 samples
  + optional alpha); other photometric interpretations and sample counts, complex pixels,
  and the Pillow modes ``LAB``/``HSV`` are refused.

A refused file raises :class:`ImageFormatError`, which :func:`decode_folder` turns into a
one-line :class:`geofl.errors.DataError` naming the file.
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
import tifffile
import torch
from PIL import Image, UnidentifiedImageError

from geofl.data.base import ArrayDataset, CacheMode, Inputs
from geofl.data.cache import cache_key, cached_arrays
from geofl.data.lazy import StoredRows
from geofl.data.store import cached_store
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
#: Pillow modes of at most 8 bits per channel that ``convert("RGB")`` maps faithfully.
_PIL_8BIT = frozenset(
    {"1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr"}
)
#: Pillow's single-channel modes wider than 8 bits (``np.asarray`` gives exact values).
_PIL_WIDE = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
_TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")
#: Sample counts accepted per photometric interpretation of a wide TIFF (grey, RGB, + alpha).
_TIFF_SAMPLES = {tifffile.PHOTOMETRIC.MINISBLACK: (1, 2), tifffile.PHOTOMETRIC.RGB: (3, 4)}
_WIDE_ADVICE = "save it as 8- or 16-bit unsigned integers or as float in 0..1"


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
    """Decode any Pillow- or tifffile-readable image to RGB and resize it to ``size × size``.

    8-bit images go through Pillow's ``convert("RGB")``; JPEGs are decoded at a reduced
    scale first (``Image.draft``) when that still leaves at least ``size`` pixels. 16-bit,
    wider-integer and float images are mapped to 8 bits by the fixed per-type rules in the
    module docstring. The final resize is bilinear with Pillow's antialiasing.

    Args:
        data: The encoded file.
        size: Output height and width in pixels.

    Returns:
        ``[3, size, size]`` uint8.

    Raises:
        ImageFormatError: a pixel type, colour mode or value range that cannot be mapped
            to brightness (the message says what to do).
    """
    try:
        img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError as err:
        if not data.startswith(_TIFF_MAGIC):
            raise
        try:  # e.g. float64, float RGB or complex TIFFs, which Pillow cannot open
            pixels = _wide_tiff_pixels(data, None)
        except ImageFormatError:
            raise
        except Exception:
            raise err from None  # not a TIFF tifffile reads either: report Pillow's error
        return _resize_rgb(Image.fromarray(_to_rgb8(pixels)), size)
    with img:
        if img.format == "TIFF" and not _pillow_reads_tiff(data):
            rgb = Image.fromarray(_to_rgb8(_wide_tiff_pixels(data, img)))
        elif img.mode in _PIL_WIDE:
            rgb = Image.fromarray(_to_rgb8(np.asarray(img)))
        elif img.mode in _PIL_8BIT:
            if img.format == "JPEG":
                img.draft("RGB", (size, size))
            rgb = img.convert("RGB")
        else:
            raise ImageFormatError(
                f"has colour mode {img.mode}, which geofl does not convert; save it as RGB"
            )
    return _resize_rgb(rgb, size)


def _resize_rgb(rgb: Image.Image, size: int) -> np.ndarray:
    """``[3, size, size]`` uint8 of an RGB image, resized bilinearly if needed."""
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(rgb).transpose(2, 0, 1)


def _pillow_reads_tiff(data: bytes) -> bool:
    """Whether the first page of a TIFF is unsigned and at most 8 bits per sample.

    Those are left to Pillow (libtiff decodes every compression and photometric
    interpretation); wider ones are read with :func:`_wide_tiff_pixels`. A header tifffile
    cannot parse is left to Pillow too, as before.
    """
    try:
        with tifffile.TiffFile(io.BytesIO(data)) as tif:
            page = tif.pages.first
            return bool(page.bitspersample <= 8 and page.sampleformat == tifffile.SAMPLEFORMAT.UINT)
    except Exception:  # tifffile raises many types on headers it does not understand
        return True


def _wide_tiff_pixels(data: bytes, img: Image.Image | None) -> np.ndarray:
    """Pixels of the first page of a wide TIFF as ``[H, W]`` or ``[H, W, S]``, its own dtype.

    Args:
        data: The encoded TIFF.
        img: The file opened by Pillow, or ``None`` when Pillow cannot open it. A
            single-sample page Pillow opened takes its pixels from Pillow (which decodes
            compressions such as LZW that tifffile needs ``imagecodecs`` for), cast to the
            page's dtype; everything else is read by tifffile.

    Raises:
        ImageFormatError: a photometric interpretation or sample count other than greyscale
            (1-2 samples) or RGB (3-4 samples), or an unexpected page layout.
    """
    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        page = tif.pages.first
        photometric = tifffile.PHOTOMETRIC(page.photometric)
        samples = int(page.samplesperpixel)
        if samples not in _TIFF_SAMPLES.get(photometric, ()):
            raise ImageFormatError(
                f"is a {page.dtype} TIFF with photometric {photometric.name} and {samples} "
                "sample(s) per pixel; geofl reads TIFFs wider than 8 bits only as greyscale "
                "(MINISBLACK, 1 sample + optional alpha) or RGB (3 samples + optional alpha): "
                "save it as such or as 8-bit"
            )
        if img is not None and samples == 1 and img.mode in _PIL_WIDE:
            arr = np.asarray(img).astype(page.dtype)
        else:
            arr = np.asarray(page.asarray())
        axes = str(page.axes)
    if axes == "SYX":
        arr = arr.transpose(1, 2, 0)
    elif axes not in ("YX", "YXS"):
        raise ImageFormatError(f"has TIFF page axes {axes}; expected a single 2-D image")
    return arr


def _to_rgb8(arr: np.ndarray) -> np.ndarray:
    """``[H, W, 3]`` uint8 of ``[H, W]`` or ``[H, W, S]`` pixels (grey, grey+alpha, RGB, RGBA).

    Alpha is dropped, as Pillow's ``RGBA -> RGB``; grey is repeated over R, G and B.
    """
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 2, 3, 4):
        raise ImageFormatError(
            f"has pixel array shape {arr.shape}; expected grey, grey+alpha, RGB or RGBA"
        )
    colour = arr[..., :3] if arr.shape[2] >= 3 else np.repeat(arr[..., :1], 3, axis=2)
    return np.ascontiguousarray(_to_uint8(colour))


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """Map pixel values to uint8 by the fixed rule of their dtype (see the module docstring).

    Raises:
        ImageFormatError: NaN/infinite or out-of-range values, or a pixel type with no rule.
    """
    kind, bits = arr.dtype.kind, arr.dtype.itemsize * 8
    if kind == "u" and bits == 8:
        return arr.astype(np.uint8)
    if kind == "u" and bits == 16:
        return (arr.astype(np.uint16) >> 8).astype(np.uint8)
    if kind in "ui":
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > 65535:
            raise ImageFormatError(
                f"has {arr.dtype} pixels in [{lo}, {hi}], which geofl cannot map to "
                f"brightness (it reads wide integers as 16-bit data, 0..65535); {_WIDE_ADVICE}"
            )
        return (arr.astype(np.uint16) >> 8).astype(np.uint8)
    if kind == "f":
        return _float_to_uint8(arr)
    raise ImageFormatError(
        f"has pixel type {arr.dtype}, which geofl cannot map to brightness; {_WIDE_ADVICE}"
    )


def _float_to_uint8(arr: np.ndarray) -> np.ndarray:
    """``rint(v * 255)`` of float brightness in [0, 1] (half a step of slack is clipped)."""
    values = arr.astype(np.float64)
    if not np.isfinite(values).all():
        raise ImageFormatError(
            f"has NaN or infinite {arr.dtype} pixels; fill them (e.g. with 0) or {_WIDE_ADVICE}"
        )
    lo, hi = float(values.min()), float(values.max())
    slack = 0.5 / 255
    if lo < -slack or hi > 1 + slack:
        raise ImageFormatError(
            f"has {arr.dtype} pixels in [{lo:.6g}, {hi:.6g}]; geofl reads float images as "
            f"brightness in [0, 1]: rescale it to 0..1 or save it as 8- or 16-bit unsigned "
            "integers"
        )
    return np.rint(np.clip(values, 0.0, 1.0) * 255).astype(np.uint8)


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
        or a :class:`~geofl.data.lazy.StoredRows` view.
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
            ``inputs`` a :class:`~geofl.data.lazy.StoredRows` view read per batch).

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
