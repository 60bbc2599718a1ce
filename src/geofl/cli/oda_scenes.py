"""``geofl oda-scenes``: the 004 Fig. 5 analogue of a detection run under ODA."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geofl.cli.common import RunDirArg, fail
from geofl.errors import GeoflError


def oda_scenes_cmd(
    run_dir: RunDirArg,
    attacked: Annotated[str, typer.Option(help="The undefended method (e.g. fedavg).")],
    defended: Annotated[str, typer.Option(help="The defended method (e.g. dual-shield).")],
    seed: Annotated[int, typer.Option(help="The seed whose final models are drawn.")],
    scenes: Annotated[int, typer.Option(min=1, max=12, help="Test scenes (rows).")] = 3,
    out: Annotated[
        Path | None, typer.Option(help="PNG path (default RUN_DIR/report/oda_scenes.png).")
    ] = None,
) -> None:
    """Draw ground truth, ATTACKED and DEFENDED detections on triggered test scenes
    (004 Fig. 5: green correct, red removed, blue restored, orange residual misses)."""
    from geofl.engine.oda_scenes import collect_oda_scenes
    from geofl.report.oda_scenes import draw_oda_scenes

    try:
        found, name = collect_oda_scenes(run_dir, attacked, defended, seed, scenes)
        path = out or run_dir / "report" / "oda_scenes.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        print(draw_oda_scenes(found, path, (f"{attacked} + ODA", f"{defended} + ODA"), name))
    except GeoflError as err:
        raise fail(str(err)) from None
