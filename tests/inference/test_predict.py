"""``geofl predict``: image files and folders → a prediction CSV, bad files skipped."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from PIL import Image
from tests.inference.conftest import MS_BANDS, TrainedRun
from typer.testing import CliRunner

import geofl
from geofl.cli import app
from geofl.data.base import SENTINEL2_BANDS
from geofl.inference.predict import collect_images, decode_image
from geofl.models.spec import MODEL_SPEC_FILE
from geofl.rundir import seed_dir

runner = CliRunner()


def _tiff(path: Path, img: np.ndarray, planarconfig: str = "contig") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tifffile.imwrite(path, img, photometric="minisblack", planarconfig=planarconfig)
    return path


def _dn(inputs: torch.Tensor) -> np.ndarray:
    """``[C, H, W]`` reflectance → uint16 digital numbers (exact for the synthetic data)."""
    return np.rint(inputs.numpy().astype(np.float64) * 10000).astype(np.uint16)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("warning:")]


def _expected(model: geofl.inference.GeoflModel, inputs: torch.Tensor) -> list[str]:
    with torch.inference_mode():
        return [model.classes[i] for i in model(inputs).argmax(1).tolist()]


def test_predict_multiband_tiffs_and_folders(ms_run: TrainedRun, tmp_path: Path) -> None:
    raw = ms_run.raw_test.inputs
    imgs = tmp_path / "imgs"
    files = [_tiff(imgs / "a" / f"s{i}.tif", _dn(raw[i]).transpose(1, 2, 0)) for i in range(6)]
    files.append(_tiff(imgs / "b" / "a-sep.TIF", _dn(raw[6]), planarconfig="separate"))
    chosen = [SENTINEL2_BANDS.index(b) for b in MS_BANDS]  # a file of the trained bands only
    files.append(_tiff(imgs / "b" / "b-four.tiff", _dn(raw[7][chosen]).transpose(1, 2, 0)))
    (imgs / "b" / "notes.md").write_text("not collected from a folder")
    (imgs / ".hidden").mkdir()
    _tiff(imgs / ".hidden" / "x.tif", _dn(raw[0]).transpose(1, 2, 0))
    text = tmp_path / "notes.txt"
    text.write_text("not an image\n")
    five = _tiff(tmp_path / "five.tif", _dn(raw[8][:5]).transpose(1, 2, 0))
    out = tmp_path / "preds.csv"

    result = runner.invoke(
        app,
        [
            "predict",
            str(ms_run.run_dir),
            str(imgs),
            str(text),
            str(five),
            "--out",
            str(out),
            "--batch-size",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    warnings = _warnings(result.output)
    assert len(warnings) == 2, result.output
    assert str(text) in warnings[0] and "is not a TIFF file" in warnings[0]
    assert str(five) in warnings[1] and "has 5 bands, expected 4 or 13" in warnings[1]
    assert "wrote 8 prediction(s)" in result.output and "2 file(s) skipped" in result.output

    model = geofl.load_model(ms_run.run_dir)
    for i, f in enumerate(files):  # decoded exactly as the loader gave the run its inputs
        want = raw[i] if i != 7 else raw[7][chosen]
        assert torch.equal(decode_image(f, model), want), f
    rows = _rows(out)
    assert [r["path"] for r in rows] == [str(f) for f in files]
    assert [r["prediction"] for r in rows] == _expected(model, raw[:8])
    assert list(rows[0])[2:] == [f"prob:{c}" for c in model.classes]
    probs = np.array([[float(r[f"prob:{c}"]) for c in model.classes] for r in rows])
    with torch.inference_mode():
        want = torch.softmax(model(raw[:8]), 1).numpy()
    np.testing.assert_allclose(probs, want, rtol=1e-5, atol=1e-7)


def test_predict_rgb_png_tiff_jpeg(rgb_run: TrainedRun, tmp_path: Path) -> None:
    source = Path(rgb_run.cfg.data.params["root"])
    test = rgb_run.raw_test
    pngs = [source / p for p in test.metadata["path"][:3]]
    folder = tmp_path / "folder"
    folder.mkdir()
    for p in pngs:
        shutil.copy(p, folder / f"{p.parent.name}-{p.name}")
    tif = tmp_path / "one.tif"
    Image.open(pngs[0]).save(tif)  # 8-bit RGB TIFF
    jpg = tmp_path / "one.jpg"
    Image.open(pngs[1]).save(jpg, quality=95)
    multi = _tiff(tmp_path / "multi.tif", np.zeros((20, 20, 13), np.uint16))
    out = tmp_path / "preds.csv"

    args = [str(folder), str(tif), str(jpg), str(multi)]
    result = runner.invoke(app, ["predict", str(rgb_run.run_dir), *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    warnings = _warnings(result.output)
    assert len(warnings) == 1 and str(multi) in warnings[0]
    # The training loaders' decoder refuses it, with the same words (one rule for both).
    assert "uint16 TIFF with photometric MINISBLACK and 13 sample(s) per pixel" in warnings[0]

    model = geofl.load_model(rgb_run.run_dir)
    assert model.bands == ("R", "G", "B") and model.spec.input.format == "rgb8"
    rows = _rows(out)
    assert len(rows) == 5
    exact = _expected(model, test.inputs[:3])
    assert [r["prediction"] for r in rows[:3]] == exact  # the training files themselves
    assert rows[3]["prediction"] == exact[0]  # the same pixels as TIFF
    assert torch.equal(decode_image(tif, model), test.inputs[0])
    jpeg_input = decode_image(jpg, model)[None]
    assert rows[4]["prediction"] == _expected(model, jpeg_input)[0]


def test_predict_with_nothing_predictable_exits_2_without_csv(
    ms_run: TrainedRun, tmp_path: Path
) -> None:
    png = tmp_path / "rgb.png"
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(png)
    out = tmp_path / "preds.csv"
    result = runner.invoke(
        app,
        ["predict", str(ms_run.run_dir), str(png), str(tmp_path / "nope.tif"), "--out", str(out)],
    )
    assert result.exit_code == 2, result.output
    assert "nope.tif: no such file or folder" in result.output
    # The one file's reason is the error line (no separate warning for it).
    assert f"error: {png} is not a TIFF file" in result.output, result.output
    assert f"{out} was not written" in result.output and "skipped" not in result.output
    assert not out.exists() and not list(tmp_path.glob(".preds.csv*"))


def test_predict_on_a_run_without_model_json_exits_2_with_one_line(
    ms_run: TrainedRun, tmp_path: Path
) -> None:
    run = tmp_path / "old"
    shutil.copytree(ms_run.run_dir, run)
    (seed_dir(run, "fedavg", 3) / MODEL_SPEC_FILE).unlink()
    tif = _tiff(tmp_path / "x.tif", _dn(ms_run.raw_test.inputs[0]).transpose(1, 2, 0))
    result = runner.invoke(app, ["predict", str(run), str(tif), "--out", str(tmp_path / "p.csv")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "written before geofl recorded" in lines[0], result.output
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--method", "nope"], "no method 'nope'; choose --method from: fedavg"),
        (["--seed", "9"], "no seed '9'; choose --seed from: 3"),
        (["--which", "worst"], "--which: must be 'best' or 'final'"),
    ],
)
def test_predict_bad_choices_exit_2(
    ms_run: TrainedRun, tmp_path: Path, extra: list[str], needle: str
) -> None:
    tif = _tiff(tmp_path / "x.tif", _dn(ms_run.raw_test.inputs[0]).transpose(1, 2, 0))
    result = runner.invoke(app, ["predict", str(ms_run.run_dir), str(tif), *extra])
    assert result.exit_code == 2 and needle in result.output, result.output


def test_collect_images_order_and_problems(tmp_path: Path) -> None:
    (tmp_path / "d" / "z").mkdir(parents=True)
    for name in ("d/b.PNG", "d/a.jpg", "d/z/c.tif", "d/readme.txt", "e.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "empty").mkdir()
    files, problems = collect_images(
        [tmp_path / "d", tmp_path / "e.txt", tmp_path / "d" / "a.jpg", tmp_path / "empty"]
    )
    names = [f.relative_to(tmp_path).as_posix() for f in files]
    assert names == ["d/a.jpg", "d/b.PNG", "d/z/c.tif", "e.txt"]
    assert len(problems) == 1 and "empty: no image files" in problems[0]


def test_decode_errors_are_one_line(rgb_run: TrainedRun, tmp_path: Path) -> None:
    model = geofl.load_model(rgb_run.run_dir)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    with pytest.raises(geofl.errors.DataError) as info:
        decode_image(bad, model)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)
    buf = io.BytesIO()
    Image.fromarray(np.zeros((4, 4), np.float32)).save(buf, format="TIFF")
    (tmp_path / "f.tif").write_bytes(buf.getvalue())
    assert decode_image(tmp_path / "f.tif", model).shape == (3, 16, 16)  # grey float → RGB
