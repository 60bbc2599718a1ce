"""Decode one image file to 8-bit RGB by a fixed rule per pixel type.

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

TIFF pages follow one rule everywhere in geofl (:func:`read_tiff_header`): a TIFF's image
is its first tifffile series, either one page whose samples are its bands or a stack of
same-sized pages, one band each. The band-stacked readers
(:func:`geofl.data.readers.formats.read_band_tiff`) read both layouts; :func:`decode_rgb` needs one
page and refuses a stack (it used to decode only the first page, so a 13-band stack trained
as grey while ``geofl predict`` refused it).

:func:`check_image_size` refuses, from the header alone, an image larger than a caller's
pixel limit, before any decoder allocates its pixels (a 124-byte TIFF can claim
100000 × 100000 pixels, 18.6 GiB of uint16).

A refused file raises :class:`ImageFormatError`, whose message follows the file name
(:func:`geofl.data.readers.imagefolder.decode_folder` turns it into a one-line
:class:`geofl.errors.DataError` naming the file).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
import tifffile
from PIL import Image, UnidentifiedImageError

__all__ = [
    "BYTES_PER_PIXEL",
    "ImageFormatError",
    "ImageTooLargeError",
    "TiffHeader",
    "check_image_size",
    "decode_rgb",
    "read_tiff_header",
]

#: Bytes one allowed pixel may decode to, and a file may hold per allowed pixel: 13 bands
#: of 32-bit samples (52 bytes) fit, so for the shipped formats only the pixel limit bites;
#: it stops a header that claims thousands of bands on a few pixels.
BYTES_PER_PIXEL = 64
#: Pillow stores at most 4 bytes per band (modes ``I``, ``F``, ``RGBA``): its bound on a
#: decoded image, known from the header.
_PIL_BAND_BYTES = 4

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


class ImageTooLargeError(ImageFormatError):
    """The header claims more pixels or bytes than the caller allows (nothing was decoded)."""


@dataclass(frozen=True)
class TiffHeader:
    """What a TIFF's header says about its image, read by tifffile without decoding pixels.

    Attributes:
        shape: Shape of the first series (the image; a stack of pages has the pages first).
        axes: tifffile's axes of that series (``Y``, ``X``, ``S`` samples, ``Q``... pages).
        page_shape: Shape of the first page.
        height: Rows of the first page.
        width: Columns of the first page.
        itemsize: Bytes per sample.
        pillow_reads: The first page is unsigned with at most 8 bits per sample, the TIFFs
            :func:`decode_rgb` leaves to Pillow.
    """

    shape: tuple[int, ...]
    axes: str
    page_shape: tuple[int, ...]
    height: int
    width: int
    itemsize: int
    pillow_reads: bool

    @property
    def stacked(self) -> bool:
        """The image spans several pages (one band each, or several images)."""
        return math.prod(self.shape) > math.prod(self.page_shape)

    @property
    def pages(self) -> int:
        """Pages of the image (1 unless :attr:`stacked`)."""
        return max(1, math.prod(self.shape) // max(1, math.prod(self.page_shape)))

    @property
    def bands(self) -> int | None:
        """Samples per pixel of one page, or pages of a 2-D stack; None for other ranks."""
        if len(self.shape) == 2:
            return 1
        if len(self.shape) == 3:
            return int(self.shape[2] if self.axes.endswith("S") else self.shape[0])
        return None

    @property
    def nbytes(self) -> int:
        """Bytes a decoder allocates for the image (or its first page, if larger)."""
        return max(math.prod(self.shape), math.prod(self.page_shape)) * self.itemsize


def read_tiff_header(data: bytes) -> TiffHeader | None:
    """The header of a TIFF's first image, or None if ``data`` is not a TIFF tifffile parses.

    Only tags are read (tifffile decodes nothing until ``asarray``), so a lying header costs
    nothing here.
    """
    if not data.startswith(_TIFF_MAGIC):
        return None
    try:
        with tifffile.TiffFile(io.BytesIO(data)) as tif:
            page = tif.pages.first
            shape, axes = _first_series(tif, page)
            dtype = page.dtype
            return TiffHeader(
                shape=shape,
                axes=axes,
                page_shape=tuple(int(n) for n in page.shape),
                height=int(page.imagelength),
                width=int(page.imagewidth),
                itemsize=dtype.itemsize if dtype is not None else -(-page.bitspersample // 8),
                pillow_reads=page.bitspersample <= 8
                and page.sampleformat == tifffile.SAMPLEFORMAT.UINT,
            )
    except Exception:  # tifffile raises many types on headers it does not understand
        return None


def _first_series(tif: tifffile.TiffFile, page: tifffile.TiffPage) -> tuple[tuple[int, ...], str]:
    """Shape and axes of the first series, or of the first page if tifffile finds none."""
    try:
        series = tif.series[0]
        return tuple(int(n) for n in series.shape), str(series.axes)
    except Exception:  # series detection is heuristic; the first page is what is decoded
        return tuple(int(n) for n in page.shape), str(page.axes)


def check_image_size(data: bytes, max_pixels: int) -> None:
    """Refuse an image whose header claims more than ``max_pixels`` pixels (height × width)
    or more than :data:`BYTES_PER_PIXEL` ``× max_pixels`` decoded bytes.

    TIFFs are measured by tifffile (every decoder's allocation: the first series and page),
    anything else by Pillow's ``Image.open``, which reads the header only. A file neither
    parses passes: its decoder refuses it without allocating by a header.

    Raises:
        ImageTooLargeError: naming the size and the limit (the message follows the file name).
    """
    header = read_tiff_header(data)
    if header is not None:
        height, width, nbytes = header.height, header.width, header.nbytes
        what = f"{header.shape} of {header.itemsize}-byte samples"
    else:
        size = _pillow_size(data)
        if size is None:
            return
        (width, height), bands = size
        nbytes = width * height * bands * _PIL_BAND_BYTES
        what = f"{bands} band(s) of at most {_PIL_BAND_BYTES} bytes"
    if height * width > max_pixels:
        raise ImageTooLargeError(
            f"is {width} x {height} pixels, more than the {max_pixels} allowed"
        )
    if nbytes > BYTES_PER_PIXEL * max_pixels:
        raise ImageTooLargeError(
            f"decodes to {nbytes} bytes, more than the {BYTES_PER_PIXEL * max_pixels} "
            f"allowed ({BYTES_PER_PIXEL} per pixel of the {max_pixels}-pixel limit; {what})"
        )


def _pillow_size(data: bytes) -> tuple[tuple[int, int], int] | None:
    """``((width, height), bands)`` from the header Pillow reads, None if it cannot open it.

    Raises:
        ImageTooLargeError: Pillow's own decompression-bomb limit refused the header.
    """
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.size, len(img.getbands())
    except Image.DecompressionBombError as err:
        raise ImageTooLargeError(f"is larger than Pillow opens ({err})") from None
    except Exception:  # not an image Pillow knows: its decoder will say so
        return None


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
            to brightness, or a TIFF of several pages (the message says what to do).
    """
    header = read_tiff_header(data)
    if header is not None:
        _refuse_page_stack(header)
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
        if img.format == "TIFF" and header is not None and not header.pillow_reads:
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


def _refuse_page_stack(header: TiffHeader) -> None:
    """Refuse an image of several TIFF pages: geofl reads such pages as bands (the rule of
    :func:`read_tiff_header`), and an RGB image is one page.

    Raises:
        ImageFormatError: the image is a stack of pages.
    """
    if not header.stacked:
        return
    bands, pages = header.bands, header.pages
    what = (
        f"{bands} bands in {pages} TIFF pages"
        if bands == pages
        else f"{pages} TIFF pages of shape {header.page_shape}"
    )
    raise ImageFormatError(
        f"has {what}, expected an RGB image in one page (3 samples per pixel; grey and "
        "alpha accepted): save it as a single page"
    )


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
