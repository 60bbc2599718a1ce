"""Predictions for image files, written as CSV (``geofl predict``).

Files are decoded exactly as the training loader decoded its own files: by the file format
the run recorded (:mod:`geofl.data.formats`: the same decoder, the same bilinear resize to
the trained patch size, the same scale), then given to the model, which selects the
trained bands and standardises them (:class:`~geofl.inference.load.GeoflModel`). Decoding
runs in a small thread pool, inference in batches; rows stream into the CSV, which is
written atomically (a failure leaves no partial file).

A file that cannot be predicted (not an image, another band count, a pixel type the format
refuses) is reported on one line naming it and skipped; the others are still predicted.
The columns are described in :mod:`geofl.inference.outputs`.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np
import torch

from geofl.data.formats import FILE_FORMATS, FileFormat
from geofl.data.imagefolder import ImageFormatError
from geofl.errors import DataError, RunDirError
from geofl.inference.load import GeoflModel
from geofl.inference.outputs import prediction_columns
from geofl.io import atomic_write

__all__ = ["IMAGE_SUFFIXES", "collect_images", "decode_image", "predict_to_csv"]

#: Suffixes collected from folders (files named explicitly are tried whatever their suffix).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff")


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


def decode_image(path: Path, model: GeoflModel) -> torch.Tensor:
    """One file as the model's raw input ``[C, size, size]`` float32 (see the module doc).

    Raises:
        DataError: one line naming the file and why it cannot be used.
    """
    fmt, scale, size = _file_format(model)
    counts = sorted({len(model.input_bands), len(model.bands)})
    try:
        arr = fmt.decode(Path(path).read_bytes(), size, counts)
    except ImageFormatError as err:
        raise DataError(f"{path} {err}; the model reads {fmt.description}") from None
    except OSError as err:
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


def _decode_or_reason(path: Path, model: GeoflModel) -> torch.Tensor | str:
    """:func:`decode_image`'s tensor, or its one-line :class:`DataError` message."""
    try:
        return decode_image(path, model)
    except DataError as err:
        return str(err)


def _write_rows(
    fh: IO[bytes],
    model: GeoflModel,
    files: Sequence[Path],
    batch_size: int,
    on_skip: Callable[[str], None],
    workers: int,
) -> int:
    """Decode, predict and write the CSV rows (header before the first row) to ``fh``.

    Args:
        fh: Binary file the UTF-8 CSV goes to (left open).
        model: The model predicting.
        files: Image files, predicted and written in this order.
        batch_size: Files per forward pass.
        on_skip: Called with ``"skipped <reason>"`` for each file that fails, in order.
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
            decoded = list(pool.map(lambda path: _decode_or_reason(path, model), chunk))
            ok = [(i, x) for i, x in enumerate(decoded) if isinstance(x, torch.Tensor)]
            rows = _predict_batch(model, ok) if ok else {}
            for i, path in enumerate(chunk):
                if i not in rows:
                    on_skip(f"skipped {decoded[i]}")
                    continue
                pred, names, values = rows[i]
                if written == 0:
                    writer.writerow(["path", "prediction", *names])
                writer.writerow([str(path), pred, *(f"{v:.9g}" for v in values)])
                written += 1
    text.flush()
    text.detach()
    return written


def predict_to_csv(
    model: GeoflModel,
    files: Sequence[Path],
    out: Path,
    *,
    batch_size: int = 64,
    on_skip: Callable[[str], None] = lambda line: None,
    workers: int = 0,
) -> int:
    """Predict every file and write the CSV ``out``; files that fail are skipped.

    Args:
        model: From :func:`~geofl.inference.load.load_model`.
        files: Image files (see :func:`collect_images`).
        out: The CSV to write (atomically).
        batch_size: Files per forward pass.
        on_skip: Called with one line per skipped file (it names the file).
        workers: Decoding threads (0: up to 4, at most the CPU count).

    Returns:
        The number of predictions written (at least 1).

    Raises:
        DataError: no file could be predicted (no CSV is written).
        RunDirError: the run's dataset has no file format geofl reads.
    """
    _file_format(model)  # fails before any decoding
    written = 0

    def write(fh: IO[bytes]) -> None:
        nonlocal written
        written = _write_rows(fh, model, files, batch_size, on_skip, workers)
        if written == 0:
            raise _NothingWrittenError

    try:
        atomic_write(Path(out), write)
    except _NothingWrittenError:
        raise DataError(
            f"none of the {len(files)} file(s) could be predicted (see the lines above); "
            f"{out} was not written"
        ) from None
    return written
