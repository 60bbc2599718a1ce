"""``geofl run``, ``geofl report`` and ``geofl presets``: run experiments and report on them."""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from geofl.cli.common import (
    RunDirArg,
    SeedsOpt,
    SetOpt,
    SourceArg,
    console,
    fail,
    parse_seeds,
)
from geofl.errors import ConfigError, GeoflError, RunStoppedError

if TYPE_CHECKING:
    from geofl.config.schema import ExperimentConfig
    from geofl.engine.records.provenance import Provenance

__all__ = ["presets_cmd", "report_cmd", "run_cmd"]


def run_cmd(
    source: SourceArg,
    seeds: SeedsOpt = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default runs/NAME-TIME).")
    ] = None,
    set_: SetOpt = None,
    resume: Annotated[
        bool,
        typer.Option(
            help="Continue an interrupted run in --out (refused when its run.json is gone, "
            "its config.yaml or an input file such as a TLE file changed, or a seed lost "
            "its checkpoint.pt after round 1)."
        ),
    ] = False,
    rebuild_log: Annotated[
        bool,
        typer.Option(
            help="With --resume: rewrite a damaged rounds.jsonl from the checkpoint instead "
            "of refusing."
        ),
    ] = False,
    report: Annotated[bool, typer.Option(help="Write the HTML report at the end.")] = True,
    progress: Annotated[bool, typer.Option(help="Show the progress display.")] = True,
    track: Annotated[
        list[str] | None,
        typer.Option(
            help="Export to an experiment tracker: mlflow or tensorboard (repeatable; same as "
            "--set tracking.NAME=true; needs the extra geofl[tracking])."
        ),
    ] = None,
) -> None:
    """Run an experiment (every method × seed) and write its run directory and report."""
    from geofl.config.load import load_config
    from geofl.engine.records.provenance import Provenance

    try:
        seed_list = parse_seeds(seeds)
        cfg = load_config(source, [*(set_ or []), *_track_overrides(track)], seed_list)
        out = out if out is not None else _default_out(cfg.name, resume)
        provenance = Provenance.from_cli(set_, seed_list)
        run_dir = _run(cfg, out, resume, rebuild_log, progress, provenance)
        _finish(run_dir, report)
    except RunStoppedError as err:
        raise _stopped(err, out) from None
    except GeoflError as err:
        raise fail(str(err)) from None
    except OSError as err:  # disk full, permissions: nothing half-written (atomic writes)
        raise _os_failure(err) from None


def _default_out(name: str, resume: bool) -> Path:
    """``runs/NAME-YYYYmmdd-HHMMSS`` for a new run; a resumed run must name its ``--out``."""
    if resume:
        raise ConfigError("--out", "--resume needs the run directory as --out")
    return Path("runs") / f"{name}-{datetime.now():%Y%m%d-%H%M%S}"


def _finish(run_dir: Path, report: bool) -> None:
    """Write the HTML report (when asked) and log it to the trackers; print the summary."""
    if report:
        from geofl.report import write_report

        index = write_report(run_dir)
        console.print(f"report: {escape(str(index))}")
        _log_report(run_dir)
    _print_summary(run_dir)


def _stopped(err: RunStoppedError, out: Path | None) -> typer.Exit:
    """Print how to resume a run stopped by a signal; return the ``128 + signum`` exit."""
    where = out if out is not None else "RUN_DIR"
    console.print(
        escape(f"{err}; resume with: geofl run {where}/config.yaml --out {where} --resume"),
        highlight=False,
        soft_wrap=True,
    )
    return typer.Exit(code=128 + err.signum)


def _os_failure(err: OSError) -> typer.Exit:
    """:func:`fail` with the file and cause of a disk or permission error."""
    where = f"{err.filename}: " if err.filename else ""
    return fail(
        f"{where}{err.strerror or err}; fix it (free space, permissions) and rerun with --resume"
    )


#: Trackers ``--track`` accepts (fields of the config's ``tracking`` section).
TRACKERS = ("mlflow", "tensorboard")


def _track_overrides(track: list[str] | None) -> list[str]:
    """``--track NAME`` as the ``--set tracking.NAME=true`` it stands for."""
    for name in track or []:
        if name not in TRACKERS:
            raise ConfigError("--track", f"unknown tracker {name!r}; use {' or '.join(TRACKERS)}")
    return [f"tracking.{name}=true" for name in track or []]


def _log_report(run_dir: Path) -> None:
    """Add the report to the trackers the run was exported to (none: nothing happens)."""
    from geofl.tracking.state import STATE_FILE

    if (run_dir / STATE_FILE).is_file():
        from geofl.tracking.subscriber import log_report

        for tracker in log_report(run_dir):
            console.print(f"report logged to {tracker}")


def _run(
    cfg: ExperimentConfig,
    out: Path,
    resume: bool,
    rebuild_log: bool,
    progress: bool,
    provenance: Provenance,
) -> Path:
    """Run the experiment under a stop handler, with the progress display when asked."""
    from geofl.cli.progress import ProgressSubscriber, make_progress
    from geofl.engine.experiment import run_experiment
    from geofl.engine.stop import StopRequest
    from geofl.events import LogSubscriber, Subscriber

    subs: list[Subscriber] = [LogSubscriber()]
    with StopRequest().install() as stop, contextlib.ExitStack() as stack:
        if progress:
            bar = make_progress()
            subs.append(ProgressSubscriber(bar))
            stack.enter_context(bar)
        return run_experiment(
            cfg,
            out,
            resume=resume,
            subscribers=subs,
            stop=stop,
            rebuild_log=rebuild_log,
            provenance=provenance,
        )


def _print_summary(run_dir: Path) -> None:
    import json

    from geofl.records import TaskInfo
    from geofl.report.summary import metric_scale, metric_unit

    summary = json.loads((run_dir / "summary.json").read_text())
    info = json.loads((run_dir / "run.json").read_text())
    pm = TaskInfo.from_json(info.get("task") if isinstance(info, dict) else None).primary_metric
    scale, digits = metric_scale(pm), 2 if metric_scale(pm) == 100.0 else 4
    title = f"{summary.get('name', run_dir.name)} — final test {pm}{metric_unit(pm)}"
    table = Table(title=title)
    table.add_column("method")
    table.add_column("mean ± std (seeds)")
    table.add_column("best-val round test " + ("acc" if pm == "accuracy" else pm))
    labels = info.get("labels") if isinstance(info, dict) else None
    labels = labels if isinstance(labels, dict) else {}

    def pm_text(s: dict[str, Any]) -> str:  # one value has no spread
        mean = f"{scale * s['mean']:.{digits}f}"
        return mean if s.get("n") == 1 else f"{mean} ± {scale * s['std']:.{digits}f}"

    for name, m in summary["methods"].items():
        fa = m.get(f"final_test_{pm}") or {}
        bv = m.get(f"best_val_test_{pm}") or {}
        label = str(labels.get(name) or name)
        if not fa.get("n"):
            table.add_row(label, "incomplete", "")
            continue
        table.add_row(label, f"{pm_text(fa)} (n={fa['n']})", pm_text(bv))
    Console().print(table)
    print(f"run directory: {run_dir}")


def report_cmd(run_dir: RunDirArg) -> None:
    """Write RUN_DIR/report/index.html with plots and the results table."""
    from geofl.report import write_report

    try:
        if not (run_dir / "run.json").exists():
            raise ConfigError("RUN_DIR", f"{run_dir} is not a run directory (no run.json)")
        print(write_report(run_dir))
        _log_report(run_dir)
    except GeoflError as err:
        raise fail(str(err)) from None
    except OSError as err:  # disk full, permissions: nothing half-written (atomic writes)
        raise _os_failure(err) from None


def presets_cmd() -> None:
    """List the presets shipped with geofl."""
    from geofl.config.load import list_presets

    table = Table(title="geofl presets")
    table.add_column("name")
    table.add_column("description")
    for name, desc in list_presets().items():
        table.add_row(name, desc)
    Console().print(table)
