"""Item 8 of issue 31: a finite but huge update must leave a round record its reader loads.

A scaling attacker with factor 1e30 uploads entries within float32, so validation accepts
it (huge updates are the robust aggregators' business), but ‖Δw‖² overflows float32: the
record's norm was inf, written as null, and ``float(None)`` then refused the line (run
exit 2, no final.json; ``--resume`` and ``geofl report`` failed the same way).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from tests.conftest import tiny_raw

from geofl.engine.records.round import Collected, sync_record
from geofl.io import dumps_line
from geofl.records import RoundStatus, read_rounds
from geofl.server.sampling import Cohort
from geofl.server.strategy import UpdateBatch
from geofl.update import UpdateMeta

D = 6


def _record(deltas: torch.Tensor) -> str:
    metas = [UpdateMeta(client_id=k, num_samples=10, round=1) for k in range(len(deltas))]
    rec = sync_record(
        1,
        Cohort(list(range(len(deltas))), "fixed"),
        [],
        Collected(),
        UpdateBatch(deltas, metas),
        RoundStatus.NO_UPDATES,  # the norms do not depend on the aggregate
        None,
        None,
        primary="accuracy",
        dim=D,
        lr=None,
        uplink=None,
    )
    return dumps_line(rec.to_json())


def test_a_1e30_scaled_update_has_a_finite_norm_in_the_record(tmp_path: Path) -> None:
    deltas = torch.full((3, D), 0.01)
    deltas[0] *= 1e30  # finite in float32; ‖Δw‖² = 6e56 is not
    deltas[1] = 1e-25  # squares underflow float32: ‖Δw‖ would read 0
    deltas[2] = 0.0
    path = tmp_path / "rounds.jsonl"
    path.write_text(_record(deltas) + "\n")
    (rec,) = read_rounds(path)
    assert rec.update_norms == pytest.approx([0.01e30 * math.sqrt(D), 1e-25 * math.sqrt(D), 0.0])
    assert rec.update_norms[2] == 0.0


def _scaled_run(tmp_path: Path) -> Path:
    raw = tiny_raw()
    part = {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}
    attack = {"name": "scaling", "clients": [0], "factor": 1e30}
    raw["methods"] = [
        {"name": "fedavg", "partition": part, "attack": attack},
        {"name": "median", "aggregator": {"name": "median"}, "partition": part, "attack": attack},
    ]
    raw["federation"]["rounds"] = 2
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.slow
def test_a_1e30_scaling_attack_run_finishes_reports_and_resumes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from geofl.cli import app

    runner = CliRunner()
    config, out = _scaled_run(tmp_path), tmp_path / "run"
    result = runner.invoke(app, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for method in ("fedavg", "median"):
        seed = out / f"methods/{method}/seed-3"
        first = read_rounds(seed / "rounds.jsonl")[0]
        assert all(math.isfinite(n) for n in first.update_norms), first.update_norms
        assert (seed / "final.json").is_file()
    # fedavg took the 1e30 update and blew up; the median stayed healthy
    assert json.loads((out / "methods/fedavg/seed-3/final.json").read_text())["diverged"]
    assert json.loads((out / "methods/median/seed-3/final.json").read_text())["diverged"] is None
    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    resumed = runner.invoke(app, ["run", str(config), "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
