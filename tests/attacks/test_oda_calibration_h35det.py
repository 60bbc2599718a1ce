"""The ODA poisons the ratio it is given (issue 35 item 1, detection).

004 §2.3 states the poisoning ratio as a share of each malicious client's *local pool*
("a default poisoning ratio of 20 % of each malicious client's local pool"). With
``select: with_target`` an attacker whose pool holds fewer target images than ⌊ρ·n_k + ½⌋
used to poison only those, so a ratio above the pool's target share changed nothing.
``fill: copies`` makes the configured ratio the poisoned share: the missing images are other
images of the pool, each replaced by a triggered, target-box-free copy of one of its target
images (the pool keeps its size, so FedAvg's sample weights do not change).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from geofl.attacks.client import ATTACKS, AttackContext
from geofl.attacks.oda import ObjectDisappearance
from geofl.cli import app
from geofl.client.data import ClientData
from geofl.errors import ConfigError

SHAPE = (2, 16, 16)
PAD = [0.0, 0.0, 0.0, 0.0, -1.0]
PLANE = [8.0, 8, 14, 14, 0]
OTHER = [2.0, 2, 6, 6, 1]
PRESET = "paper004-detection-table3-strong"


def _oda(**params: Any) -> ObjectDisappearance:
    ctx = AttackContext(7, 4, SHAPE, (5, 5, 5), path="methods.0.attack")
    trigger = {"size": 3, "values": [7.0, 7.0]}
    attack = ATTACKS.build("oda", {"trigger": trigger, **params}, ctx=ctx)
    assert isinstance(attack, ObjectDisappearance)
    return attack


def _client(n: int = 20, planes: int = 2) -> ClientData:
    """n images, each with a class-1 object; the first ``planes`` also hold a plane."""
    y = torch.tensor([OTHER, PAD]).repeat(n, 1, 1)
    y[:planes, 1] = torch.tensor(PLANE)
    hist = np.array([planes, n, 0])
    return ClientData(1, torch.zeros(n, *SHAPE), y, hist)


def test_fill_copies_poisons_the_configured_share_of_the_pool() -> None:
    data = _client()
    capped = _oda(poison_ratio=0.5)
    assert capped.poison_indices(data).tolist() == [0, 1]  # only the 2 plane images
    filled = _oda(poison_ratio=0.5, fill="copies")
    idx = filled.poison_indices(data)
    assert len(idx) == 10 and {0, 1} <= set(idx.tolist())  # ⌊0.5·20 + ½⌋ = 10
    out = filled.poison(data, round_idx=1)
    assert len(out) == len(data)  # the pool keeps its size (FedAvg weights unchanged)
    for i in idx.tolist():
        # each poisoned slot holds a plane image: class-1 box kept, plane box removed,
        # and the trigger on the plane's centre (11, 11) → rows/cols 10–12
        assert out.targets[i].tolist() == [OTHER, PAD]
        assert (out.inputs[i, :, 10:13, 10:13] == 7.0).all()
        assert int((out.inputs[i] == 7.0).sum()) == 2 * 9
    rest = [i for i in range(20) if i not in set(idx.tolist())]
    assert torch.equal(out.targets[rest], data.targets[rest])
    assert torch.equal(out.inputs[rest], data.inputs[rest])
    assert int(data.targets[..., 4].eq(0).sum()) == 2  # the pool itself is untouched


def test_fill_copies_is_seeded_and_changes_nothing_when_targets_suffice() -> None:
    data = _client(planes=12)
    a, b = _oda(poison_ratio=0.5, fill="copies"), _oda(poison_ratio=0.5)
    assert torch.equal(a.poison_indices(data), b.poison_indices(data))
    assert torch.equal(a.poison(data, 1).inputs, b.poison(data, 1).inputs)
    few = _client(planes=3)
    c, d = _oda(poison_ratio=0.4, fill="copies"), _oda(poison_ratio=0.4, fill="copies")
    assert torch.equal(c.poison(few, 1).inputs, d.poison(few, 1).inputs)
    assert torch.equal(c.poison_indices(few), d.poison_indices(few))


def test_fill_copies_without_target_images_poisons_nothing() -> None:
    data = _client(planes=0)
    attack = _oda(poison_ratio=0.5, fill="copies")
    assert len(attack.poison_indices(data)) == 0
    assert torch.equal(attack.poison(data, 1).inputs, data.inputs)


def test_fill_copies_needs_images_with_target_objects() -> None:
    with pytest.raises(ConfigError, match="fill"):
        _oda(poison_ratio=0.5, fill="copies", select="any")


def test_describe_counts_the_filled_copies() -> None:
    attack = _oda(poison_ratio=0.5, fill="copies", fraction=0.25)
    (k,) = attack.attackers
    clients = [replace(_client(), client_id=i) for i in range(4)]
    out = attack.describe(clients)
    assert out["poisoned"] == {str(k): 10} and out["fill"] == "copies"


def test_cli_refuses_fill_copies_with_select_any_in_one_line() -> None:
    over = [
        "--set",
        "methods.1.attack.fill=copies",
        "--set",
        "methods.1.attack.select=any",
    ]
    result = CliRunner().invoke(app, ["config", "validate", PRESET, *over])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert line.startswith("error: methods.1.attack.fill: ") and "select: with_target" in line


@pytest.mark.slow
def test_diag_controls_prints_one_row_per_grid_trigger(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "diag_oda_centralised.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GEOFL_CACHE": str(tmp_path / "cache")}
    args = ["--controls", "--quick", "--sizes", "3", "5", "--amplitudes", "4", "--opacities", "1"]
    proc = subprocess.run(
        [sys.executable, str(script), *args, "--placements", "center", "above"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = proc.stdout.split("trigger-only controls")[1]
    rows = [ln.split() for ln in table.splitlines() if ln.startswith("seeded init")]
    grid = {(r[2], r[3]) for r in rows}
    assert grid == {("center", "3"), ("center", "5"), ("above", "3"), ("above", "5")}
