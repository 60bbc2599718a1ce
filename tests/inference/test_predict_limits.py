"""``geofl predict`` refuses what it cannot read safely, on one line, exit code 2.

Oversize image headers are refused before any pixel is allocated, files that are not
regular files (``/dev/zero``, a FIFO) before they are opened for reading, and a folder given
as ``--out`` before any file is decoded. Each CLI case passes one input, so the whole answer
is one ``error:`` line.
"""

from __future__ import annotations

import os
import stat
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from PIL import Image
from tests.inference.conftest import TrainedRun
from tests.inference.hostile_files import (
    call_with_fifo_timeout,
    header_only_png,
    header_only_tiff,
    memory_cap,
)
from typer.testing import CliRunner, Result

import geofl
from geofl.cli import app
from geofl.inference.predict import DEFAULT_MAX_PIXELS, decode_image

runner = CliRunner()


def _one_error_line(result: Result) -> str:
    """The single ``error:`` line of a refused call (exit code 2, no traceback)."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def _predict(run: TrainedRun, *args: str) -> Result:
    return runner.invoke(app, ["predict", str(run.run_dir), *args])


def _ms_tiff(run: TrainedRun, path: Path) -> Path:
    """A valid 13-band uint16 file for the multispectral run."""
    dn = np.rint(run.raw_test.inputs[0].numpy().astype(np.float64) * 10000).astype(np.uint16)
    tifffile.imwrite(path, dn.transpose(1, 2, 0), photometric="minisblack", planarconfig="contig")
    return path


# ------------------------------------------------------------------ oversize headers


def test_multispectral_bomb_header_is_refused_before_allocating(
    ms_run: TrainedRun, tmp_path: Path
) -> None:
    bomb = tmp_path / "bomb.tif"
    bomb.write_bytes(header_only_tiff(100000, 100000))
    out = tmp_path / "p.csv"
    with memory_cap():
        result = _predict(ms_run, str(bomb), "--out", str(out))
    line = _one_error_line(result)
    assert str(bomb) in line and "100000 x 100000 pixels" in line, line
    assert f"more than the {DEFAULT_MAX_PIXELS} allowed" in line and "--max-pixels" in line
    assert not out.exists() and not list(tmp_path.glob(".p.csv*"))


@pytest.mark.parametrize(
    ("bits", "sample_format", "side"),
    [
        pytest.param(64, 3, 100000, id="float64-tifffile-path"),  # Pillow cannot open it
        pytest.param(16, 1, 11000, id="uint16-under-pillow-bomb-limit"),  # Pillow would decode
    ],
)
def test_rgb_bomb_headers_are_refused_before_allocating(
    rgb_run: TrainedRun, tmp_path: Path, bits: int, sample_format: int, side: int
) -> None:
    bomb = tmp_path / "bomb.tif"
    bomb.write_bytes(header_only_tiff(side, side, bits=bits, sample_format=sample_format))
    with memory_cap():
        result = _predict(rgb_run, str(bomb), "--out", str(tmp_path / "p.csv"))
    line = _one_error_line(result)
    assert f"{side} x {side} pixels" in line and "--max-pixels" in line, line


def test_png_over_the_cap_is_refused_without_pillow_noise(
    rgb_run: TrainedRun, tmp_path: Path
) -> None:
    """A real PNG over --max-pixels: refused from its header, no DecompressionBombWarning."""
    png = tmp_path / "wide.png"
    Image.new("RGB", (300, 200)).save(png)
    result = _predict(rgb_run, str(png), "--max-pixels", "59999", "--out", str(tmp_path / "p"))
    line = _one_error_line(result)
    assert "300 x 200 pixels" in line and "more than the 59999 allowed" in line, line
    ok = _predict(rgb_run, str(png), "--max-pixels", "60000", "--out", str(tmp_path / "p.csv"))
    assert ok.exit_code == 0, ok.output


def test_pillow_bomb_warning_does_not_add_lines(rgb_run: TrainedRun, tmp_path: Path) -> None:
    """A PNG header of 100 M pixels: Pillow warns when it opens it (over its 89 M limit);
    geofl refuses it on its own line and the warning is silenced."""
    png = tmp_path / "huge.png"
    png.write_bytes(header_only_png(10000, 10000))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _predict(rgb_run, str(png), "--out", str(tmp_path / "p.csv"))
    line = _one_error_line(result)
    assert "10000 x 10000 pixels" in line, line
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]


def test_help_states_the_default_limit() -> None:
    result = runner.invoke(app, ["predict", "--help"], env={"COLUMNS": "200"})
    assert str(DEFAULT_MAX_PIXELS) in result.output and "--max-pixels" in result.output


def test_max_pixels_counts_height_times_width(ms_run: TrainedRun, tmp_path: Path) -> None:
    """The cap is on pixels per band; the bytes allowed follow from it (64 per pixel)."""
    model = geofl.load_model(ms_run.run_dir)
    tif = _ms_tiff(ms_run, tmp_path / "x.tif")  # 16 x 16 x 13 uint16
    assert decode_image(tif, model, max_pixels=256).shape == (13, 16, 16)
    with pytest.raises(geofl.errors.DataError, match=r"x\.tif is 16 x 16 pixels, more than"):
        decode_image(tif, model, max_pixels=255)
    deep = tmp_path / "deep.tif"  # 2 x 2 pixels of 1000 bands: 8000 bytes > 64 * 4
    deep.write_bytes(header_only_tiff(2, 2, samples=1000))  # the file itself is small
    with pytest.raises(geofl.errors.DataError, match=r"decodes to 8000 bytes, more than the 256"):
        decode_image(deep, model, max_pixels=4)


# ------------------------------------------------------------------ non-regular files


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_is_refused_without_reading(ms_run: TrainedRun, tmp_path: Path) -> None:
    with memory_cap():
        result = _predict(ms_run, "/dev/zero", "--out", str(tmp_path / "p.csv"))
    line = _one_error_line(result)
    assert "/dev/zero is not a regular file (a character device)" in line, line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_fifo_is_refused_without_opening(ms_run: TrainedRun, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.tif"
    os.mkfifo(fifo)
    result = call_with_fifo_timeout(
        fifo, lambda: _predict(ms_run, str(fifo), "--out", str(tmp_path / "p.csv"))
    )
    line = _one_error_line(result)
    assert f"{fifo} is not a regular file (a FIFO)" in line, line


def test_non_regular_files_among_good_ones_are_skipped(ms_run: TrainedRun, tmp_path: Path) -> None:
    good = _ms_tiff(ms_run, tmp_path / "good.tif")
    out = tmp_path / "p.csv"
    result = _predict(ms_run, str(good), str(tmp_path), "--out", str(out))  # a folder: searched
    assert result.exit_code == 0, result.output
    if sys.platform.startswith("linux"):
        result = _predict(ms_run, str(good), "/dev/zero", "--out", str(out))
        assert result.exit_code == 0, result.output
        assert "warning: skipped /dev/zero is not a regular file" in result.output
        assert "wrote 1 prediction(s)" in result.output


# ------------------------------------------------------------------ --out


def test_out_that_is_a_folder_is_refused_before_decoding(
    ms_run: TrainedRun, tmp_path: Path
) -> None:
    good = _ms_tiff(ms_run, tmp_path / "good.tif")
    folder = tmp_path / "preds"
    folder.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = _predict(ms_run, str(good), "--out", str(folder))
    line = _one_error_line(result)
    assert f"{folder} is a folder, not a file" in line and ".tmp" not in line, line
    assert str(folder / "predictions.csv") in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not list(folder.iterdir())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_out_that_is_not_a_regular_file_is_kept(ms_run: TrainedRun, tmp_path: Path) -> None:
    """``os.replace`` would put the CSV in place of a FIFO or a device node (as root, of
    ``/dev/null`` itself); such an ``out`` is refused and left as it is."""
    good = _ms_tiff(ms_run, tmp_path / "good.tif")
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    line = _one_error_line(_predict(ms_run, str(good), "--out", str(fifo)))
    assert f"{fifo} is not a regular file" in line, line
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_out_that_cannot_be_written_is_one_line(ms_run: TrainedRun, tmp_path: Path) -> None:
    good = _ms_tiff(ms_run, tmp_path / "good.tif")
    blocker = tmp_path / "file"
    blocker.write_text("a file where --out wants a folder")
    result = _predict(ms_run, str(good), "--out", str(blocker / "p.csv"))
    line = _one_error_line(result)
    assert f"cannot write {blocker / 'p.csv'}" in line, line
    assert blocker.read_text() == "a file where --out wants a folder"


def test_single_bad_file_is_one_error_line(ms_run: TrainedRun, tmp_path: Path) -> None:
    """One input that fails: its reason is the error line (no separate warning)."""
    text = tmp_path / "notes.txt"
    text.write_text("not an image\n")
    line = _one_error_line(_predict(ms_run, str(text), "--out", str(tmp_path / "p.csv")))
    assert f"{text} is not a TIFF file" in line and "p.csv was not written" in line, line


def test_decode_image_keeps_exact_values(ms_run: TrainedRun, tmp_path: Path) -> None:
    """The bounded read gives the same input as before (bit for bit)."""
    model = geofl.load_model(ms_run.run_dir)
    tif = _ms_tiff(ms_run, tmp_path / "x.tif")
    assert torch.equal(decode_image(tif, model), ms_run.raw_test.inputs[0])
