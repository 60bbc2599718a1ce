"""``geofl merge``: run directories of one experiment (other seeds, other methods) → one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geofl.cli.common import fail
from geofl.errors import GeoflError

__all__ = ["merge_cmd"]


def merge_cmd(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Two or more run directories of one experiment.")
    ],
    out: Annotated[Path, typer.Option(help="The merged run directory (must not exist).")],
    report: Annotated[bool, typer.Option(help="Write the HTML report.")] = True,
) -> None:
    """Merge run directories of one experiment (other seeds, other methods) into one, with
    its summary (mean ± sd, paired tests) and report."""
    from geofl.engine.merge import merge_runs
    from geofl.report import write_report

    try:
        cfg = merge_runs(run_dirs, out)
    except GeoflError as err:
        raise fail(str(err)) from None
    if report:
        write_report(out)
    print(
        f"merged {len(run_dirs)} runs: {len(cfg.methods)} methods × {len(cfg.seeds)} seeds "
        f"({', '.join(map(str, cfg.seeds))}) in {out}"
    )
