"""003 fidelity: the driver's FedAvg with §2.1.5's uniform weights (1/N) beside FedAvg's
sample-count weights; the parking suggestion T_suggestion of §2.1.2 for a tractor below τ_NQI."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.engine.hierarchy_helpers import SEED, agri_raw, config, make_run

from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.experiment import run_experiment
from geofl.engine.hierarchy.events import TractorUpdate
from geofl.engine.hierarchy.stats import parking_suggestion
from geofl.engine.hierarchy.tiers import driver_fedavg, driver_tier
from geofl.errors import ConfigError
from geofl.events import RunInfo
from geofl.io import read_jsonl
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

UPLINK = {"network": {"p_fail": 0.0}, "checkpoint": {"tau_cos": 0.0}}


def _driver(uniform: bool) -> float:
    ups = [
        TractorUpdate(k, 1, torch.tensor([v]), torch.tensor([v]), n, 0.0)
        for k, (v, n) in enumerate([(1.0, 1), (2.0, 2), (10.0, 7)])
    ]
    zeros = np.zeros(3, dtype=np.int64)
    cfg = HierarchyConfig(driver_weights="uniform" if uniform else "samples")
    got = driver_fedavg(
        driver_tier(cfg),
        ups,
        cluster=0,
        farm=zeros,
        context_bin=zeros,
        attempts=3,
        nqi_lost=0,
        now_s=0.0,
        round_idx=1,
    )
    return float(got.model)


def test_driver_uniform_weights_are_the_plain_mean_by_hand() -> None:
    assert math.isclose(_driver(uniform=True), (1.0 + 2.0 + 10.0) / 3, rel_tol=1e-6)
    assert math.isclose(_driver(uniform=False), (1 * 1.0 + 2 * 2.0 + 7 * 10.0) / 10, rel_tol=1e-6)


def _final(tmp: Path, hierarchy: dict[str, Any], name: str) -> torch.Tensor:
    run = make_run(config(tmp, agri_raw(hierarchy, rounds=1, uplink=UPLINK), name), tmp / name)
    res = run.scheduler.round(run.init_params, 1)
    run.comps.store.commit()
    return res.params


def test_uniform_driver_weights_run_and_differ_from_samples(tmp_path: Path) -> None:
    base = {"mode": "sync", "staleness_metric": False}
    samples = _final(tmp_path, base, "samples")
    uniform = _final(tmp_path, base | {"driver_weights": "uniform"}, "uniform")
    assert torch.isfinite(uniform).all()
    assert not torch.equal(samples, uniform)
    assert torch.equal(samples, _final(tmp_path, base | {"driver_weights": "samples"}, "s2"))


def test_driver_weights_stay_out_of_the_resolved_config_while_unset(tmp_path: Path) -> None:
    cfg = config(tmp_path, agri_raw({"mode": "sync"}, rounds=1))
    dumped = cfg.methods[0].model_dump()
    assert "driver_weights" not in dumped["hierarchy"]
    assert "suggest_after_s" not in dumped["hierarchy"]


def test_a_non_positive_parking_threshold_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="suggest_after_s"):
        config(tmp_path, agri_raw({"suggest_after_s": 0.0}, rounds=1))


def test_parking_suggestion_by_hand() -> None:
    assert parking_suggestion(600.0, 200.0) == 400.0  # 600 − 200
    assert parking_suggestion(600.0, 600.0) == 0.0
    assert parking_suggestion(600.0, 3600.0) == 0.0  # overdue: park no longer, max(0, ·)


def _park_records(tmp: Path, hierarchy: dict[str, Any], name: str, tau: float) -> list[Any]:
    uplink = UPLINK | {"nqi": {"tau": tau, "t_chunked": 0.995, "t_fallback": 0.999}}
    run = make_run(config(tmp, agri_raw(hierarchy, rounds=2, uplink=uplink), name), tmp / name)
    params, out = run.init_params, []
    for r in (1, 2):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = res.params
        out.append(res.record)
    return out


def test_the_record_carries_each_skipped_tractors_parking_suggestion(tmp_path: Path) -> None:
    base = {"mode": "sync", "staleness_metric": False, "round_s": 3600.0}
    # τ_NQI 0.99: every tractor is skipped in both rounds and never delivers, so T_last is
    # the time since the run's start: 0 s in round 1, 3600 s in round 2.
    r1, r2 = _park_records(tmp_path, base | {"suggest_after_s": 5000.0}, "park", 0.99)
    assert r1.uplink["status"] == {"skipped": 12}
    assert [p["tractor"] for p in r1.hierarchy["parking"]] == list(range(12))
    assert {(p["t_last_s"], p["t_suggestion_s"]) for p in r1.hierarchy["parking"]} == {
        (0.0, 5000.0)
    }
    assert {(p["t_last_s"], p["t_suggestion_s"]) for p in r2.hierarchy["parking"]} == {
        (3600.0, 1400.0)  # max(0, 5000 − 3600)
    }
    off = _park_records(tmp_path, base, "off", 0.99)[0]
    assert "parking" not in off.hierarchy  # off by default: the record is unchanged


def test_a_delivery_resets_t_last(tmp_path: Path) -> None:
    base = {"mode": "sync", "staleness_metric": False, "round_s": 3600.0, "train_s": 100.0}
    r1, r2 = _park_records(tmp_path, base | {"suggest_after_s": 5000.0}, "mix", 0.3)
    skipped1 = {p["tractor"] for p in r1.hierarchy["parking"]}
    assert 0 < len(skipped1) < 12  # τ_NQI 0.3 splits the tractors
    got = {p["tractor"]: (p["t_last_s"], p["t_suggestion_s"]) for p in r2.hierarchy["parking"]}
    assert set(got) & skipped1 and set(got) - skipped1  # both cases occur
    for k, pair in got.items():  # sent at 100 s, then 3700 s (train_s 100)
        assert pair == ((3700.0, 1300.0) if k in skipped1 else (3600.0, 1400.0))


class _CrashAfter:
    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if record.round == 1:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, summary: dict[str, Any]) -> None: ...


def _parking(run: Path) -> list[Any]:
    rounds = read_jsonl(seed_dir(run, "hier", SEED) / "rounds.jsonl")
    return [rec["hierarchy"]["parking"] for rec in rounds]


def test_t_last_survives_a_resume(tmp_path: Path) -> None:
    hier = {"mode": "sync", "staleness_metric": False, "train_s": 100.0, "suggest_after_s": 5e3}
    uplink = UPLINK | {"nqi": {"tau": 0.3, "t_chunked": 0.995, "t_fallback": 0.999}}
    raw = agri_raw(hier, rounds=2, uplink=uplink)
    whole = run_experiment(config(tmp_path, raw, "a"), tmp_path / "whole")
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config(tmp_path, raw, "c"), cut, subscribers=[_CrashAfter()])
    run_experiment(config(tmp_path, raw, "c"), cut, resume=True)
    assert _parking(whole) == _parking(cut)
    assert {p["t_last_s"] for p in _parking(cut)[1]} == {3600.0, 3700.0}
