"""``federation.batch_clients``: both schedulers run the batched client step and give the
sequential rounds' cohorts and models (float32 tolerance, see
tests/client/test_batched_clients.py); the setting is validated, recorded in the resolved
config when set and absent (so every existing run's fingerprint is unchanged) when not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.config.load import config_from_raw
from geofl.errors import ConfigError

ATOL = 5e-5


def _rounds(tmp: Path, raw: dict[str, Any], batch: str | None, rounds: int = 2) -> Any:
    if batch is not None:
        raw["federation"]["batch_clients"] = batch
    run = make_run(config(tmp, raw, f"b{batch}"), tmp / f"b{batch}")
    params, cohorts = run.init_params, []
    for r in range(1, rounds + 1):
        out = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = out.params
        rec = out.record
        cohorts.append((list(rec.cohort), list(rec.participants), rec.epsilon))
    return run, params, cohorts


@pytest.mark.parametrize(
    ("hierarchy", "method"),
    [
        (None, {}),
        (None, {"algorithm": {"name": "fedprox", "mu": 0.1}}),
        (None, {"trainer": {"name": "dp_sgd", "noise_multiplier": 1.0, "clip": 1.0}}),
        ({"round_s": 3600.0, "driver_deadline_s": 600.0}, {}),
    ],
    ids=["sync-fedavg", "sync-fedprox", "sync-dp-sgd", "hierarchy"],
)
def test_batched_rounds_equal_sequential(
    tmp_path: Path, hierarchy: dict[str, Any] | None, method: dict[str, Any]
) -> None:
    off, p_off, c_off = _rounds(tmp_path, agri_raw(hierarchy, **method), None)
    auto, p_auto, c_auto = _rounds(tmp_path, agri_raw(hierarchy, **method), "auto")
    assert off.comps.batched is None and auto.comps.batched is not None
    assert c_auto == c_off and c_off[0][1]
    torch.testing.assert_close(p_auto, p_off, atol=ATOL, rtol=0)
    assert not torch.equal(p_off, off.init_params)  # they trained


def test_a_program_that_cannot_batch_runs_the_sequential_step(tmp_path: Path) -> None:
    raw = agri_raw(None, algorithm={"name": "scaffold"})
    run, *_ = _rounds(tmp_path, raw, "auto", rounds=1)
    assert run.comps.batched is None


def test_batch_clients_is_validated_and_recorded_only_when_set() -> None:
    raw = agri_raw(None)
    assert "batch_clients" not in config_from_raw(raw).model_dump()["federation"]
    raw["federation"]["batch_clients"] = "auto"
    assert config_from_raw(raw).model_dump()["federation"]["batch_clients"] == "auto"
    for bad in ({"batch_clients": "sometimes"}, {"batch_clients": "auto", "workers": 2}):
        raw = agri_raw(None)
        raw["federation"].update(bad)
        with pytest.raises((ConfigError, ValueError), match="batch_clients"):
            config_from_raw(raw)


def test_a_bare_yaml_off_is_the_word_off() -> None:
    """YAML 1.1 reads ``batch_clients: off`` (and ``--set federation.batch_clients=off``) as
    false: it means the setting ``off``; ``on``/``true`` stay refused."""
    for text in ("off", "false"):
        raw = agri_raw(None)
        raw["federation"]["batch_clients"] = yaml.safe_load(text)
        assert config_from_raw(raw).federation.batch_clients == "off"
    raw = agri_raw(None)
    raw["federation"]["batch_clients"] = yaml.safe_load("on")
    with pytest.raises((ConfigError, ValueError), match="batch_clients"):
        config_from_raw(raw)
