"""003 fidelity: the driver's FedAvg with §2.1.5's uniform weights (1/N) beside FedAvg's
sample-count weights; the parking suggestion T_suggestion of §2.1.2 for a tractor below τ_NQI."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.engine.hierarchy.events import TractorUpdate
from geofl.engine.hierarchy.tiers import driver_fedavg

UPLINK = {"network": {"p_fail": 0.0}, "checkpoint": {"tau_cos": 0.0}}


def _driver(uniform: bool) -> float:
    ups = [TractorUpdate(k, 1, torch.tensor([v]), torch.tensor([v]), n, 0.0)
           for k, (v, n) in enumerate([(1.0, 1), (2.0, 2), (10.0, 7)])]  # fmt: skip
    zeros = np.zeros(3, dtype=np.int64)
    got = driver_fedavg(
        ups, cluster=0, farm=zeros, context_bin=zeros, attempts=3, nqi_lost=0, now_s=0.0,
        uniform=uniform,
    )  # fmt: skip
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
