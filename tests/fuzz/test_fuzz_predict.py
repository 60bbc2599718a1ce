"""``geofl predict`` on corrupted and truncated image files: a prediction or one line, exit 2.

Valid files of both tiny trained runs (multispectral TIFFs; PNG, JPEG and TIFF for the RGB
run) are mutated by hypothesis: truncated, bytes overwritten, header words replaced by
extreme values (widths, counts, offsets), bytes inserted or dropped. Every mutant must give
either a model input of the trained shape or a one-line :class:`~geofl.errors.DataError`
naming the file; through the CLI, either one ``wrote 1 prediction(s)`` line (exit 0) or one
``error:`` line (exit 2), never a traceback. A decoder that trusts a lying header would
allocate its claim; the process's address space is capped while the mutants run, and a
``MemoryError`` reaching the message fails the test.
"""

from __future__ import annotations

import io
import logging
import struct
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from PIL import Image
from tests.inference import conftest as inference_runs
from tests.inference.conftest import TrainedRun
from tests.inference.hostile_files import memory_cap
from typer.testing import CliRunner

import geofl
from geofl.cli import app
from geofl.errors import DataError
from geofl.inference.predict import decode_image

# The tiny trained runs of the inference tests (session-scoped, trained on first use).
ms_run = inference_runs.ms_run
rgb_run = inference_runs.rgb_run

runner = CliRunner()

# Pillow warns about the corrupt tags it skips; the decode-level tests judge the outcome only
# (the CLI test checks that predict keeps such warnings off the terminal).
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:PIL.TiffImagePlugin")

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

#: Header words worth writing over a width, a count or an offset.
EXTREMES = (0, 1, 2, 3, 255, 256, 4095, 4097, 65535, 65536, 100000, 2**31 - 1, 2**32 - 1)


def _tiff(arr: np.ndarray, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, arr, **kwargs)
    return buf.getvalue()


def _pil(arr: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt)
    return buf.getvalue()


def _ms_seeds() -> list[bytes]:
    rng = np.random.default_rng(0)
    cube = rng.integers(0, 3000, size=(16, 16, 13)).astype(np.uint16)
    return [
        _tiff(cube, photometric="minisblack", planarconfig="contig"),
        _tiff(cube.transpose(2, 0, 1), photometric="minisblack", planarconfig="separate"),
        _tiff(cube.transpose(2, 0, 1), photometric="minisblack"),  # 13 pages
        _tiff(cube[..., :4], photometric="minisblack", planarconfig="contig", compression="zlib"),
    ]


def _rgb_seeds() -> list[bytes]:
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 255, size=(16, 16, 3)).astype(np.uint8)
    return [
        _pil(rgb, "PNG"),
        _pil(rgb, "JPEG"),
        _pil(rgb, "TIFF"),
        _tiff(rgb.astype(np.uint16) * 257, photometric="rgb"),
        _tiff(rgb[..., 0].astype(np.float32) / 255),
    ]


MS_SEEDS, RGB_SEEDS = _ms_seeds(), _rgb_seeds()


@st.composite
def mutants(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed file with one to three mutations."""
    data = bytearray(seeds[draw(st.integers(0, len(seeds) - 1))])
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "overwrite", "word", "insert", "drop"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "truncate":
            del data[at:]
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at : at + len(chunk)] = chunk
        elif kind == "word":
            value = draw(st.sampled_from(EXTREMES))
            fmt = draw(st.sampled_from(["<I", ">I", "<H", ">H"]))
            data[at : at + struct.calcsize(fmt)] = struct.pack(
                fmt, value % 2 ** (8 * struct.calcsize(fmt))
            )
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[at : at + draw(st.integers(1, 64))]
    return bytes(data)


@pytest.fixture
def capped() -> Iterator[None]:
    """The address-space cap for the whole test (see :func:`memory_cap`)."""
    with memory_cap():
        yield


def _check_decode(
    model: geofl.inference.GeoflModel, path: Path, shapes: set[tuple[int, ...]]
) -> None:
    try:
        x = decode_image(path, model)
    except DataError as err:
        msg = str(err)
        assert "\n" not in msg and str(path) in msg, msg
        assert "MemoryError" not in msg, msg  # a header was trusted for an allocation
        return
    assert tuple(x.shape) in shapes and x.dtype == torch.float32


def _fuzz_decode(
    run: TrainedRun, tmp_path: Path, seeds: list[bytes], ext: str
) -> Callable[[bytes], None]:
    model = geofl.load_model(run.run_dir)
    size = model.spec.input.patch_size[0]
    shapes = {(len(model.input_bands), size, size), (len(model.bands), size, size)}
    path = tmp_path / f"mutant{ext}"

    def check(data: bytes) -> None:
        note(f"{len(data)} bytes: {data[:64]!r}")
        path.write_bytes(data)
        _check_decode(model, path, shapes)

    return check


@settings(FUZZ)
@given(data=mutants(MS_SEEDS))
def test_ms_mutants_decode_or_refuse_on_one_line(
    ms_run: TrainedRun, tmp_path: Path, capped: None, data: bytes
) -> None:
    _fuzz_decode(ms_run, tmp_path, MS_SEEDS, ".tif")(data)


@settings(FUZZ)
@given(data=mutants(RGB_SEEDS))
def test_rgb_mutants_decode_or_refuse_on_one_line(
    rgb_run: TrainedRun, tmp_path: Path, capped: None, data: bytes
) -> None:
    _fuzz_decode(rgb_run, tmp_path, RGB_SEEDS, ".img")(data)


@settings(FUZZ, max_examples=40)
@given(ms=st.booleans(), data=st.data())
def test_cli_mutants_give_one_line(
    ms_run: TrainedRun,
    rgb_run: TrainedRun,
    tmp_path: Path,
    capped: None,
    caplog: pytest.LogCaptureFixture,
    ms: bool,
    data: st.DataObject,
) -> None:
    """One line, and nothing from the decoders: their log records and warnings (which
    pytest would otherwise swallow) are what a real terminal shows around that line."""
    run, seeds = (ms_run, MS_SEEDS) if ms else (rgb_run, RGB_SEEDS)
    mutant = data.draw(mutants(seeds))
    path, out = tmp_path / "mutant.tif", tmp_path / "p.csv"
    path.write_bytes(mutant)
    out.unlink(missing_ok=True)
    caplog.clear()
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runner.invoke(app, ["predict", str(run.run_dir), str(path), "--out", str(out)])
    assert result.exit_code in (0, 2), (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    if result.exit_code == 0:
        assert lines[0].startswith("wrote 1 prediction(s)") and out.exists(), result.output
    else:
        assert lines[0].startswith("error: ") and str(path) in lines[0], result.output
        assert "MemoryError" not in lines[0] and not out.exists(), result.output
    decoders = ("PIL", "tifffile")
    noise = [r for r in caplog.records if r.name.split(".")[0] in decoders and r.levelno >= 30]
    assert not noise, [r.getMessage() for r in noise]
    assert not [w for w in caught if w.filename.find("PIL") >= 0], [str(w.message) for w in caught]
