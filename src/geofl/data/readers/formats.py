"""File formats of the image datasets: how one file becomes one model input, outside a dataset.

A trained model is used on new files (``geofl predict``) only if each file is decoded exactly
as the training loader decoded its own files: the same decoder, the same resize to the
patch size and the same division into reflectance-like floats. Each dataset therefore names
a file format here, the run records it in ``model.json`` (``input.format``), and prediction
decodes by that name, so that a file of the training set gives the training input bit for
bit.

====================  ===========================================  =========  ============
format                files                                        scale      datasets
====================  ===========================================  =========  ============
``rgb8``              anything Pillow or tifffile reads (PNG,      ``/255``   eurosat_rgb,
                      JPEG, TIFF), mapped to 8-bit RGB by                     ucmerced
                      :func:`~geofl.data.readers.imagefolder.decode_rgb`'s
                      fixed rules (grey repeated, alpha dropped)
``uint16_bands``      band-stacked (multiband Geo)TIFFs of         ``/10000`` eurosat_ms,
                      unsigned integer digital numbers                        synthetic
                      (reflectance × 10000), pixel-interleaved
                      or band-separate
====================  ===========================================  =========  ============

Both resize bilinearly (Pillow, with antialiasing) to ``size × size`` when the file has
another size, as the loaders do, and both read TIFF pages by one rule
(:func:`~geofl.data.readers.imagedecode.read_tiff_header`): a stack of same-sized pages is one band
per page, which ``uint16_bands`` reads and ``rgb8`` refuses (an RGB image is one page).

A dataset from another package names its format with :func:`register_file_format`; a
dataset without one can still be used through ``geofl.load_model`` on tensors, but not by
``geofl predict``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import tifffile
from PIL import Image

from geofl.data.readers.imagedecode import ImageFormatError, decode_rgb, read_tiff_header

__all__ = [
    "DATASET_FILE_FORMATS",
    "FILE_FORMATS",
    "FileFormat",
    "as_uint16",
    "decode_band_tiff",
    "file_format_of",
    "read_band_tiff",
    "register_file_format",
    "resize_bands",
    "tiff_band_count",
]

_TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")
_UINT16_MAX = int(np.iinfo(np.uint16).max)


@dataclass(frozen=True)
class FileFormat:
    """One way of turning an image file into a ``[C, size, size]`` array.

    Attributes:
        name: Key in :data:`FILE_FORMATS` (recorded in ``model.json``).
        scale: Decoded values are divided by this to give the float inputs.
        description: What files the format reads, for messages.
        decode: ``(file bytes, size, accepted band counts) -> [C, size, size]`` array
            (integer dtype); raises :class:`~geofl.data.readers.imagefolder.ImageFormatError` for
            a readable file of the wrong form (the message follows the file name).
    """

    name: str
    scale: float
    description: str
    decode: Callable[[bytes, int, Sequence[int]], np.ndarray]


def tiff_band_count(data: bytes) -> int | None:
    """Bands of the first image of a TIFF (samples per pixel, or pages), None if not a TIFF.

    A 2-D image is one band; a 3-D one has its sample axis (``S``) or else its first axis
    (separate planes, or one page per band) as bands: the page rule of
    :func:`~geofl.data.readers.imagedecode.read_tiff_header`, which :func:`decode_band_tiff`
    reads by.
    """
    header = read_tiff_header(data)
    return header.bands if header is not None else None


def read_band_tiff(data: bytes) -> tuple[np.ndarray, str]:
    """The pixels of a band-stacked TIFF as ``[C, H, W]`` in the file's dtype, and its axes.

    Pixel-interleaved (``[H, W, C]``, ``planarconfig=contig``) and band-separate
    (``[C, H, W]``, separate planes or one page per band) files are both read; a 2-D image is
    one band.

    Raises:
        ImageFormatError: the first series is not a 2-D image or a stack of them.
    """
    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        series = tif.series[0]
        arr = np.asarray(series.asarray())
        axes = str(series.axes)
    if arr.ndim == 2:
        arr = arr[None]
    elif arr.ndim == 3 and axes.endswith("S"):
        arr = arr.transpose(2, 0, 1)
    elif arr.ndim != 3:
        raise ImageFormatError(f"has shape {arr.shape} (axes {axes}); expected H x W x bands")
    return arr, axes


def as_uint16(arr: np.ndarray, advice: str) -> np.ndarray:
    """``arr`` as uint16 digital numbers; other integers must lie in 0..65535.

    Raises:
        ImageFormatError: a float, complex or out-of-range pixel type (``advice`` says what
            to do).
    """
    if arr.dtype == np.uint16:
        return arr
    if arr.dtype.kind not in "ui" or arr.min() < 0 or arr.max() > _UINT16_MAX:
        raise ImageFormatError(f"has pixel type {arr.dtype}; {advice}")
    return arr.astype(np.uint16)


def resize_bands(arr: np.ndarray, size: int) -> np.ndarray:
    """``[C, size, size]`` uint16 of ``[C, H, W]`` uint16, each band resized bilinearly."""
    if arr.shape[1:] == (size, size):
        return np.ascontiguousarray(arr)
    out = np.empty((arr.shape[0], size, size), dtype=np.uint16)
    for b in range(arr.shape[0]):
        band = Image.fromarray(arr[b].astype(np.float32))
        resized = np.asarray(band.resize((size, size), Image.Resampling.BILINEAR))
        out[b] = np.clip(np.rint(resized), 0, _UINT16_MAX)
    return out


_DN_ADVICE = (
    "expected unsigned integer digital numbers (reflectance x 10000, as in the EuroSAT "
    "release): convert it to that"
)


def decode_band_tiff(data: bytes, size: int, bands: Sequence[int]) -> np.ndarray:
    """Decode a band-stacked uint16 TIFF with one of ``bands`` band counts (``uint16_bands``).

    Args:
        data: The encoded file.
        size: Output height and width in pixels.
        bands: Accepted band counts.

    Returns:
        ``[C, size, size]`` uint16.

    Raises:
        ImageFormatError: not a TIFF, another band count, or a pixel type that is not
            unsigned 16-bit digital numbers.
    """
    if not data.startswith(_TIFF_MAGIC):
        raise ImageFormatError("is not a TIFF file")
    arr, _ = read_band_tiff(data)
    if arr.shape[0] not in bands:
        want = " or ".join(str(b) for b in bands)
        raise ImageFormatError(f"has {arr.shape[0]} bands, expected {want}")
    return resize_bands(as_uint16(arr, _DN_ADVICE), size)


def _decode_rgb8(data: bytes, size: int, bands: Sequence[int]) -> np.ndarray:
    """:func:`decode_rgb`, the training loaders' decoder, and nothing else, so that a file
    is refused or read alike in training and prediction (``bands`` is unused: it reads grey,
    RGB and either with alpha, from one TIFF page).
    """
    return decode_rgb(data, size)


#: File formats by name.
FILE_FORMATS: dict[str, FileFormat] = {
    "rgb8": FileFormat(
        "rgb8",
        255.0,
        "8-bit RGB images (PNG, JPEG, TIFF; grey is repeated, alpha dropped)",
        _decode_rgb8,
    ),
    "uint16_bands": FileFormat(
        "uint16_bands",
        10000.0,
        "band-stacked GeoTIFFs of uint16 reflectance x 10000",
        decode_band_tiff,
    ),
}

#: Dataset registry key → the file format its loader reads.
DATASET_FILE_FORMATS: dict[str, str] = {
    "eurosat_rgb": "rgb8",
    "ucmerced": "rgb8",
    "eurosat_ms": "uint16_bands",
    "synthetic": "uint16_bands",
    "synthetic_sen12ms": "uint16_bands",
    "sen12ms": "uint16_bands",
    "synthetic_bigearthnet": "uint16_bands",
}


def register_file_format(dataset: str, file_format: str) -> None:
    """Declare that ``dataset``'s loader reads files of ``file_format``.

    Raises:
        KeyError: ``file_format`` is not in :data:`FILE_FORMATS`.
    """
    if file_format not in FILE_FORMATS:
        raise KeyError(f"unknown file format {file_format!r}; known: {sorted(FILE_FORMATS)}")
    DATASET_FILE_FORMATS[dataset] = file_format


def file_format_of(dataset: str) -> str | None:
    """The file format of ``dataset``'s files, or None if it declares none."""
    return DATASET_FILE_FORMATS.get(dataset)
