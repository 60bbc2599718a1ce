"""Secret randomness (issue 33, deliverable 1): with ``privacy.randomness: seeded`` the
server knows everything a site's DP-SGD draws from — (seed, round, client) and the config —
so it can replay the site's step on each of two neighbouring datasets and see which one
reproduces the upload exactly (certain membership inference). With ``secure`` (a
deployment's default) no candidate matches. The accounting is the same in both modes, the
seeded site still equals the simulator bit for bit, and DP-FTRL's server noise cannot be
regenerated from the config in secure mode.

Everything runs in process: the site is :class:`geofl.deploy.site.Site` (what a SuperNode
runs), the server's replay is :func:`geofl.client.step.client_step` with the generators of
(seed, round, client) — what the simulator and a seeded site use.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr")

from flwr.app import RecordDict

from geofl.cli import app
from geofl.client.data import ClientData
from geofl.client.state import ClientState
from geofl.client.step import ClientResult, ClientStreams, client_step
from geofl.config.load import load_config
from geofl.deploy.server import check_resumed_randomness
from geofl.deploy.setup import DeploySetup, deploy_randomness, fingerprint, load_setup
from geofl.deploy.site import Site
from geofl.deploy.wire import decode_reply, decode_request, encode_request
from geofl.engine.components import build_program
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError, DeployError
from geofl.rundir import seed_dir
from geofl.update import ClientDirectives
from tests.deploy.test_flower_loopback import SEED as LOOP_SEED
from tests.deploy.test_flower_loopback import _raw as loopback_raw

SEED, CLIENT, ROUND = 3, 1, 1


def _raw(**privacy: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "replay",
        "seeds": [SEED],
        "data": {"dataset": "synthetic", "params": {"num_samples": 160, "size": 16, "seed": 0}},
        "model": {"name": "small_cnn", "params": {"width": 4, "blocks": 1}},
        "train": {"batch_size": 16, "local_steps": 3},
        "federation": {"num_clients": 2, "rounds": 2},
        "methods": [
            {
                "name": "dpsgd",
                "partition": {"name": "iid"},
                "trainer": {"name": "dp_sgd", "noise_multiplier": 10.0, "clip": 1.0},
            }
        ],
    }
    if privacy:
        raw["privacy"] = privacy
    return raw


def _config(tmp_path: Path, **privacy: Any) -> Path:
    path = tmp_path / "replay.yaml"
    path.write_text(yaml.safe_dump(_raw(**privacy)), encoding="utf-8")
    return path


def _without_one_record(data: ClientData) -> ClientData:
    """The neighbouring dataset: ``data`` without its last record."""
    targets = data.targets[:-1]
    hist = np.bincount(targets.numpy(), minlength=len(data.label_histogram))
    inputs = data.inputs[:-1]  # type: ignore[index]
    return replace(data, inputs=inputs, targets=targets, label_histogram=hist)


def _site_upload(setup: DeploySetup, tmp_path: Path) -> tuple[torch.Tensor, torch.Tensor, Site]:
    """The broadcast model and client ``CLIENT``'s round-1 upload from a deployed site
    (what the server sent and received)."""
    site = Site(setup, [CLIENT], tmp_path / "state")
    params = site.workspace.snapshot()
    d = ClientDirectives(ROUND, CLIENT)
    req = decode_request(encode_request(params, d, "{}", 0))
    reply = decode_reply(site.train(req, RecordDict()))
    assert isinstance(reply, ClientResult)
    return params, reply.update.delta, site


def _replay_gaps(
    setup: DeploySetup, site: Site, params: torch.Tensor, received: torch.Tensor
) -> tuple[float, float]:
    """The server's attack: rerun the site's step with the public (seed, round, client)
    generators on the true dataset and on its neighbour; max |replay − received| of each."""
    seeded = setup.cfg.model_copy(
        update={"privacy": setup.cfg.privacy.model_copy(update={"randomness": "seeded"})}
    )
    assert setup.data is not None
    program = build_program(seeded, setup.method, setup.seed, setup.data).program
    true = site.clients[CLIENT]
    gaps = []
    for hypothesis in (true, _without_one_record(true)):
        replay = client_step(
            program,
            params,
            hypothesis,
            ClientState(),
            ClientDirectives(ROUND, CLIENT),
            ClientStreams((setup.seed, "round", ROUND, "client", CLIENT)),
        )
        gaps.append(float((replay.update.delta - received).abs().max()))
    return gaps[0], gaps[1]


def test_replay_attack_identifies_the_dataset_in_seeded_mode(tmp_path: Path) -> None:
    setup = load_setup(_config(tmp_path), None, None, "seeded")
    params, received, site = _site_upload(setup, tmp_path)
    true_gap, other_gap = _replay_gaps(setup, site, params, received)
    assert true_gap == 0.0  # the true dataset reproduces the upload exactly: membership
    assert other_gap > 1e-4


def test_replay_attack_matches_no_candidate_in_secure_mode(tmp_path: Path) -> None:
    setup = load_setup(_config(tmp_path), None, None)  # a deployment's default
    assert setup.cfg.privacy.randomness == "secure"
    params, received, site = _site_upload(setup, tmp_path)
    true_gap, other_gap = _replay_gaps(setup, site, params, received)
    assert true_gap > 1e-4 and other_gap > 1e-4  # neither hypothesis reproduces the upload
    assert 0.2 < true_gap / other_gap < 5.0  # and the true one is no closer than the other


def _step(setup: DeploySetup, state_dir: Path, round_idx: int = ROUND) -> ClientResult:
    """Client ``CLIENT``'s step on a fresh site of ``setup`` (a new process's program)."""
    site = Site(setup, [CLIENT], state_dir)
    program = site.program
    d = ClientDirectives(round_idx, CLIENT)
    streams = ClientStreams((setup.seed, "round", round_idx, "client", CLIENT))
    return client_step(
        program, site.workspace.snapshot(), site.clients[CLIENT], ClientState(), d, streams
    )


def test_secure_noise_differs_between_runs_and_steps_seeded_is_bit_identical(
    tmp_path: Path,
) -> None:
    secure = load_setup(_config(tmp_path), None, None)
    a, b = _step(secure, tmp_path), _step(secure, tmp_path)
    assert not torch.equal(a.update.delta, b.update.delta)  # same config, seed and round
    site = Site(
        secure, [CLIENT], tmp_path / "state"
    )  # one site asked twice for the same round: fresh noise
    params, data = site.workspace.snapshot(), site.clients[CLIENT]
    streams = ClientStreams((SEED, "round", ROUND, "client", CLIENT))
    d = ClientDirectives(ROUND, CLIENT)
    first = client_step(site.program, params, data, ClientState(), d, streams)
    again = client_step(site.program, params, data, ClientState(), d, streams)
    assert not torch.equal(first.update.delta, again.update.delta)
    seeded = load_setup(_config(tmp_path), None, None, "seeded")
    assert torch.equal(_step(seeded, tmp_path).update.delta, _step(seeded, tmp_path).update.delta)


def test_ledger_and_epsilon_are_the_same_in_both_modes(tmp_path: Path) -> None:
    secure = _step(load_setup(_config(tmp_path), None, None), tmp_path)
    seeded = _step(load_setup(_config(tmp_path), None, None, "seeded"), tmp_path)
    assert secure.state.dp_events == seeded.state.dp_events
    assert secure.state.dp_events  # one poisson_gaussian event
    assert secure.epsilon == seeded.epsilon and secure.epsilon is not None


def test_deploy_defaults_to_secure_and_seeded_is_explicit_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = _config(tmp_path)
    with caplog.at_level(logging.WARNING, logger="geofl"):
        assert load_setup(plain, None, None).cfg.privacy.randomness == "secure"
    assert "seeded" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="geofl"):
        setup = load_setup(plain, None, None, "seeded")
    assert setup.cfg.privacy.randomness == "seeded"
    assert "can regenerate and remove them" in caplog.text
    cfg = load_setup(_config(tmp_path, randomness="seeded"), None, None).cfg
    assert cfg.privacy.randomness == "seeded"  # the config's explicit choice
    assert deploy_randomness(cfg, "secure") == "secure"  # an override beats the config
    with pytest.raises(ConfigError, match=r"^randomness: 'sekure' is not a mode"):
        deploy_randomness(cfg, "sekure")


def test_the_mode_is_in_the_fingerprint_by_name(tmp_path: Path) -> None:
    a = load_setup(_config(tmp_path), None, None)
    b = load_setup(_config(tmp_path), None, None, "seeded")
    fa, fb = (fingerprint(s.cfg, s.method, s.seed) for s in (a, b))
    assert (fa["randomness"], fb["randomness"]) == ("secure", "seeded")
    assert {k for k in fa if fa[k] != fb[k]} == {"randomness"}


def _resume_round_2(setup: DeploySetup, tmp_path: Path) -> tuple[ClientResult, ClientResult]:
    """Rounds 1 and 2 of client ``CLIENT`` on a site (Flower run 1), then round 2 again
    after the server resumed from its round-1 checkpoint (Flower run 2, a new site process
    with the same state directory); the first and the resumed round-2 results."""
    params = Site(setup, [CLIENT], tmp_path / "state").workspace.snapshot()

    def ask(site: Site, state: RecordDict, r: int, run: int, **resume: int) -> ClientResult:
        d = ClientDirectives(r, CLIENT)
        req = decode_request(encode_request(params, d, "{}", r - 1, **resume))
        res = decode_reply(site.train(req, state, run))
        assert isinstance(res, ClientResult)
        return res

    first, state = Site(setup, [CLIENT], tmp_path / "state"), RecordDict()
    ask(first, state, 1, run=1)
    before = ask(first, state, 2, run=1)
    restarted = Site(setup, [CLIENT], tmp_path / "state")
    restarted.check_resume({CLIENT: (1, 1)}, 1, 2)  # discovery: checkpoint 1, ledger 1
    after = ask(restarted, RecordDict(), 2, run=2, resume_round=1, ledger_events=1)
    return before, after


def test_seeded_resume_replays_the_lost_round_and_counts_it_once(tmp_path: Path) -> None:
    before, after = _resume_round_2(load_setup(_config(tmp_path), None, None, "seeded"), tmp_path)
    assert torch.equal(before.update.delta, after.update.delta)  # the same release again
    assert len(after.state.dp_events) == 2  # rounds 1 and 2


def test_secure_resume_draws_fresh_noise_and_counts_every_release(tmp_path: Path) -> None:
    before, after = _resume_round_2(load_setup(_config(tmp_path), None, None), tmp_path)
    assert not torch.equal(before.update.delta, after.update.delta)  # no replay of old noise
    # round 1, the lost round 2 (released before the restart) and the rerun round 2
    assert len(after.state.dp_events) == 3
    assert after.state.dp_events[1] == after.state.dp_events[2] == before.state.dp_events[1]


def test_resuming_a_run_directory_in_the_other_mode_is_refused(tmp_path: Path) -> None:
    check_resumed_randomness(tmp_path, "secure")  # nothing to resume: nothing to check
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(_raw()), encoding="utf-8")
    check_resumed_randomness(tmp_path, "seeded")  # written before the modes: seeded
    with pytest.raises(DeployError, match=r"run with privacy.randomness seeded, this resume "):
        check_resumed_randomness(tmp_path, "secure")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(_raw(randomness="secure")))
    check_resumed_randomness(tmp_path, "secure")
    with pytest.raises(DeployError, match="resume with randomness secure"):
        check_resumed_randomness(tmp_path, "seeded")


def test_loopback_cli_warns_on_seeded_and_refuses_an_unknown_mode(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    runner = CliRunner()
    args = ["deploy", "loopback", str(cfg), "--out", str(tmp_path / "o"), "--sites", "9"]
    res = runner.invoke(app, [*args, "--randomness", "seeded"])
    assert res.exit_code == 2  # too many sites: refused before anything starts ...
    assert "warning: privacy.randomness is seeded" in res.stderr  # ... after the warning
    res = runner.invoke(app, [*args, "--randomness", "sekure"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "error: randomness: 'sekure' is not a mode; use one of ['seeded', 'secure']"
    ]
    assert "warning" not in runner.invoke(app, args).stderr  # default secure: no warning


@pytest.mark.slow
@pytest.mark.deploy  # Flower processes
def test_loopback_deployment_is_secure_by_default_and_records_it(tmp_path: Path) -> None:
    """``geofl deploy loopback`` without ``--randomness``: server and sites agree on secure
    (the fingerprint carries it), the run records it, ε equals the seeded simulation's
    (randomness does not change accounting) and the model does not (fresh noise)."""
    raw = loopback_raw()
    raw.pop("privacy")  # unset: seeded in simulation, secure in deployment
    raw["federation"]["rounds"] = 1
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    sim = seed_dir(run_experiment(load_config(config), tmp_path / "sim"), "dpsgd", LOOP_SEED)
    res = CliRunner().invoke(
        app, ["deploy", "loopback", str(config), "--out", str(tmp_path / "dep"), "--timeout", "900"]
    )
    assert res.exit_code == 0, res.output[-3000:]
    assert "warning" not in res.stderr
    dep = seed_dir(tmp_path / "dep", "dpsgd", LOOP_SEED)
    recorded = yaml.safe_load((tmp_path / "dep" / "config.yaml").read_text())
    assert recorded["privacy"]["randomness"] == "secure"
    fa = json.loads((sim / "final.json").read_text())
    fb = json.loads((dep / "final.json").read_text())
    assert (fa["privacy"]["randomness"], fb["privacy"]["randomness"]) == ("seeded", "secure")
    assert fb["privacy"]["epsilon_per_client"] == fa["privacy"]["epsilon_per_client"]
    pa = torch.load(sim / "checkpoint.pt", weights_only=False)["params"]
    pb = torch.load(dep / "checkpoint.pt", weights_only=False)["params"]
    assert not torch.equal(pa, pb)
