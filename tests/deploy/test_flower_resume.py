"""A deployment resumed after its SuperLink died (Flower 1.42 on loopback, TLS and SuperNode
authentication: ``--enable-supernode-auth``, each site's public key registered with
``flwr supernode register``, again on the restarted SuperLink, which keeps no state): a 3-round
run of a stateful config (SCAFFOLD's c_k and DP-SGD's adaptive clip statistic in client
state, privacy ledgers) loses its SuperLink — with the ServerApp — right after round 1's
checkpoint, and its SuperNodes too; everything restarts, and ``flwr run`` with
``resume=true`` continues from the checkpoint, the sites restoring their clients from their
state directories. The finished run equals the simulator's bit for bit (every round's
record and model hash, the final model, ε). A site started with an empty state directory
refuses the resume in one line before any round."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from geofl.config.load import load_config
from geofl.deploy.flower import ERROR_FILE
from geofl.deploy.loopback import Loopback
from geofl.engine.checkpoint import load_checkpoint
from geofl.engine.experiment import run_experiment
from geofl.rundir import seed_dir
from tests.deploy.test_flower_loopback import SEED, _raw, _rounds, _run_config, _write

pytestmark = [pytest.mark.slow, pytest.mark.deploy]  # Flower processes

METHOD = "scaffold-dp"


def _stateful() -> dict[str, object]:
    raw = _raw()
    raw["federation"] = {"num_clients": 2, "rounds": 3}
    raw["methods"] = [
        {
            "name": METHOD,
            "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
            "algorithm": {"name": "scaffold"},
            "trainer": {"name": "dp_sgd", "noise_multiplier": 1.0, "adaptive_clip": {}},
        }
    ]
    return raw


def _crash_after_round_1(lb: Loopback, rc: dict[str, object], run_dir: Path) -> None:
    """Start the run, and kill SuperLink, ServerApp and SuperNodes once round 1's
    checkpoint is on disk."""
    args = [lb.flwr, "run", str(lb.app), "loop", "--run-config", lb.write_run_config(rc)]
    with open(lb.workdir / "flwr-run-1.log", "wb") as log:
        proc = subprocess.Popen(
            [*args, "--stream"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=lb.env,
            cwd=lb.workdir,
        )
        try:
            deadline = time.monotonic() + 400
            while not (run_dir / "checkpoint.pt").exists():
                assert time.monotonic() < deadline, "round 1 never finished"
                assert proc.poll() is None or (run_dir / "checkpoint.pt").exists()
                time.sleep(0.02)
            lb.kill_superlink()
            for i in range(len(lb.sites)):
                lb.kill_supernode(i)
        finally:
            proc.kill()
            proc.wait(timeout=30)


def test_superlink_killed_after_round_1_resumes_to_the_simulators_model(tmp_path: Path) -> None:
    config = _write(tmp_path / "exp.yaml", _stateful())
    sim_dir = seed_dir(run_experiment(load_config(config), tmp_path / "sim"), METHOD, SEED)
    out = tmp_path / "dep"
    run_dir = seed_dir(out, METHOD, SEED)
    rc = _run_config(config, out, **{"round-timeout": 200.0})
    with Loopback(tmp_path / "flwr", [{"clients": "0"}, {"clients": "1"}], auth=True) as lb:
        _crash_after_round_1(lb, rc, run_dir)
        # round 1's, unless a fast machine finished round 2 before the kill (still a resume)
        crashed = load_checkpoint(run_dir / "checkpoint.pt")["round"]
        assert crashed in (1, 2)
        # everything restarts (the new SuperLink admits the registered keys only); site 1
        # first without its state directory: refused
        lb.start_superlink()
        lb.start_supernode(0, lb.sites[0])
        lb.start_supernode(1, {**lb.sites[1], "state-dir": str(tmp_path / "empty")})
        t0 = time.monotonic()
        lb.run({**rc, "resume": True}, timeout=300)
        assert time.monotonic() - t0 < 300
        error = (out / ERROR_FILE).read_text()
        assert error.count("\n") == 1, error
        assert f"client 1: no saved state of its round-{crashed} step" in error
        assert load_checkpoint(run_dir / "checkpoint.pt")["round"] == crashed  # nothing ran
        # site 1 back with its own state directory: the run resumes and finishes
        lb.stop_supernode(1)
        lb.start_supernode(1, lb.sites[1])
        output = lb.run({**rc, "resume": True}, timeout=600)
    assert (run_dir / "final.json").exists(), output[-3000:]
    assert not (out / ERROR_FILE).exists()
    link = (tmp_path / "flwr" / "superlink.log").read_text(errors="replace")
    assert link.count("[ControlServicer.RegisterNode] Created node_id") == 4  # 2 keys x 2 starts
    a, b = _rounds(sim_dir / "rounds.jsonl"), _rounds(run_dir / "rounds.jsonl")
    assert [r["round"] for r in b] == [1, 2, 3]
    assert [r["model_sha256"] for r in a] == [r["model_sha256"] for r in b]
    assert a == b
    pa = torch.load(sim_dir / "checkpoint.pt", weights_only=False)
    pb = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert torch.equal(pa["params"], pb["params"])
    for key, value in pa["strategy"].items():  # SCAFFOLD's server control variate c
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, pb["strategy"][key]), key
    fa = json.loads((sim_dir / "final.json").read_text())
    fb = json.loads((run_dir / "final.json").read_text())
    assert fb["privacy"]["epsilon_per_client"] == fa["privacy"]["epsilon_per_client"]
