"""``geofl predict``: a run's trained model on image files, predictions written as CSV."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from geofl.cli.common import RunDirArg, console, fail
from geofl.errors import GeoflError
from geofl.registry import printable

__all__ = ["predict_cmd"]


def _warn(line: str) -> None:
    """``warning: LINE`` on stderr, one line, verbatim (a skipped file or a bad path)."""
    console.print(f"[yellow]warning:[/] {escape(printable(line))}", highlight=False, soft_wrap=True)


def _quiet(line: str) -> None:
    """Drop ``line`` (a single file's reason is repeated in the error line)."""


@contextmanager
def _decoders_quiet() -> Iterator[None]:
    """Silence Pillow's and tifffile's own log records and warnings while predicting.

    Every file gets one line from geofl: its prediction, or why it was skipped. The
    decoders' complaints about the same corrupt tags (``ERROR tifffile: ... invalid page
    offset``, Pillow's ``Corrupt EXIF data``, its decompression-bomb warning above 89 M
    pixels, which ``--max-pixels`` checks anyway) would add unrelated lines, two for each
    warning. Levels and filters are restored on exit.
    """
    from PIL import Image

    loggers = [logging.getLogger(name) for name in ("PIL", "tifffile")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
        for logger in loggers:
            logger.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def predict_cmd(
    run_dir: RunDirArg,
    images: Annotated[
        list[Path],
        typer.Argument(help="Image files, or folders searched recursively (png, jpg, tif)."),
    ],
    out: Annotated[Path, typer.Option(help="The CSV to write.")] = Path("predictions.csv"),
    method: Annotated[
        str | None, typer.Option(help="Method (needed when the run has several).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed (needed when it has several).")] = None,
    which: Annotated[
        str, typer.Option(help="best: best-validation model; final: after the last round.")
    ] = "best",
    batch_size: Annotated[int, typer.Option(min=1, help="Images per forward pass.")] = 64,
    max_pixels: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Largest image accepted, in pixels (height x width), checked from the "
            "file's header before decoding (default: 16777216 = 4096 x 4096).",
        ),
    ] = None,
) -> None:
    """Predict IMAGES with a trained model of RUN_DIR and write one CSV row per image.

    Columns: path, prediction, then one column per output (prob:<class> for
    classification). A file that is not an image, has the wrong band count, is larger than
    --max-pixels or is not a regular file (a FIFO, a device) is reported on one line and
    skipped. Exit code 0 when at least one prediction was written, 2 when none.
    """
    from geofl.inference.load import load_model
    from geofl.inference.predict import DEFAULT_MAX_PIXELS, collect_images, predict_to_csv

    if which not in ("best", "final"):
        raise fail(f"--which: must be 'best' or 'final', got {which!r}")
    try:
        model = load_model(run_dir, method, seed, "best" if which == "best" else "final")
        files, problems = collect_images(images)
        for line in problems:
            _warn(line)
        if not files:
            raise fail("no image files to predict; pass image files or folders holding them")
        # One input: its reason is the error line itself (nothing is written without it).
        on_skip = _warn if len(files) > 1 else _quiet
        with _decoders_quiet():
            n = predict_to_csv(
                model,
                files,
                out,
                batch_size=batch_size,
                on_skip=on_skip,
                max_pixels=max_pixels or DEFAULT_MAX_PIXELS,
            )
    except GeoflError as err:
        raise fail(str(err)) from None
    skipped = f"; {len(files) - n} file(s) skipped" if n < len(files) else ""
    console.print(
        f"wrote {n} prediction(s) to {out} ({model.spec.method} seed {model.spec.seed}, "
        f"{which} model of round {model.round}){skipped}",
        highlight=False,
        soft_wrap=True,
    )
