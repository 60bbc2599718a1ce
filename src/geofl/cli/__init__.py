"""The ``geofl`` command line: run experiments, write reports, inspect presets, data, ledgers.

Bad input (config fields, paths, datasets) ends with one line on stderr naming the field
or value and exit code 2; nothing half-written is left behind.

Modules (imports point down only; every command module uses :mod:`geofl.cli.common`):

* :mod:`geofl.cli.run` — ``run``, ``report``, ``presets``;
* :mod:`geofl.cli.merge` — ``merge`` (run directories of one experiment into one);
* :mod:`geofl.cli.config` — ``config show|validate`` (the resolved config, before a run);
* :mod:`geofl.cli.data` — ``data describe`` (tables and heatmaps in
  :mod:`geofl.cli.describe`);
* :mod:`geofl.cli.ledger` — ``ledger show|verify|committee|permissions|reputation|build``;
* :mod:`geofl.cli.predict` — ``predict`` (a run's model on image files, CSV);
* :mod:`geofl.cli.deploy` — ``deploy app|loopback`` (Flower deployment);
* :mod:`geofl.cli.progress` — the progress display of ``geofl run`` (a run subscriber).

This package assembles them into :data:`app`; heavy imports (engine, report, governance)
happen inside the commands, so ``geofl --help`` stays fast.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from geofl import __version__
from geofl.cli import config, data, deploy, epsilon, ledger, merge, oda_scenes, predict, run
from geofl.cli.common import error_line

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Federated learning on geospatial and remote-sensing data.",
)


def _print_version(value: bool) -> None:
    """``--version``: print ``geofl <version>`` and exit 0."""
    if value:
        print(f"geofl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the geofl version and exit.",
        ),
    ] = False,
) -> None:
    """Federated learning on geospatial and remote-sensing data."""


app.add_typer(data.data_app, name="data")
app.add_typer(config.config_app, name="config")
app.command("run")(run.run_cmd)
app.command("report")(run.report_cmd)
app.command("merge")(merge.merge_cmd)
app.command("presets")(run.presets_cmd)
app.command("predict")(predict.predict_cmd)
app.command("epsilon")(epsilon.epsilon_cmd)
app.command("oda-scenes")(oda_scenes.oda_scenes_cmd)
app.add_typer(ledger.ledger_app, name="ledger")
app.add_typer(deploy.deploy_app, name="deploy")


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    logging.basicConfig(
        level=os.environ.get("GEOFL_LOG", "WARNING").upper(),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        app()
    except OSError as err:  # a path the user gave that cannot be written or read
        where = f"{err.filename}: " if err.filename else ""
        error_line(f"{where}{err.strerror or err}")
        sys.exit(2)
