"""``geofl data …``: inspect datasets and client partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from geofl.cli.common import SetOpt, SourceArg, fail
from geofl.errors import GeoflError

__all__ = ["data_app"]

data_app = typer.Typer(no_args_is_help=True, help="Inspect datasets and client partitions.")


@data_app.command("describe")
def data_describe(
    source: SourceArg,
    set_: SetOpt = None,
    seed: Annotated[int | None, typer.Option(help="Seed (default: the config's first).")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Write one clients × classes heatmap PNG per method here.")
    ] = None,
) -> None:
    """Describe the config's dataset, global split and each method's client partition."""
    from geofl.cli.describe import describe
    from geofl.config.load import load_config

    try:
        cfg = load_config(source, set_ or [])
        describe(cfg, seed if seed is not None else cfg.seeds[0], Console(), plot)
    except GeoflError as err:
        raise fail(str(err)) from None
