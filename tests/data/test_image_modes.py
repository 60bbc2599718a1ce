"""Every image mode through the real loader: decoded values by the rule, or refused by name.

Tiny images are written with Pillow and tifffile into a UC Merced class folder and loaded
with ``DATASETS.build("ucmerced", ...)`` at their native size, so the loaded float32 values
are exactly ``stored uint8 / 255`` of the rule in :mod:`geofl.data.readers.imagefolder`:
8-bit modes as Pillow's ``convert("RGB")``, 16-bit as the high byte, wider integers as
16-bit when in 0..65535, float as ``rint(v * 255)`` of brightness in [0, 1].
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from PIL import Image

from geofl.data.base import DATASETS, ArrayDataset
from geofl.data.readers import eurosat, ucmerced
from geofl.errors import DataError

assert {eurosat.EUROSAT_MS_SPEC.name, ucmerced.UCMERCED_SPEC.name}  # registers loaders
SIDE = 8
#: Writes an array as encoded file bytes.
Encode = Callable[[np.ndarray], bytes]
#: 16-bit values around every edge of the high-byte rule, then a ramp.
U16 = np.concatenate(
    [
        np.array([0, 1, 255, 256, 257, 32767, 32768, 32895, 65279, 65280, 65534, 65535]),
        np.linspace(0, 65535, SIDE * SIDE - 12).round(),
    ]
).astype(np.uint16)


def _gray16() -> np.ndarray:
    return U16.reshape(SIDE, SIDE)


def _rgb16() -> np.ndarray:
    g = _gray16()
    return np.stack([g, g[::-1], g.T], axis=-1)


def _pil(img: Image.Image, fmt: str, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def _tiff(arr: np.ndarray, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, arr, **kwargs)
    return buf.getvalue()


def _png16_rgb(arr: np.ndarray) -> bytes:
    """A 16-bit RGB PNG (Pillow cannot write one), rows unfiltered, big-endian samples."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(tag + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc)

    h, w, _ = arr.shape
    raw = b"".join(b"\0" + arr[y].astype(">u2").tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _load(tmp_path: Path, data: bytes, ext: str, size: int = SIDE) -> ArrayDataset:
    path = tmp_path / "src" / "agricultural" / f"img{ext}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return DATASETS.build(
        "ucmerced", {"root": tmp_path / "src", "size": size}, cache_dir=tmp_path / "cache"
    )


def _as_loaded(stored: np.ndarray) -> torch.Tensor:
    """``[H, W, 3]`` uint8 -> ``[3, H, W]`` float32 exactly as the loader scales it."""
    return torch.from_numpy(stored.transpose(2, 0, 1).copy()).to(torch.float32).div_(255.0)


def _high_byte_rgb(arr: np.ndarray) -> np.ndarray:
    """The 16-bit rule, written independently: floor(v / 256), grey repeated over RGB."""
    rgb = np.repeat(arr[..., None], 3, axis=2) if arr.ndim == 2 else arr[..., :3]
    return np.floor(rgb.astype(np.float64) / 256).astype(np.uint8)


# ---------------------------------------------------------------- 8-bit: as Pillow


@pytest.mark.parametrize(
    ("mode", "fmt", "ext"),
    [
        ("1", "PNG", ".png"),
        ("L", "PNG", ".png"),
        ("LA", "PNG", ".png"),
        ("P", "PNG", ".png"),
        ("RGB", "PNG", ".png"),
        ("RGBA", "PNG", ".png"),
        ("L", "TIFF", ".tif"),
        ("P", "TIFF", ".tif"),
        ("CMYK", "TIFF", ".tif"),
        ("RGBA", "TIFF", ".tif"),
        ("L", "JPEG", ".jpg"),
        ("CMYK", "JPEG", ".jpg"),
    ],
)
def test_8bit_modes_decode_as_pillow_convert(tmp_path: Path, mode: str, fmt: str, ext: str) -> None:
    rng = np.random.default_rng(3)
    src = Image.fromarray(rng.integers(0, 256, (SIDE, SIDE, 4), dtype=np.uint8), "RGBA")
    base = src if "A" in mode else src.convert("RGB")  # P without a transparency chunk
    data = _pil(base.convert(mode), fmt)
    with Image.open(io.BytesIO(data)) as img:
        assert img.mode == mode
        want = np.asarray(img.convert("RGB"))
    ds = _load(tmp_path, data, ext)
    assert torch.equal(ds.inputs[0], _as_loaded(want))
    assert ds.inputs[0].std().item() > 0.05  # not a solid image


# ---------------------------------------------------------------- 16-bit: the high byte


def test_i16_png_half_scale_is_half_not_white(tmp_path: Path) -> None:
    data = _pil(Image.fromarray(_gray16()), "PNG")
    with Image.open(io.BytesIO(data)) as img:
        assert img.mode == "I;16"
    got = _load(tmp_path, data, ".png").inputs[0]
    assert torch.equal(got, _as_loaded(_high_byte_rgb(_gray16())))
    flat = got[0].flatten()
    assert abs(flat[6].item() - 0.5) < 1 / 255  # 32768 -> 128 / 255, not 255
    stored = (flat * 255).round().to(torch.int64)[:12].tolist()
    assert stored == [0, 0, 0, 1, 1, 127, 128, 128, 254, 255, 255, 255]  # the high byte


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda a: _pil(Image.fromarray(a), "TIFF"), id="I;16-tiff-pillow"),
        pytest.param(
            lambda a: _pil(Image.fromarray(a), "TIFF", compression="tiff_lzw"), id="I;16-tiff-lzw"
        ),
        pytest.param(lambda a: _tiff(a.astype(">u2"), byteorder=">"), id="I;16B-tiff"),
        pytest.param(lambda a: _tiff(a, compression="zlib"), id="uint16-tiff-deflate"),
    ],
)
def test_uint16_grey_tiff(tmp_path: Path, encode: Encode) -> None:
    ds = _load(tmp_path, encode(_gray16()), ".tif")
    assert torch.equal(ds.inputs[0], _as_loaded(_high_byte_rgb(_gray16())))


@pytest.mark.parametrize(
    ("encode", "ext"),
    [
        pytest.param(lambda a: _tiff(a, photometric="rgb"), ".tif", id="rgb-tiff-contig"),
        pytest.param(
            lambda a: _tiff(
                a.transpose(2, 0, 1).copy(), photometric="rgb", planarconfig="separate"
            ),
            ".tif",
            id="rgb-tiff-separate",
        ),
        pytest.param(
            lambda a: _tiff(
                np.concatenate([a, np.full_like(a[..., :1], 9)], axis=2),
                photometric="rgb",
                extrasamples=[2],
            ),
            ".tif",
            id="rgba-tiff",
        ),
        pytest.param(_png16_rgb, ".png", id="rgb-png"),
    ],
)
def test_uint16_rgb(tmp_path: Path, encode: Encode, ext: str) -> None:
    ds = _load(tmp_path, encode(_rgb16()), ext)
    assert torch.equal(ds.inputs[0], _as_loaded(_high_byte_rgb(_rgb16())))


def test_uint16_grey_alpha_tiff(tmp_path: Path) -> None:
    ga = np.stack([_gray16(), np.full_like(_gray16(), 7)], axis=-1)
    ds = _load(tmp_path, _tiff(ga, photometric="minisblack", extrasamples=[2]), ".tif")
    assert torch.equal(ds.inputs[0], _as_loaded(_high_byte_rgb(_gray16())))


def test_uint16_resized_keeps_mean(tmp_path: Path) -> None:
    ramp = np.tile(np.linspace(0, 65535, 64).round().astype(np.uint16), (64, 1))
    ds = _load(tmp_path, _pil(Image.fromarray(ramp), "PNG"), ".png", size=16)
    assert ds.inputs.shape == (1, 3, 16, 16)
    assert abs(ds.inputs.mean().item() - 0.5) < 2 / 255


# ---------------------------------------------------------------- wider integers


@pytest.mark.parametrize(
    ("values", "encode"),
    [
        pytest.param(
            _gray16(), lambda a: _pil(Image.fromarray(a.astype(np.int32)), "TIFF"), id="I-pillow"
        ),
        pytest.param(_gray16(), lambda a: _tiff(a.astype(np.int32)), id="int32"),
        pytest.param(_gray16(), lambda a: _tiff(a.astype(np.uint32)), id="uint32"),
        pytest.param(_gray16() // 2, lambda a: _tiff(a.astype(np.int16)), id="int16"),
    ],
)
def test_wide_integers_in_16bit_range(tmp_path: Path, values: np.ndarray, encode: Encode) -> None:
    ds = _load(tmp_path, encode(values), ".tif")
    assert torch.equal(ds.inputs[0], _as_loaded(_high_byte_rgb(values)))


# ---------------------------------------------------------------- float: [0, 1]

FLOATS = np.concatenate(
    [
        np.array([0.0, 1.0, 0.5, 0.25, 1 / 255, 0.5 / 255 - 1e-9, -0.001, 1.001]),
        np.linspace(0, 1, SIDE * SIDE - 8),
    ]
).reshape(SIDE, SIDE)


def _float_rgb(arr: np.ndarray) -> np.ndarray:
    rgb = np.repeat(arr[..., None], 3, axis=2) if arr.ndim == 2 else arr
    return np.rint(np.clip(rgb.astype(np.float64), 0, 1) * 255).astype(np.uint8)


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(
            lambda a: _pil(Image.fromarray(a.astype(np.float32)), "TIFF"), id="F-tiff-pillow"
        ),
        pytest.param(lambda a: _tiff(a.astype(np.float32)), id="float32-tifffile"),
        pytest.param(lambda a: _tiff(a.astype(np.float64)), id="float64-tifffile"),
    ],
)
def test_float_grey(tmp_path: Path, encode: Encode) -> None:
    ds = _load(tmp_path, encode(FLOATS), ".tif")
    got = ds.inputs[0]
    assert torch.equal(got, _as_loaded(_float_rgb(FLOATS.astype(np.float32))))
    flat = got[0].flatten()
    assert flat[0].item() == 0.0 and flat[1].item() == 1.0  # not all black
    assert abs(flat[2].item() - 0.5) < 1 / 255
    assert flat[6].item() == 0.0 and flat[7].item() == 1.0  # half-step slack is clipped


def test_float16_and_float_rgb(tmp_path: Path) -> None:
    half = FLOATS.clip(0, 1).astype(np.float16)
    ds = _load(tmp_path / "a", _tiff(half), ".tif")
    assert torch.equal(ds.inputs[0], _as_loaded(_float_rgb(half)))
    rgb = np.stack([FLOATS, FLOATS[::-1], FLOATS.T], axis=-1).clip(0, 1).astype(np.float32)
    ds = _load(tmp_path / "b", _tiff(rgb, photometric="rgb"), ".tif")
    assert torch.equal(ds.inputs[0], _as_loaded(_float_rgb(rgb)))


# ---------------------------------------------------------------- refused, by name


def _bad_float(value: float) -> bytes:
    arr = np.full((SIDE, SIDE), 0.5, np.float32)
    arr[3, 4] = value
    return _tiff(arr)


@pytest.mark.parametrize(
    ("data", "ext", "match"),
    [
        pytest.param(_bad_float(np.nan), ".tif", "NaN or infinite float32", id="nan"),
        pytest.param(_bad_float(np.inf), ".tif", "NaN or infinite float32", id="inf"),
        pytest.param(
            _bad_float(1.5), ".tif", r"float32 pixels in \[0\.5, 1\.5\]; .*rescale", id="over-1"
        ),
        pytest.param(
            _bad_float(-0.2), ".tif", r"pixels in \[-0\.2, 0\.5\]; .*rescale", id="negative"
        ),
        pytest.param(
            _pil(Image.fromarray(np.full((SIDE, SIDE), -5, np.int32)), "TIFF"),
            ".tif",
            r"int32 pixels in \[-5, -5\], which geofl cannot map",
            id="I-negative",
        ),
        pytest.param(
            _tiff(np.full((SIDE, SIDE), 70000, np.uint32)),
            ".tif",
            r"uint32 pixels in \[70000, 70000\]",
            id="uint32-over-16bit",
        ),
        pytest.param(
            _tiff(np.full((SIDE, SIDE), 0.5 + 1j, np.complex64)),
            ".tif",
            "pixel type complex64, which geofl cannot map",
            id="complex",
        ),
        pytest.param(
            _tiff(_gray16(), photometric="miniswhite"),
            ".tif",
            "photometric MINISWHITE and 1 sample",
            id="miniswhite-16",
        ),
        pytest.param(
            _tiff(
                np.zeros((SIDE, SIDE, 5), np.uint16),
                photometric="minisblack",
                planarconfig="contig",
            ),
            ".tif",
            "photometric MINISBLACK and 5 sample",
            id="5-band-uint16",
        ),
        pytest.param(
            _pil(Image.new("LAB", (SIDE, SIDE), (50, 0, 0)), "TIFF"),
            ".tif",
            "colour mode LAB, which geofl does not convert; save it as RGB",
            id="LAB",
        ),
    ],
)
def test_refused_with_file_named(tmp_path: Path, data: bytes, ext: str, match: str) -> None:
    with pytest.raises(DataError, match=match) as info:
        _load(tmp_path, data, ext)
    msg = str(info.value)
    assert str(tmp_path / "src" / "agricultural" / f"img{ext}") in msg
    assert "\n" not in msg
    assert "replace or remove it" in msg
    assert not list((tmp_path / "cache").glob("*.npz"))


def test_refused_inside_zip_names_member(tmp_path: Path) -> None:
    zpath = tmp_path / "UCMerced_LandUse.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("UCMerced_LandUse/Images/forest/forest07.tif", _bad_float(np.nan))
    with pytest.raises(DataError, match=r"forest/forest07\.tif in .*UCMerced_LandUse\.zip has"):
        DATASETS.build("ucmerced", {"root": zpath, "size": SIDE}, cache_dir=tmp_path / "c")


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        (np.float32, 0.1),
        (np.float64, np.nan),
        (np.int16, -3),
        (np.uint32, 70000),
        (np.complex64, 1),
    ],
)
def test_eurosat_ms_non_uint16_refused_with_convention(
    tmp_path: Path, dtype: type, value: float
) -> None:
    """EuroSAT MS keeps its uint16 / 10000 convention; values it cannot hold are refused."""
    path = tmp_path / "src" / "Forest" / "Forest_1.tif"
    path.parent.mkdir(parents=True)
    arr = np.full((64, 64, 13), value, dtype)
    tifffile.imwrite(path, arr, photometric="minisblack", planarconfig="contig")
    with pytest.raises(DataError, match=r"Forest_1\.tif has pixel type .*reflectance x 10000"):
        DATASETS.build("eurosat_ms", {"root": tmp_path / "src"}, cache_dir=tmp_path / "c")
