"""geofl on a real Flower deployment on loopback: a SuperLink and two SuperNodes (each a
site hosting one client) run 2 rounds of a small config through ``flwr run``; the global
model after every round equals the simulator's bit for bit (same seed and config: the
sites run the simulator's client step with the same generators, arrays travel as raw
float32). The equivalence runs with TLS and SuperNode authentication (Flower 1.42:
``--enable-supernode-auth``, each site's public key registered with ``flwr supernode
register``): a SuperNode whose key was never registered is refused when it connects (it
exits with Flower's one-line reason), one without a key before it starts (geofl's warm site
wrapper: one line, exit 2), and the runs complete with the
two registered sites — the README's two-site walkthrough, on one machine. The sites run
warm (:mod:`geofl.deploy.warmsite`): every message is served by one long-lived process per
site, never by a ``flwr-clientapp`` process of its own. Bad input ends
in one clear error within bounded time: a site pointing at a missing config/data, a site
whose config differs from the server's, a SuperNode pointing at a SuperLink that is not
there.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("flwr")

from geofl.config.load import load_config
from geofl.deploy.certs import write_node_key
from geofl.deploy.flower import ERROR_FILE
from geofl.deploy.loopback import Loopback, free_port
from geofl.engine.experiment import run_experiment
from geofl.rundir import seed_dir

pytestmark = [pytest.mark.slow, pytest.mark.deploy]  # Flower processes

SEED = 3


def _raw(**model: Any) -> dict[str, Any]:
    return {
        "name": "deploy-loopback",
        "seeds": [SEED],
        "data": {"dataset": "synthetic", "params": {"num_samples": 160, "size": 16, "seed": 0}},
        "model": {"name": "small_cnn", "params": {"width": 4, "blocks": 1, **model}},
        "train": {"batch_size": 32, "local_epochs": 1},
        "federation": {"num_clients": 2, "rounds": 2},
        "privacy": {"randomness": "seeded"},  # the simulator's generators: bit-equal runs
        "methods": [
            {
                "name": "dpsgd",
                "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
                "trainer": {"name": "dp_sgd", "noise_multiplier": 1.0, "adaptive_clip": {}},
            }
        ],
    }


def _sites_raw() -> dict[str, Any]:
    """:func:`_raw` with site-local data: two sites, each its own synthetic data (another
    generator seed), split at the site; no dataset on the server."""
    raw = _raw()
    gen = {"num_samples": 80, "size": 16}
    raw["data"] = {
        "sites": [
            {"name": "north", "dataset": "synthetic", "params": {**gen, "seed": 1}},
            {"name": "south", "dataset": "synthetic", "params": {**gen, "seed": 2}},
        ]
    }
    raw["eval"] = {"every": 2}  # federated evaluation after round 2 (a third message type)
    return raw


def _write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _run_config(config: Path, out: Path, **over: Any) -> dict[str, Any]:
    rc = {"config": str(config), "out": str(out), "method": "", "seed": -1, "sites": 2}
    rc.update({"round-timeout": 120.0, "connect-timeout": 60.0})
    rc.update(over)
    return rc


def _rounds(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        for key in ("time_s", "client_log"):  # wall times; the client-local log stays on sites
            rec.pop(key, None)
        out.append(rec)
    return out


def test_two_supernodes_match_the_simulator(tmp_path: Path) -> None:
    """Both data modes on one SuperLink and two SuperNodes (each node config names its
    client for the shared dataset and its site for site-local data): the shared dataset
    partitioned over clients, then each site's own data (the server loads none, sites send
    band statistics and evaluation statistics). Only the two registered SuperNodes join."""
    config = _write(tmp_path / "exp.yaml", _raw())
    local = _write(tmp_path / "sites.yaml", _sites_raw())
    sim = run_experiment(load_config(config), tmp_path / "sim")
    sim_local = run_experiment(load_config(local), tmp_path / "sim-sites")
    sites = [{"clients": "0", "site": "north"}, {"clients": "1", "site": "south"}]
    work = tmp_path / "flwr"
    with Loopback(work, sites, auth=True) as lb:  # TLS with generated certs, registered keys
        _strangers_are_refused(lb, work)
        output = lb.run(_run_config(config, tmp_path / "dep"), timeout=600)
        output_local = lb.run(_run_config(local, tmp_path / "dep-sites"), timeout=600)
        listed = subprocess.run(
            [lb.flwr, "supernode", "list", "loop", "--format", "json"],
            capture_output=True,
            timeout=60,
            env=lb.env,
            cwd=lb.workdir,
        )
    assert "https://127.0.0.1" in (work / "superlink.log").read_text()
    _assert_same_run(sim, tmp_path / "dep", output)
    _assert_same_run(sim_local, tmp_path / "dep-sites", output_local)
    rec = json.loads(
        (seed_dir(tmp_path / "dep-sites", "dpsgd", SEED) / "rounds.jsonl")
        .read_text()
        .splitlines()[-1]
    )
    assert rec["test"]["n"] > 0 and rec["participants"] == [0, 1]  # evaluated at the sites
    text = listed.stdout.decode()
    nodes = json.loads(text[text.index("{") :])["nodes"]
    assert len(nodes) == 2, nodes
    for i in (0, 1):  # warm sites: no message started a ClientApp process of its own
        assert "Start `flwr-clientapp` process" not in (work / f"supernode{i}.log").read_text()


def _strangers_are_refused(lb: Loopback, work: Path) -> None:
    """A third site claiming client 1 (were it admitted, the run would stop on a client
    hosted twice) with a key that was never registered, and a fourth without a key: the
    SuperLink refuses both (they are started together, and must both exit)."""
    stranger = write_node_key(work / "keys", "stranger")  # never registered
    unknown = lb.start_supernode(2, {"clients": "1"}, key=stranger.private)
    keyless = lb.start_supernode(3, {"clients": "1"}, key=None)
    log = _refused(unknown, work / "supernode2.log")
    assert "Failed to activate SuperNode" in log, log[-2000:]
    log = _refused(keyless, work / "supernode3.log")  # the warm site refuses it first
    assert keyless.returncode == 2
    assert "error: a SuperNode without a key" in log, log[-2000:]


def _refused(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The log of a SuperNode that must exit with an error (within 120 s)."""
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a SuperNode the SuperLink should refuse still runs after 120 s: {log}")
    assert rc != 0
    return log.read_text(errors="replace")


def _assert_same_run(sim: Path, dep: Path, output: str) -> None:
    """The deployment in ``dep`` equals the simulation in ``sim`` bit for bit."""
    sim_dir = seed_dir(sim, "dpsgd", SEED)
    dep_dir = seed_dir(dep, "dpsgd", SEED)
    assert (dep_dir / "final.json").exists(), output[-3000:]
    a, b = _rounds(sim_dir / "rounds.jsonl"), _rounds(dep_dir / "rounds.jsonl")
    assert [r["model_sha256"] for r in a] == [r["model_sha256"] for r in b]
    assert a == b
    pa = torch.load(sim_dir / "checkpoint.pt", weights_only=False)
    pb = torch.load(dep_dir / "checkpoint.pt", weights_only=False)
    assert torch.equal(pa["params"], pb["params"])
    assert pa["strategy"].keys() == pb["strategy"].keys()
    # the clients' ledgers reached the server's accounting: same ε as the simulation
    fa = json.loads((sim_dir / "final.json").read_text())
    fb = json.loads((dep_dir / "final.json").read_text())
    assert fb["privacy"]["epsilon_per_client"] == fa["privacy"]["epsilon_per_client"]


def test_bad_sites_end_in_one_clear_error(tmp_path: Path) -> None:
    """Site 1 first points at a missing config, then (restarted) at one that differs from
    the server's: each run stops before any round with one line naming the cause."""
    config = _write(tmp_path / "exp.yaml", _raw())
    other = _write(tmp_path / "other.yaml", _raw(width=6))
    missing = tmp_path / "missing.yaml"
    sites = [{"clients": "0"}, {"clients": "1", "config": str(missing)}]
    with Loopback(tmp_path / "flwr", sites) as lb:
        t0 = time.monotonic()
        output = lb.run(_run_config(config, tmp_path / "dep"), timeout=300)
        assert time.monotonic() - t0 < 300
        # the log stream shows it too, when Flower delivers the stream's tail before it ends
        error = (tmp_path / "dep" / ERROR_FILE).read_text()
        assert "geofl deploy error" in output or error, output[-3000:]
        assert error.count("\n") == 1 and f"{missing} not found" in error
        lb.stop_supernode(1)  # it leaves the SuperLink's node list
        lb.start_supernode(1, {**lb.sites[1], "config": str(other)})
        lb.run(_run_config(config, tmp_path / "dep2"), timeout=300)
    error = (tmp_path / "dep2" / ERROR_FILE).read_text()
    assert error.count("\n") == 1 and "config differs from the server's in model" in error
    assert not (tmp_path / "dep2" / "methods").exists()  # stopped before any round


def test_unreachable_superlink_fails_within_its_retry_bound(tmp_path: Path) -> None:
    with Loopback(tmp_path / "flwr", []) as lb:
        proc = lb.start_supernode(0, {"clients": "0"}, superlink=f"127.0.0.1:{free_port()}")
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("a SuperNode without a SuperLink did not give up within 120 s")
        assert rc != 0
        log = (tmp_path / "flwr" / "supernode0.log").read_text()
        assert "SuperLink" in log or "connect" in log.lower()


def _wait_for_round_reply(log: Path, round_: int, proc: subprocess.Popen[bytes]) -> None:
    """Return once the SuperNode writing ``log`` has sent its reply to round ``round_``'s
    train message (Flower logs "Sent successfully" after the SuperLink took it)."""
    header = f", ROUND {round_}]"
    deadline = time.monotonic() + 400
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        after = text.split(header)
        if any(
            "Sending: train message" in part and "Sent successfully" in part for part in after[1:]
        ):
            return
        assert proc.poll() is None, "the run ended before the site replied"
        assert time.monotonic() < deadline, f"no reply to round {round_} in {log}"
        time.sleep(0.01)


def test_supernode_killed_after_round_1_round_2_completes_with_the_survivor(tmp_path: Path) -> None:
    config = _write(tmp_path / "exp.yaml", _raw())
    out = tmp_path / "dep"
    rounds = seed_dir(out, "dpsgd", SEED) / "rounds.jsonl"
    with Loopback(tmp_path / "flwr", [{"clients": "0"}, {"clients": "1"}]) as lb:
        # the deadline must exceed a live site's step (a warm site's: no process start per
        # message; seconds on a loaded 2-core machine), and round 2 waits it out
        rc = _run_config(config, out, **{"round-timeout": 30.0})
        args = [lb.flwr, "run", str(lb.app), "loop", "--run-config", lb.write_run_config(rc)]
        proc = subprocess.Popen(
            [*args, "--stream"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=lb.env,
            cwd=lb.workdir,
        )
        # site 1 disappears as soon as its round-1 reply is on the SuperLink: long before it
        # could answer round 2 (which needs site 0's reply, an aggregation and a step)
        _wait_for_round_reply(tmp_path / "flwr" / "supernode1.log", 1, proc)
        lb.kill_supernode(1)
        output, _ = proc.communicate(timeout=400)
    assert (seed_dir(out, "dpsgd", SEED) / "final.json").exists(), output[-3000:]
    recs = [json.loads(x) for x in rounds.read_text().splitlines()]
    assert [r["participants"] for r in recs] == [[0, 1], [0]], recs
    (lost,) = recs[1]["rejected"]
    assert lost["client"] == 1 and lost["reason"] == "lost in transit"
    assert "within 30 s" in lost["detail"] or "failed" in lost["detail"]
    final = json.loads((seed_dir(out, "dpsgd", SEED) / "final.json").read_text())
    eps = final["privacy"]["epsilon_per_client"]
    assert eps["0"] > eps["1"]  # site 1 released once, site 0 twice
