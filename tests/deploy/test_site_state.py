"""A site's client steps on its own disk (:mod:`geofl.deploy.sitestate`), without a network:
which saved step a restore uses, what it refuses, what pruning keeps, and a site that
starts a new Flower run (empty context state) after a resume continuing exactly as a site
that never stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import tiny_raw

pytest.importorskip("flwr")

from flwr.app import RecordDict

from geofl.client.state import ClientState, StateSpec
from geofl.deploy.setup import load_setup
from geofl.deploy.site import Site
from geofl.deploy.sitestate import SiteStateDir, run_key
from geofl.deploy.wire import decode_reply, decode_request, encode_request
from geofl.engine.components import build_components
from geofl.errors import BudgetExhaustedError, DeployError
from geofl.update import ClientDirectives

SPECS = {"c": StateSpec((3,), 0.0), "clip": StateSpec((1,), 1.0)}


def _step(r: int) -> ClientState:
    """Round r's staged state: c = [r, r, r], clip = [10 r], r ledger events."""
    events = tuple({"mechanism": "gaussian", "noise_multiplier": float(i)} for i in range(r))
    return ClientState({"c": torch.full((3,), float(r)), "clip": torch.tensor([10.0 * r])}, events)


def _disk(tmp_path: Path, rounds: list[int], flower_run: int = 7) -> SiteStateDir:
    disk = SiteStateDir(tmp_path, run_key({"model": "x", "seed": "3"}), SPECS)
    for r in rounds:
        disk.save(0, r, _step(r), flower_run)
    return disk


def test_restore_takes_tensors_of_the_admitted_step_and_the_newest_ledger(
    tmp_path: Path,
) -> None:
    disk = _disk(tmp_path, [2, 4, 5, 6])
    # checkpoint after round 5: round 6 belongs to a round it does not cover
    st = disk.restore(0, admitted=2, checkpoint=5, ledger=5, flower_run=8, current=6)
    assert st.tensors["c"].tolist() == [2.0, 2.0, 2.0] and st.tensors["clip"].tolist() == [20.0]
    assert len(st.dp_events) == 5  # round 5's step was not admitted, but it released
    assert disk.rounds(0) == [2, 4, 5]  # round 6's step (another Flower run) dropped
    fresh = disk.restore(0, admitted=0, checkpoint=1, ledger=0, flower_run=8, current=2)
    assert fresh.tensors["c"].tolist() == [0.0] * 3 and fresh.tensors["clip"].tolist() == [1.0]
    assert fresh.dp_events == () and disk.rounds(0) == []


def test_steps_of_this_flower_run_after_the_checkpoint_stay_usable(tmp_path: Path) -> None:
    disk = _disk(tmp_path, [1, 3])
    disk.save(0, 4, _step(4), flower_run=9)
    st = disk.restore(0, admitted=4, checkpoint=1, ledger=4, flower_run=9, current=5)
    assert st.tensors["c"].tolist() == [4.0] * 3
    assert disk.rounds(0) == [1, 4]  # round 3 was another run's, after the checkpoint


def test_restore_refuses_a_missing_step_or_a_short_ledger_in_one_line(tmp_path: Path) -> None:
    disk = _disk(tmp_path, [1])
    with pytest.raises(DeployError) as err:
        disk.restore(0, admitted=3, checkpoint=3, ledger=3, flower_run=8, current=4)
    msg = str(err.value)
    assert "\n" not in msg and "client 0: no saved state of its round-3 step" in msg
    assert "state-dir" in msg
    with pytest.raises(DeployError, match="has 1 events, the server's 2"):
        disk.restore(0, admitted=1, checkpoint=3, ledger=2, flower_run=8, current=4)


def test_prune_keeps_the_admitted_step_the_newest_before_now_and_later_ones(
    tmp_path: Path,
) -> None:
    disk = _disk(tmp_path, [1, 2, 3, 5, 6, 8])
    disk.prune(0, admitted=2, current=6)
    assert disk.rounds(0) == [2, 5, 6, 8]


def test_a_damaged_step_is_one_line(tmp_path: Path) -> None:
    disk = _disk(tmp_path, [1])
    (disk.path / "client-0" / "round-1.pt").write_bytes(b"not a step")
    with pytest.raises(DeployError, match=r"round-1\.pt is damaged"):
        disk.load(0, 1)


def test_a_site_in_a_new_flower_run_continues_like_one_that_never_stopped(
    tmp_path: Path,
) -> None:
    raw = tiny_raw(federation={"num_clients": 2, "rounds": 3})
    raw["methods"] = [
        {
            "name": "scaffold-dp",
            "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
            "algorithm": {"name": "scaffold"},
            "trainer": {"name": "dp_sgd", "noise_multiplier": 1.0, "adaptive_clip": {}},
        }
    ]
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    setup = load_setup(cfg, None, None, "seeded")  # a rerun step repeats its noise
    comps = build_components(setup.cfg, setup.method, setup.seed, setup.data, setup.partition)
    params = comps.workspace.snapshot()

    def ask(site: Site, state: RecordDict, r: int, admitted: int, run: int, **kw: int) -> bytes:
        d = ClientDirectives(r, 0, {}, comps.strategy.configure(r, [0]).payload)
        req = decode_request(encode_request(params, d, "{}", admitted, **kw))
        res = decode_reply(site.train(req, state, run))
        assert not isinstance(res, BudgetExhaustedError)
        return res.update.delta.numpy().tobytes() + repr(res.state.dp_events).encode()

    # never stopped: rounds 1-3 in one Flower run, every upload admitted
    a, sa = Site(setup, [0], tmp_path / "a"), RecordDict()
    want = [ask(a, sa, r, r - 1, 1) for r in (1, 2, 3)]
    # stopped: round 1, round 2 (its run killed before the server's round-2 checkpoint);
    # the resumed run (a new Flower run, empty context) reruns round 2 from checkpoint 1
    b = Site(setup, [0], tmp_path / "b")
    sb = RecordDict()
    assert ask(b, sb, 1, 0, 1) == want[0]
    ask(b, sb, 2, 1, 1)
    b.check_resume({0: (1, 1)}, 1, 2)
    sb = RecordDict()
    assert ask(b, sb, 2, 1, 2, resume_round=1, ledger_events=1) == want[1]
    assert ask(b, sb, 3, 2, 2, resume_round=1, ledger_events=2) == want[2]
    # a site that lost its state directory refuses the resume in one line
    c = Site(setup, [0], tmp_path / "c")
    with pytest.raises(DeployError, match="client 0: no saved state of its round-1 step"):
        c.check_resume({0: (1, 1)}, 1, 2)
