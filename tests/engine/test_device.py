"""``device: auto | cpu | cuda`` (issue 34 item 5): resolution, refusals, and CPU unchanged.

This machine has no CUDA device, so the CUDA path itself is checked by
``benchmarks/check_cuda.py`` where a GPU is lent; here: what resolves to what, what is
refused with one line (``config validate`` and ``run`` alike), that the CPU tensors a
workspace hands out are its own copies, and that naming ``device: cpu`` changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.schema import ExperimentConfig
from geofl.device import check_device, resolve_device, to_device
from geofl.errors import ConfigError
from geofl.models.base import FlatModel


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_absent_cpu_and_auto_without_cuda_resolve_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")


def test_auto_picks_cuda_where_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")


def test_cuda_without_a_cuda_device_is_one_line_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^device: cuda, but this torch .* use device: auto"):
        resolve_device("cuda")


@pytest.mark.parametrize(
    ("trainers", "workers", "batched", "field"),
    [
        (["dp_sgd"], None, False, "device"),
        ([], 2, False, "federation.workers"),
        ([], None, True, "federation.batch_clients"),
    ],
)
def test_cuda_refuses_cpu_only_trainers_the_worker_pool_and_batched_clients(
    monkeypatch: pytest.MonkeyPatch,
    trainers: list[str],
    workers: int | None,
    batched: bool,
    field: str,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError) as err:
        check_device("cuda", trainers=trainers, workers=workers, batched=batched)
    assert err.value.path == field
    assert "\n" not in str(err.value)
    check_device("cuda", trainers=[], workers=1)  # plain local SGD, one process: fine
    check_device("cpu", trainers=trainers, workers=workers, batched=batched)  # CPU: anything


def test_validate_and_run_refuse_cuda_here_with_the_same_line(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without one")
    source = str(_write(tmp_path, tiny_raw(device="cuda")))
    code, out = _cli("config", "validate", source)
    assert code == 2, out
    (line,) = [ln for ln in out.splitlines() if ln.strip()]
    assert line.startswith("error: device: cuda"), line
    run_dir = tmp_path / "run"
    code, out = _cli("run", source, "--out", str(run_dir), "--no-report", "--no-progress")
    assert code == 2, out
    assert [ln for ln in out.splitlines() if ln.strip()] == [line]
    assert not run_dir.exists()


def test_absent_device_stays_out_of_the_resolved_config() -> None:
    """Run directories and fingerprints of configs without ``device`` are unchanged."""
    assert "device" not in ExperimentConfig.model_validate(tiny_raw()).model_dump(mode="json")
    dumped = ExperimentConfig.model_validate(tiny_raw(device="auto")).model_dump(mode="json")
    assert dumped["device"] == "auto"


def test_to_device_moves_nested_targets_and_keeps_what_is_there() -> None:
    x = torch.arange(4.0)
    assert to_device(x, torch.device("cpu")) is x
    moved = to_device({"boxes": [x, x], "labels": (x,)}, torch.device("meta"))
    assert moved["boxes"][0].is_meta and moved["labels"][0].is_meta
    assert isinstance(moved["labels"], tuple)


def test_a_workspace_on_cpu_hands_out_its_own_copies() -> None:
    ws = FlatModel(torch.nn.Linear(3, 2), torch.device("cpu"))
    assert ws.device == torch.device("cpu")
    snap = ws.snapshot()
    ws.flat.add_(1.0)
    assert not torch.equal(snap, ws.flat)


@pytest.mark.slow
def test_naming_device_cpu_gives_the_metrics_of_no_device(tmp_path: Path) -> None:
    finals = []
    for i, over in enumerate([{}, {"device": "cpu"}]):
        raw = tiny_raw(**over)
        raw["federation"]["rounds"] = 2
        out = tmp_path / f"run{i}"
        code, text = _cli(
            "run", str(_write(tmp_path, raw)), "--out", str(out), "--no-report", "--no-progress"
        )
        assert code == 0, text
        final = json.loads((out / "methods" / "fedavg" / "seed-3" / "final.json").read_text())
        final.pop("wall_s")
        finals.append(final)
    assert finals[0] == finals[1]
