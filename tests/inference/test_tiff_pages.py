"""One rule for TIFF pages, in training and in ``geofl predict``.

A TIFF's image is its first series (tifffile): a single page whose samples are its bands, or
a stack of same-sized pages, one band each. ``uint16_bands`` (EuroSAT MS, synthetic) reads
both layouts as bands; ``rgb8`` (UC Merced, EuroSAT RGB) needs one page of grey or RGB
(alpha optional) and refuses a stack, which it used to train on as its first, grey page.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from tests.inference.conftest import TrainedRun
from typer.testing import CliRunner

import geofl
from geofl.cli import app
from geofl.data.base import DATASETS
from geofl.data.readers.eurosat import decode_ms
from geofl.data.readers.formats import FILE_FORMATS, tiff_band_count
from geofl.data.readers.imagefolder import ImageFormatError, decode_rgb
from geofl.errors import DataError
from geofl.inference.predict import decode_image

runner = CliRunner()


def _pages(count: int, side: int = 16, dtype: type = np.uint16) -> bytes:
    """``count`` grey pages of one size (tifffile writes a stack: one page per band)."""
    rng = np.random.default_rng(count)
    buf = io.BytesIO()
    arr = rng.integers(0, 200, size=(count, side, side)).astype(dtype)
    tifffile.imwrite(buf, arr, photometric="minisblack")
    return buf.getvalue()


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("count", [2, 3, 13])
def test_rgb_decoder_refuses_a_page_stack(count: int, dtype: type) -> None:
    data = _pages(count, dtype=dtype)
    assert tiff_band_count(data) == count
    with pytest.raises(ImageFormatError, match=f"has {count} bands in {count} TIFF pages"):
        decode_rgb(data, 16)
    with pytest.raises(ImageFormatError, match=f"has {count} bands in {count} TIFF pages"):
        FILE_FORMATS["rgb8"].decode(data, 16, [3])


def test_13_page_tiff_refused_by_rgb_training_and_predict(
    rgb_run: TrainedRun, tmp_path: Path
) -> None:
    root = tmp_path / "src"
    (root / "forest").mkdir(parents=True)
    tif = root / "forest" / "pages.tif"
    tif.write_bytes(_pages(13))
    with pytest.raises(DataError, match=r"pages\.tif has 13 bands in 13 TIFF pages") as info:
        DATASETS.build("ucmerced", {"root": root, "size": 16}, cache_dir=tmp_path / "cache")
    assert "\n" not in str(info.value)

    out = tmp_path / "p.csv"
    result = runner.invoke(app, ["predict", str(rgb_run.run_dir), str(tif), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{tif} has 13 bands in 13 TIFF pages" in lines[0], result.output
    assert not out.exists()


def test_single_page_rgb_tiffs_still_decode() -> None:
    rgb = np.random.default_rng(0).integers(0, 255, (16, 16, 3)).astype(np.uint8)
    for arr, planarconfig in ((rgb, "contig"), (rgb.transpose(2, 0, 1), "separate")):
        buf = io.BytesIO()
        tifffile.imwrite(buf, arr, photometric="rgb", planarconfig=planarconfig)
        assert np.array_equal(decode_rgb(buf.getvalue(), 16), rgb.transpose(2, 0, 1))


def test_13_page_tiff_is_13_bands_in_ms_training_and_predict(
    ms_run: TrainedRun, tmp_path: Path
) -> None:
    """The multispectral loaders and predict read a page stack as bands, the same way."""
    raw = ms_run.raw_test.inputs[0]
    dn = np.rint(raw.numpy().astype(np.float64) * 10000).astype(np.uint16)
    stack, contig = tmp_path / "stack.tif", tmp_path / "contig.tif"
    tifffile.imwrite(stack, dn, photometric="minisblack")  # 13 pages
    tifffile.imwrite(contig, dn.transpose(1, 2, 0), photometric="minisblack", planarconfig="contig")
    assert len(tifffile.TiffFile(stack).pages) == 13
    trained = decode_ms(stack.read_bytes(), 16)  # eurosat_ms's training decoder
    assert np.array_equal(trained, dn) and np.array_equal(decode_ms(contig.read_bytes(), 16), dn)
    model = geofl.load_model(ms_run.run_dir)
    assert torch.equal(decode_image(stack, model), raw)
    assert torch.equal(decode_image(contig, model), raw)
