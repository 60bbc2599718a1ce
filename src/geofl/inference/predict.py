"""Predictions for image files, written as CSV (``geofl predict``).

Files are decoded exactly as the training loader decoded its own files: by the file format
the run recorded (:mod:`geofl.data.readers.formats`: the same decoder, the same bilinear resize to
the trained patch size, the same scale), then given to the model, which selects the
trained bands and standardises them (:class:`~geofl.inference.load.GeoflModel`). Decoding
runs in a small thread pool, inference in batches; rows stream into the CSV, which is
written atomically (a failure leaves no partial file).

A file that cannot be predicted (not an image, another band count, a pixel type the format
refuses) is reported on one line naming it and skipped; the others are still predicted.
The columns are described in :mod:`geofl.inference.outputs`.

Files come from users, so nothing in one is trusted before it is checked:

* a path that is not a regular file (``/dev/zero``, a FIFO, a device) is refused from
  ``os.stat`` before it is opened (opening a FIFO for reading blocks; reading
  ``/dev/zero`` never ends), and again from ``fstat`` on the descriptor, which is opened
  non-blocking, so a file swapped in between is caught too;
* an image may have at most ``max_pixels`` pixels (height × width; ``--max-pixels``,
  default :data:`DEFAULT_MAX_PIXELS` = 4096 × 4096), checked from its header before any
  decoder allocates (:func:`geofl.data.readers.imagedecode.check_image_size`); the file and the
  decoded pixels may take at most :data:`~geofl.data.readers.imagedecode.BYTES_PER_PIXEL` bytes per
  allowed pixel (1 GiB by default). The limit is absolute, not a multiple of the trained
  patch size: every file is resized to the patch, so the cap only bounds memory (a few
  decoding threads at once), and a whole satellite scene is better cut into patches;
* ``out`` must be a file path: a folder or a device is refused before anything is decoded.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import IO

import numpy as np
import torch
from PIL import UnidentifiedImageError

from geofl.data.readers.formats import FILE_FORMATS, FileFormat
from geofl.data.readers.imagedecode import (
    BYTES_PER_PIXEL,
    ImageFormatError,
    ImageTooLargeError,
    check_image_size,
)
from geofl.errors import DataError, RunDirError
from geofl.inference.load import GeoflModel
from geofl.inference.outputs import prediction_columns
from geofl.io import atomic_write

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGE_SUFFIXES",
    "collect_images",
    "decode_image",
    "predict_to_csv",
]

#: Suffixes collected from folders (files named explicitly are tried whatever their suffix).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
#: Largest image accepted by default, in pixels (height × width): 4096 × 4096. With 13
#: uint16 bands that is 436 MB decoded, times the decoding threads (4 at most).
DEFAULT_MAX_PIXELS = 4096 * 4096
_ADVICE_TOO_LARGE = "cut it into patches or raise --max-pixels"
#: What a path that is not a regular file is, by ``stat`` mode test.
_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def collect_images(sources: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """The files to predict: files as given, folders searched recursively.

    From folders, files with an :data:`IMAGE_SUFFIXES` suffix (any case) are taken, sorted,
    hidden files and folders left out. Duplicates are kept once, in first-seen order.

    Returns:
        ``(files, problems)``: problems are one-line messages (a path that does not exist,
        a folder without images).
    """
    files: list[Path] = []
    problems: list[str] = []
    for src in sources:
        src = Path(src)
        if src.is_dir():
            found = sorted(
                p
                for p in src.rglob("*")
                if p.suffix.lower() in IMAGE_SUFFIXES
                and not any(part.startswith(".") for part in p.relative_to(src).parts)
                and p.is_file()
            )
            if not found:
                exts = ", ".join(s[1:] for s in IMAGE_SUFFIXES)
                problems.append(f"{src}: no image files ({exts}) in this folder")
            files += found
        elif src.exists():
            files.append(src)
        else:
            problems.append(f"{src}: no such file or folder")
    return list(dict.fromkeys(files)), problems


def _file_format(model: GeoflModel) -> tuple[FileFormat, float, int]:
    """The format, scale and square patch side the model's files are decoded with."""
    inp = model.spec.input
    fmt = FILE_FORMATS.get(inp.format) if inp.format is not None else None
    if fmt is None or inp.scale is None:
        raise RunDirError(
            f"dataset {inp.dataset!r} declares no file format geofl can read (model.json "
            f"input.format: {inp.format!r}); use geofl.load_model on tensors instead"
        )
    if inp.patch_size is None:
        raise RunDirError(f"dataset {inp.dataset!r} has tabular inputs, not images")
    h, w = inp.patch_size
    if h != w:
        raise RunDirError(f"patch size {h}x{w} is not square; geofl predict resizes to squares")
    return fmt, inp.scale, h


def _refuse_irregular(path: Path, st: os.stat_result, max_pixels: int) -> None:
    """Refuse a path that is not a regular file, or a file over the byte limit.

    Raises:
        DataError: naming the path, what it is, and what to do.
    """
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a file")
        raise DataError(
            f"{path} is not a regular file ({kind}); pass image files, or folders holding them"
        )
    if st.st_size > BYTES_PER_PIXEL * max_pixels:
        raise DataError(
            f"{path} is {st.st_size} bytes, more than the {BYTES_PER_PIXEL * max_pixels} "
            f"allowed ({BYTES_PER_PIXEL} per pixel of --max-pixels {max_pixels}); "
            f"{_ADVICE_TOO_LARGE}"
        )


def _read_regular(path: Path, max_pixels: int) -> bytes:
    """The bytes of a regular file of at most ``BYTES_PER_PIXEL × max_pixels`` bytes.

    The path is checked before it is opened (a FIFO would block the ``open``), and the
    descriptor, opened non-blocking, after (a file swapped in meanwhile); the read stops
    one byte past the limit whatever the file claims.

    Raises:
        DataError: not a regular file, too large, or unreadable (naming the path).
    """
    limit = BYTES_PER_PIXEL * max_pixels
    try:
        _refuse_irregular(path, os.stat(path), max_pixels)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb") as fh:
            _refuse_irregular(path, os.fstat(fh.fileno()), max_pixels)
            data = fh.read(limit + 1)
    except OSError as err:
        raise DataError(f"{path} cannot be read ({err.strerror or err})") from None
    if len(data) > limit:
        raise DataError(f"{path} grew past {limit} bytes while read; {_ADVICE_TOO_LARGE}")
    return data


def decode_image(
    path: Path, model: GeoflModel, *, max_pixels: int = DEFAULT_MAX_PIXELS
) -> torch.Tensor:
    """One file as the model's raw input ``[C, size, size]`` float32 (see the module doc).

    Args:
        path: A regular file (anything else is refused before it is opened).
        model: The model whose file format, patch size and band counts apply.
        max_pixels: Largest image accepted (height × width), checked from the header.

    Raises:
        DataError: one line naming the file and why it cannot be used.
    """
    fmt, scale, size = _file_format(model)
    counts = sorted({len(model.input_bands), len(model.bands)})
    data = _read_regular(Path(path), max_pixels)
    try:
        check_image_size(data, max_pixels)
        arr = fmt.decode(data, size, counts)
    except ImageTooLargeError as err:
        raise DataError(f"{path} {err}; {_ADVICE_TOO_LARGE}") from None
    except ImageFormatError as err:
        raise DataError(f"{path} {err}; the model reads {fmt.description}") from None
    except UnidentifiedImageError:
        raise DataError(
            f"{path} is not an image geofl can read (neither Pillow nor tifffile identifies "
            f"it); the model reads {fmt.description}"
        ) from None
    except OSError as err:  # Pillow: truncated or broken image data
        raise DataError(f"{path} cannot be read ({err.strerror or err})") from None
    except Exception as err:  # Pillow/tifffile raise many types on non-images
        detail = " ".join(str(err).split())
        raise DataError(
            f"{path} is not an image geofl can read ({type(err).__name__}: {detail}); "
            f"the model reads {fmt.description}"
        ) from None
    # Integers convert to float32 exactly (as the loaders' ``.to(torch.float32)``); the
    # copy also makes the array writable (Pillow may hand out read-only buffers).
    return torch.from_numpy(arr.astype(np.float32)).div_(scale)


class _NothingWrittenError(Exception):
    """No file of the call could be predicted (aborts the atomic write)."""


def _batches(items: Sequence[Path], size: int) -> Iterator[Sequence[Path]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _predict_batch(
    model: GeoflModel, inputs: list[tuple[int, torch.Tensor]]
) -> dict[int, tuple[str, list[str], list[float]]]:
    """Index → (prediction, column names, values), one forward pass per band count."""
    out: dict[int, tuple[str, list[str], list[float]]] = {}
    by_bands: dict[int, list[tuple[int, torch.Tensor]]] = {}
    for i, x in inputs:
        by_bands.setdefault(x.shape[0], []).append((i, x))
    for group in by_bands.values():
        with torch.inference_mode():
            outputs = model(torch.stack([x for _, x in group]))
        cols = prediction_columns(outputs, model.spec)
        for row, (i, _) in enumerate(group):
            out[i] = (cols.prediction[row], cols.names, cols.values[row].tolist())
    return out


def _decode_or_reason(path: Path, model: GeoflModel, max_pixels: int) -> torch.Tensor | str:
    """:func:`decode_image`'s tensor, or its one-line :class:`DataError` message."""
    try:
        return decode_image(path, model, max_pixels=max_pixels)
    except DataError as err:
        return str(err)


def _write_rows(
    fh: IO[bytes],
    model: GeoflModel,
    files: Sequence[Path],
    decode: Callable[[Path], torch.Tensor | str],
    batch_size: int,
    on_skip: Callable[[str], None],
    workers: int,
) -> int:
    """Decode, predict and write the CSV rows (header before the first row) to ``fh``.

    Args:
        fh: Binary file the UTF-8 CSV goes to (left open).
        model: The model predicting.
        files: Image files, predicted and written in this order.
        decode: A file's model input, or the one-line reason it has none.
        batch_size: Files per forward pass.
        on_skip: Called with the reason for each file that fails, in order.
        workers: Decoding threads (0: up to 4, at most the CPU count).

    Returns:
        The number of rows written (no header either if 0).
    """
    written = 0
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    writer = csv.writer(text)
    threads = workers or min(4, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for chunk in _batches(files, batch_size):
            decoded = list(pool.map(decode, chunk))
            ok = [(i, x) for i, x in enumerate(decoded) if isinstance(x, torch.Tensor)]
            rows = _predict_batch(model, ok) if ok else {}
            for i, path in enumerate(chunk):
                if i not in rows:
                    on_skip(str(decoded[i]))
                    continue
                pred, names, values = rows[i]
                if written == 0:
                    writer.writerow(["path", "prediction", *names])
                writer.writerow([str(path), pred, *(f"{v:.9g}" for v in values)])
                written += 1
    text.flush()
    text.detach()
    return written


def _refuse_out(out: Path) -> None:
    """Refuse an ``out`` the CSV cannot replace: a folder, a device, a path under a file.

    Checked before anything is decoded, so a bad ``--out`` costs no work and leaves nothing
    behind (``os.replace`` onto a folder fails only after every file was predicted, and onto
    a device it would replace the device node).

    Raises:
        DataError: naming ``out`` and what to give instead.
    """
    if out.is_dir():
        raise DataError(
            f"{out} is a folder, not a file to write the CSV to; name a file, e.g. "
            f"{out / 'predictions.csv'}"
        )
    if out.exists() and not out.is_file():
        raise DataError(f"{out} is not a regular file; name a new or a regular file for the CSV")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise DataError(f"cannot write {out}: {parent} is a file, not a folder")


def predict_to_csv(
    model: GeoflModel,
    files: Sequence[Path],
    out: Path,
    *,
    batch_size: int = 64,
    on_skip: Callable[[str], None] = lambda line: None,
    workers: int = 0,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> int:
    """Predict every file and write the CSV ``out``; files that fail are skipped.

    Args:
        model: From :func:`~geofl.inference.load.load_model`.
        files: Image files (see :func:`collect_images`).
        out: The CSV to write (atomically).
        batch_size: Files per forward pass.
        on_skip: Called with ``"skipped <reason>"`` per skipped file (the reason names it).
        workers: Decoding threads (0: up to 4, at most the CPU count).
        max_pixels: Largest image accepted (height × width), see :func:`decode_image`.

    Returns:
        The number of predictions written (at least 1).

    Raises:
        DataError: ``out`` cannot be written, or no file could be predicted (no CSV is
            written either way). With a single file, the message is that file's reason.
        RunDirError: the run's dataset has no file format geofl reads.
    """
    _file_format(model)  # fails before any decoding
    out = Path(out)
    _refuse_out(out)
    written = 0
    reasons: list[str] = []

    def skip(reason: str) -> None:
        reasons.append(reason)
        on_skip(f"skipped {reason}")

    def write(fh: IO[bytes]) -> None:
        nonlocal written
        decode = partial(_decode_or_reason, model=model, max_pixels=max_pixels)
        written = _write_rows(fh, model, files, decode, batch_size, skip, workers)
        if written == 0:
            raise _NothingWrittenError

    try:
        atomic_write(out, write)
    except _NothingWrittenError:
        if len(files) == 1:
            raise DataError(f"{reasons[0]}; {out} was not written") from None
        raise DataError(
            f"none of the {len(files)} file(s) could be predicted (see the lines above); "
            f"{out} was not written"
        ) from None
    except OSError as err:  # the CSV's folder cannot be created or written
        raise DataError(
            f"cannot write {out} ({err.strerror or err}); nothing was written"
        ) from None
    return written
