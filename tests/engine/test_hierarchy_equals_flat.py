"""The synchronous 003 hierarchy with zero delays degenerates to the flat engine's FedAvg bit
for bit (issue 32, "done when"): same global model after every round (same hash), same
participants and sample-count weights.

The settings that make it degenerate: one cluster (a radius wider than the fleet) so the
driver's FedAvg is FedAvg over every tractor by sample count; one LEO (its regional FedAvg
of one driver model is that model); every contact immediate (``mode: sync``, ideal
contacts, no driver failures); the driver sends raw float32 (no top-k + 4-bit); and a GEO
that changes nothing about one regional row: κ = 0 and no fairness (weight 1), a clip C
above any update norm, no trim, and ``geo_delta: update`` (the GEO adds the regional update
itself; Eq. 1's w̄_l − w^t would add the rounding of a subtraction of two models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.hashing import params_sha256

DEGENERATE = {
    "mode": "sync",
    "radius_km": 20000.0,
    "leo": {"n": 1, "planes": 1, "contacts": "ideal"},
    "links": {"compress": False},
    "p_driver_fail": 0.0,
    "kappa": 0.0,
    "fairness": False,
    "clip": 1e30,
    "trim_fraction": 0.0,
    "redundancy_threshold": 1.0,
    "geo_delta": "update",
    "staleness_metric": False,
}


def _rounds(tmp: Path, hierarchy: dict[str, Any] | None, name: str) -> list[Any]:
    run = make_run(config(tmp, agri_raw(hierarchy, rounds=3), name), tmp / name)
    if hierarchy is not None:
        assert run.scheduler.topo.clusters.num_clusters == 1
    params, out = run.init_params, []
    for r in range(1, 4):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = res.params
        out.append((params, res.record))
    return out


def test_synchronous_hierarchy_with_zero_delays_equals_flat_fedavg(tmp_path: Path) -> None:
    flat = _rounds(tmp_path, None, "flat")
    hier = _rounds(tmp_path, DEGENERATE, "hier")
    for (p_f, rec_f), (p_h, rec_h) in zip(flat, hier, strict=True):
        assert rec_f.participants and rec_f.participants == rec_h.participants
        assert rec_f.weights == rec_h.weights
        assert torch.equal(p_f, p_h), (p_f - p_h).abs().max()  # bit for bit
        assert rec_h.model_sha256 == rec_f.model_sha256 == params_sha256(p_f)
