"""What crosses between ServerApp and sites, and the state a site keeps — without a
network: the records round-trip bit-exactly, a site's step equals the simulator's client
step, and staged state is committed or forgotten on the server's acknowledgement as the
simulator's store does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tests.conftest import tiny_raw

pytest.importorskip("flwr")

from flwr.app import RecordDict

from geofl.client.step import ClientStreams, client_step
from geofl.deploy.setup import fingerprint, fingerprint_mismatch, load_setup
from geofl.deploy.site import Site, parse_clients
from geofl.deploy.wire import (
    decode_reply,
    decode_request,
    encode_declined,
    encode_request,
)
from geofl.engine.components import build_components
from geofl.errors import BudgetExhaustedError, DeployError
from geofl.update import ClientDirectives


@pytest.fixture(scope="module")
def scaffold_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tiny_raw()
    raw["methods"] = [
        {
            "name": "scaffold",
            "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
            "algorithm": {"name": "scaffold"},
        }
    ]
    path = tmp_path_factory.mktemp("cfg") / "scaffold.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_request_round_trips_bit_exactly() -> None:
    params = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    payload = {"control": torch.randn(1000, generator=torch.Generator().manual_seed(1))}
    d = ClientDirectives(4, 2, {"lr": 0.1, "clip_bound": 3}, payload)
    req = decode_request(encode_request(params, d, "fp", 3, resume_round=2, ledger_events=5))
    assert torch.equal(req.params, params)
    assert torch.equal(req.directives.payload["control"], payload["control"])
    assert (req.directives.round, req.directives.client_id) == (4, 2)
    assert dict(req.directives.extra) == {"lr": 0.1, "clip_bound": 3}
    assert (req.fingerprint, req.admitted_round) == ("fp", 3)
    assert (req.resume_round, req.ledger_events) == (2, 5)


def test_declined_round_reads_as_the_budget_error() -> None:
    err = decode_reply(encode_declined(1, 5, 8.25, 8.0))
    assert isinstance(err, BudgetExhaustedError)
    assert str(err) == str(BudgetExhaustedError(1, 8.25, 8.0))


def test_parse_clients_and_its_errors() -> None:
    assert parse_clients("0, 2-4", 5) == [0, 2, 3, 4]
    with pytest.raises(DeployError, match=r"clients='7'.*\[0, 4\)"):
        parse_clients("7", 4)
    with pytest.raises(DeployError, match="expected ids"):
        parse_clients("a", 4)


def test_site_step_equals_the_simulator_and_state_follows_acks(
    scaffold_config: Path, tmp_path: Path
) -> None:
    setup = load_setup(scaffold_config, None, None, "seeded")  # the simulator's generators
    site = Site(setup, [1], tmp_path / "state")
    comps = build_components(setup.cfg, setup.method, setup.seed, setup.data, setup.partition)
    params = comps.workspace.snapshot()
    plan = comps.strategy.configure(1, [1])
    d = ClientDirectives(1, 1, {}, plan.payload)
    fp = "{}"
    state = RecordDict()
    reply = site.train(decode_request(encode_request(params, d, fp, 0)), state)
    got = decode_reply(reply)
    want = client_step(
        comps.program,
        params,
        comps.clients[1],
        comps.store.get(1),
        d,
        ClientStreams((setup.seed, "round", 1, "client", 1)),
    )
    assert not isinstance(got, BudgetExhaustedError)
    assert torch.equal(got.update.delta, want.update.delta)
    for name, t in want.update.tensors.items():
        assert torch.equal(got.update.tensors[name], t)
    np.testing.assert_array_equal(got.update.meta.label_histogram, want.update.meta.label_histogram)

    def committed() -> np.ndarray:
        (arr,) = state.array_records["geofl.state.1"].values()
        return np.asarray(arr.numpy())

    # staged, not committed, until the next request names round 1 as admitted
    assert not np.any(committed())  # c_k = 0 as before the first step
    d2 = ClientDirectives(2, 1, {}, plan.payload)
    site.train(decode_request(encode_request(params, d2, fp, 0)), state)
    assert not np.any(committed())  # round 1 not admitted: its c_k forgotten
    d3 = ClientDirectives(3, 1, {}, plan.payload)
    site.train(decode_request(encode_request(params, d3, fp, 2)), state)
    staged2 = site.disk.load(1, 2)[0].tensors
    (name,) = staged2.keys()
    assert np.any(committed() != 0)  # round 2 admitted: its c_k committed
    np.testing.assert_array_equal(committed(), staged2[name].numpy())


def test_fingerprint_names_the_sections_that_differ(scaffold_config: Path) -> None:
    setup = load_setup(scaffold_config, None, None)
    a = fingerprint(setup.cfg, setup.method, setup.seed)
    other = setup.cfg.model_copy(update={"model": setup.cfg.model.model_copy(update={"name": "x"})})
    b = fingerprint(other, setup.method, setup.seed + 1)
    assert fingerprint_mismatch(a, a) == []
    assert fingerprint_mismatch(a, b) == ["model", "seed"]
