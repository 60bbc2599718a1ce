"""Secure aggregation on a real Flower deployment: a TLS SuperLink with two authenticated
SuperNodes, each a site hosting two clients, runs 2 rounds of DP-SGD with FedAvg with
``--secagg``-style secure aggregation (Flower's SecAgg+: :mod:`geofl.deploy.secagg`); the
plain side is the in-process simulator, which a plain deployment equals bit for bit in
seeded mode (``test_flower_loopback.py``).

What the ServerApp saw (``secagg_view.jsonl``, written by the server as each reply
arrives): four protocol replies per site per round, no array in any of them, masked
integers (SecAgg+'s factor, then Δw and the loss) in each stage-2 reply, and no
per-client Δw, histogram or n_k anywhere.

The result: the final model equals the plain run's within SecAgg+'s quantisation.
A site's value (W/W_max)·v is rounded stochastically to a grid of step 2c/Q, so one round's
mean is off by at most S·(2c/Q)·W_max/ΣW per coordinate (S = 2 sites, c = 8, Q = 2^22,
W_max = 200, ΣW = the clients' summed n_k); the test allows 4× that per round over the two
rounds (round 2 trains from round 1's slightly different model; an SGD step moves a
difference by a factor near 1). The clients' ledgers crossed in clear: the same ε.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("flwr")

from geofl.config.load import load_config
from geofl.deploy.loopback import Loopback
from geofl.deploy.setup import load_setup
from geofl.engine.experiment import run_experiment
from geofl.rundir import seed_dir

pytestmark = [pytest.mark.slow, pytest.mark.deploy]  # Flower processes

SEED = 3
MAX_WEIGHT = 200.0


def _raw() -> dict[str, Any]:
    return {
        "name": "deploy-secagg",
        "seeds": [SEED],
        "data": {"dataset": "synthetic", "params": {"num_samples": 160, "size": 16, "seed": 0}},
        "model": {"name": "small_cnn", "params": {"width": 4, "blocks": 1}},
        "train": {"batch_size": 16, "local_epochs": 1},
        "federation": {"num_clients": 4, "rounds": 2},
        "privacy": {"randomness": "seeded"},  # the same noise in both runs
        "methods": [
            {
                "name": "dpsgd",
                "trainer": {"name": "dp_sgd", "noise_multiplier": 1.0, "clip": 1.0},
            }
        ],
    }


def _run_config(config: Path, out: Path, **over: Any) -> dict[str, Any]:
    rc = {"config": str(config), "out": str(out), "method": "", "seed": -1, "sites": 2}
    rc.update({"round-timeout": 120.0, "connect-timeout": 60.0})
    rc.update(over)
    return rc


def test_secagg_matches_the_simulator_within_quantisation_and_hides_updates(tmp_path: Path) -> None:
    plain_cfg = tmp_path / "plain.yaml"
    plain_cfg.write_text(yaml.safe_dump(_raw()), encoding="utf-8")
    raw = _raw()
    raw["privacy"]["secure_aggregation"] = {"max_weight": MAX_WEIGHT}
    secure_cfg = tmp_path / "secure.yaml"
    secure_cfg.write_text(yaml.safe_dump(raw), encoding="utf-8")
    # The plain side is the in-process simulator: a plain deployment equals it bit for bit
    # in seeded mode (test_flower_loopback.py), and a second deployment would double the
    # test's minute.
    run_experiment(load_config(plain_cfg), tmp_path / "plain")
    plain_sites = [{"clients": "0,1"}, {"clients": "2,3"}]
    secure_sites = [{**s, "config": str(secure_cfg)} for s in plain_sites]
    with Loopback(tmp_path / "flwr-secure", secure_sites, auth=True) as lb:
        out_secure = lb.run(_run_config(secure_cfg, tmp_path / "secure"), timeout=600)
    plain = seed_dir(tmp_path / "plain", "dpsgd", SEED)
    secure = seed_dir(tmp_path / "secure", "dpsgd", SEED)
    assert (plain / "final.json").exists()
    assert (secure / "final.json").exists(), out_secure[-3000:]
    _assert_server_saw_no_update(secure / "secagg_view.jsonl", rounds=2, sites=2)
    recs = [json.loads(x) for x in (secure / "rounds.jsonl").read_text().splitlines()]
    assert [r["participants"] for r in recs] == [[0, 1, 2, 3]] * 2
    assert [r["train_loss"] for r in recs] == [None, None]  # DP-SGD keeps it, as in plain
    pa = torch.load(plain / "checkpoint.pt", weights_only=False)["params"]
    pb = torch.load(secure / "checkpoint.pt", weights_only=False)["params"]
    partition = load_setup(plain_cfg, None, SEED, "seeded").partition
    assert partition is not None
    total = sum(len(ix) for ix in partition.indices)  # ΣW: every client trains each round
    step = 2 * 8.0 / 2**22
    bound = 2 * step * MAX_WEIGHT / total  # one round's mean, per coordinate
    diff = float((pa - pb).abs().max())
    assert 0 < diff <= 4 * bound * 2, (diff, bound)
    fa = json.loads((plain / "final.json").read_text())["privacy"]["epsilon_per_client"]
    fb = json.loads((secure / "final.json").read_text())["privacy"]["epsilon_per_client"]
    assert fa == fb and len(fa) == 4


def _assert_server_saw_no_update(view: Path, rounds: int, sites: int) -> None:
    """Every reply the ServerApp received carried protocol data only."""
    lines = [json.loads(x) for x in view.read_text().splitlines()]
    assert len(lines) == 4 * sites * rounds, lines  # setup, share keys, masked vector, unmask
    for v in lines:
        assert not v["error"], v
        assert all(not arrays for arrays in v["arrays"].values()), v  # no array at all
        keys = {k for ks in v["configs"].values() for k in ks}
        assert not keys & {"delta", "label_histogram", "num_samples"}, v
    masked = [v for v in lines if "masked_bytes" in v]
    assert len(masked) == sites * rounds
    metrics = {k for v in masked for ks in v["metrics"].values() for k in ks}
    assert metrics == {"num_examples"}  # zeroed after masking (the site's W)
