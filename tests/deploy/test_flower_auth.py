"""SuperNode authentication on a real loopback deployment (Flower 1.42): the SuperLink runs
with TLS and ``--enable-supernode-auth``, each site's public key is registered with
``flwr supernode register``, and the SuperNodes authenticate with their private keys. A
SuperNode whose key was never registered, and one without a key, are refused when they
connect (they exit with Flower's one-line reason) and the run completes with the two
registered sites — the README's two-site walkthrough, on one machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from geofl.deploy.certs import write_node_key
from geofl.deploy.loopback import Loopback
from geofl.rundir import seed_dir
from tests.deploy.test_flower_loopback import SEED, _raw, _run_config, _write

pytestmark = pytest.mark.slow


def _refused(lb: Loopback, proc: subprocess.Popen[bytes], log: Path) -> str:
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a SuperNode the SuperLink should refuse still runs after 120 s: {log}")
    assert rc != 0
    return log.read_text(errors="replace")


def test_only_registered_supernodes_join(tmp_path: Path) -> None:
    raw = _raw()
    raw["federation"]["rounds"] = 1
    config = _write(tmp_path / "exp.yaml", raw)
    out = tmp_path / "dep"
    work = tmp_path / "flwr"
    with Loopback(work, [{"clients": "0"}, {"clients": "1"}], auth=True) as lb:
        # a third site claiming client 1: were it admitted, the run would stop on a client
        # hosted twice
        stranger = write_node_key(work / "keys", "stranger")  # never registered
        log = _refused(lb, lb.start_supernode(2, {"clients": "1"}, key=stranger.private),
                       work / "supernode2.log")  # fmt: skip
        assert "Failed to activate SuperNode" in log, log[-2000:]
        keyless = lb.start_supernode(3, {"clients": "1"}, key=None)
        log = _refused(lb, keyless, work / "supernode3.log")
        assert "must be registered via the CLI" in log, log[-2000:]
        output = lb.run(_run_config(config, out), timeout=600)
        listed = subprocess.run(
            [lb.flwr, "supernode", "list", "loop", "--format", "json"],
            capture_output=True, timeout=60, env=lb.env, cwd=lb.workdir,
        )  # fmt: skip
    run_dir = seed_dir(out, "dpsgd", SEED)
    assert (run_dir / "final.json").exists(), output[-3000:]
    (rec,) = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert rec["participants"] == [0, 1] and rec["rejected"] == []
    text = listed.stdout.decode()
    nodes = json.loads(text[text.index("{") :])["nodes"]
    assert len(nodes) == 2, nodes
