"""The ``geofl`` command line: run experiments, write reports, inspect presets and data.

Bad input (config fields, paths, datasets) ends with one line on stderr naming the field
or value and exit code 2; nothing half-written is left behind.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from geofl.errors import ConfigError, GeoflError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Federated learning on geospatial and remote-sensing data.",
)
data_app = typer.Typer(no_args_is_help=True, help="Inspect datasets and client partitions.")
app.add_typer(data_app, name="data")

console = Console(stderr=True)

SourceArg = Annotated[str, typer.Argument(help="Preset name (see `geofl presets`) or YAML file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: path.to.field=value (repeatable)."),
]


def _fail(message: str) -> typer.Exit:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def _parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError("--seeds", f"{text!r} must be comma-separated integers") from None


@app.command()
def run(
    source: SourceArg,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated seeds, e.g. 1,42,2024.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default runs/NAME-TIME).")
    ] = None,
    set_: SetOpt = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run in --out.")] = False,
    report: Annotated[bool, typer.Option(help="Write the HTML report at the end.")] = True,
    progress: Annotated[bool, typer.Option(help="Show the progress display.")] = True,
) -> None:
    """Run an experiment (every method × seed) and write its run directory and report."""
    from geofl.cli_progress import ProgressSubscriber, make_progress
    from geofl.config.load import load_config
    from geofl.engine.experiment import run_experiment
    from geofl.events import LogSubscriber, Subscriber

    try:
        cfg = load_config(source, set_ or [], _parse_seeds(seeds))
        if out is None:
            if resume:
                raise ConfigError("--out", "--resume needs the run directory as --out")
            out = Path("runs") / f"{cfg.name}-{datetime.now():%Y%m%d-%H%M%S}"
        subs: list[Subscriber] = [LogSubscriber()]
        if progress:
            bar = make_progress()
            subs.append(ProgressSubscriber(bar))
            with bar:
                run_dir = run_experiment(cfg, out, resume=resume, subscribers=subs)
        else:
            run_dir = run_experiment(cfg, out, resume=resume, subscribers=subs)
        if report:
            from geofl.report import write_report

            index = write_report(run_dir)
            console.print(f"report: {index}")
        _print_summary(run_dir)
    except GeoflError as err:
        raise _fail(str(err)) from None


def _print_summary(run_dir: Path) -> None:
    import json

    summary = json.loads((run_dir / "summary.json").read_text())
    table = Table(title=f"{summary.get('name', run_dir.name)} — final test accuracy (%)")
    table.add_column("method")
    table.add_column("mean ± std (seeds)")
    table.add_column("best-val round test acc")
    for name, m in summary["methods"].items():
        fa = m.get("final_test_accuracy") or {}
        bv = m.get("best_val_test_accuracy") or {}
        if not fa.get("n"):
            table.add_row(name, "incomplete", "")
            continue
        table.add_row(
            name,
            f"{100 * fa['mean']:.2f} ± {100 * fa['std']:.2f} (n={fa['n']})",
            f"{100 * bv['mean']:.2f} ± {100 * bv['std']:.2f}",
        )
    Console().print(table)
    print(f"run directory: {run_dir}")


@app.command("report")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `geofl run`.")],
) -> None:
    """Write RUN_DIR/report/index.html with plots and the results table."""
    from geofl.report import write_report

    try:
        if not (run_dir / "run.json").exists():
            raise ConfigError("RUN_DIR", f"{run_dir} is not a run directory (no run.json)")
        print(write_report(run_dir))
    except GeoflError as err:
        raise _fail(str(err)) from None


@app.command()
def presets() -> None:
    """List the presets shipped with geofl."""
    from geofl.config.load import list_presets

    table = Table(title="geofl presets")
    table.add_column("name")
    table.add_column("description")
    for name, desc in list_presets().items():
        table.add_row(name, desc)
    Console().print(table)


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
    from geofl.config.load import load_config
    from geofl.data.describe import describe

    try:
        cfg = load_config(source, set_ or [])
        describe(cfg, seed if seed is not None else cfg.seeds[0], Console(), plot)
    except GeoflError as err:
        raise _fail(str(err)) from None


from geofl.cli_ledger import ledger_app  # noqa: E402  (after _fail, which it reuses)

app.add_typer(ledger_app, name="ledger")


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    logging.basicConfig(
        level=os.environ.get("GEOFL_LOG", "WARNING").upper(),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    app()


if __name__ == "__main__":
    main()
