"""Where generators come from (:mod:`geofl.rng`, ``privacy.randomness``): the seeded source
is the public derivation, the secret one is keyed by 256 bits nobody else holds — and
DP-FTRL's tree noise in secure mode cannot be regenerated from the config, yet a resumed
server releases the same node noise (its secret rides in the checkpoint state), and a
checkpoint of the other mode is refused."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from geofl.algorithms.dpftrl import DpFtrlStrategy, FtrlSettings
from geofl.client.state import ClientState, ClientStateStore
from geofl.config.schema import ExperimentConfig
from geofl.engine.records.final import privacy_summary
from geofl.errors import ConfigError
from geofl.privacy.tree import prefix_noise
from geofl.rng import SEEDED, SecretSource, derive_seed, random_source

N, D, SEED = 6, 40, 11
SETTINGS = FtrlSettings(
    noise_multiplier=1.0,
    clip=1.0,
    server_lr=0.5,
    momentum=0.0,
    expected_clients=3.0,
    tree_rounds=4,
)


def test_seeded_source_is_the_public_derivation_secret_sources_are_not() -> None:
    assert SEEDED.seed(1, "round", 2) == derive_seed(1, "round", 2)
    key = bytes(range(32))
    a, b = SecretSource(key), SecretSource(key)
    assert a.seed(1, "round", 2) == b.seed(1, "round", 2)  # a key determines its draws
    assert a.seed(1, "round", 2) != SEEDED.seed(1, "round", 2)
    assert SecretSource.fresh().seed(1) != SecretSource.fresh().seed(1)
    assert 0 <= a.seed("x") < 2**63
    assert "hidden" in repr(a) and key.hex() not in repr(a)
    assert a.for_step().seed(1) != a.for_step().seed(1)  # every client step: a new key
    assert SEEDED.for_step() is SEEDED
    with pytest.raises(ValueError, match="32 bytes"):
        SecretSource(b"short")
    assert random_source(None) is SEEDED and random_source("seeded") is SEEDED
    assert random_source("secure").mode == "secure"


def _strategy(source: object = SEEDED) -> DpFtrlStrategy:
    return DpFtrlStrategy(SETTINGS, num_clients=N, dim=D, seed=SEED, source=source)  # type: ignore[arg-type]


def test_secure_dp_ftrl_noise_is_not_the_configs_and_resumes_with_its_secret() -> None:
    server = _strategy(random_source("secure"))
    noise = server.released_noise(3)
    # what a client holding the config computes: the seeded tree noise of (seed, "dp_ftrl")
    std = SETTINGS.noise_multiplier * SETTINGS.clip
    regenerated = prefix_noise(D, std=std, keys=(SEED, "dp_ftrl"), tree=0, leaf=3)
    assert torch.equal(_strategy().released_noise(3), regenerated)  # seeded: removable
    assert (noise - regenerated).abs().max() > 0.5  # secure: not the config's noise
    assert not torch.equal(noise, _strategy(random_source("secure")).released_noise(3))
    resumed = _strategy(random_source("secure"))  # a restarted server: a new secret ...
    resumed.load_state_dict(server.state_dict())  # ... replaced by the checkpoint's
    assert torch.equal(resumed.released_noise(3), noise)
    assert resumed.privacy_summary()["randomness"] == "secure"


def test_resuming_dp_ftrl_in_the_other_mode_is_refused() -> None:
    secure, seeded = _strategy(random_source("secure")), _strategy()
    with pytest.raises(ConfigError, match=r"^privacy.randomness: .*is secure but this run is"):
        seeded.load_state_dict(secure.state_dict())
    with pytest.raises(ConfigError, match=r"^privacy.randomness: .*is seeded but this run is"):
        _strategy(random_source("secure")).load_state_dict(seeded.state_dict())


def test_final_privacy_records_the_mode(tmp_path: Path) -> None:
    event = {"mechanism": "gaussian", "noise_multiplier": 2.0}
    store = ClientStateStore(2, {})
    store.stage(0, ClientState({}, (event,)))
    store.commit()
    base = {"name": "x", "data": {"dataset": "synthetic"}, "methods": [{"name": "fedavg"}]}
    for randomness, want in ((None, "seeded"), ("secure", "secure"), ("seeded", "seeded")):
        raw = dict(base, privacy={"randomness": randomness}) if randomness else base
        cfg = ExperimentConfig.model_validate(raw)
        summary = privacy_summary(cfg, store, 2, tmp_path)
        assert summary is not None and summary["randomness"] == want
        assert math.isfinite(summary["epsilon_max"])


def test_an_unknown_mode_is_one_config_error() -> None:
    raw = {"name": "x", "data": {"dataset": "synthetic"}, "methods": [{"name": "fedavg"}]}
    with pytest.raises(ValueError, match="randomness"):
        ExperimentConfig.model_validate({**raw, "privacy": {"randomness": "random"}})
    dumped = ExperimentConfig.model_validate(raw).model_dump(mode="json")
    assert "randomness" not in dumped["privacy"]  # unset: old run directories hash the same
