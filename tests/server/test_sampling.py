"""Client samplers (fixed, Poisson, availability trace) and empty Poisson rounds in a run."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError
from geofl.records import RoundStatus, read_rounds
from geofl.rng import numpy_generator
from geofl.rundir import seed_dir
from geofl.server.sampling import SAMPLERS, ClientSampler, load_trace


def _rng(seed: int, r: int) -> np.random.Generator:
    return numpy_generator(seed, "round", r, "participation")


def _fixed(q: float) -> ClientSampler:
    return SAMPLERS.build("fixed", {}, participation=q)


@pytest.mark.parametrize(("k", "q"), [(10, 0.3), (7, 0.5), (100, 0.13), (5, 0.01)])
def test_fixed_sampler_is_the_historical_draw(k: int, q: float) -> None:
    sampler = _fixed(q)
    m = max(1, round(q * k))
    for seed in (1, 42):
        for r in range(1, 8):
            historical = sorted(int(c) for c in _rng(seed, r).choice(k, size=m, replace=False))
            cohort = sampler(k, r, _rng(seed, r))
            assert cohort.clients == historical, (seed, r)
            assert cohort.scheme == "fixed" and cohort.rate == pytest.approx(m / k)


def test_fixed_sampler_with_everyone() -> None:
    cohort = _fixed(1.0)(6, 3, _rng(1, 3))
    assert cohort.clients == list(range(6)) and cohort.rate == 1.0


def test_poisson_inclusion_rate_is_p() -> None:
    p, k, rounds = 0.1, 50, 400
    sampler = SAMPLERS.build("poisson", {"rate": p}, participation=1.0)
    counts = np.zeros(k)
    sizes = []
    for r in range(1, rounds + 1):
        cohort = sampler(k, r, _rng(7, r))
        assert cohort.clients == sorted(set(cohort.clients))
        assert cohort.scheme == "poisson" and cohort.rate == p
        counts[cohort.clients] += 1
        sizes.append(len(cohort.clients))
    # Σ inclusions ~ Binomial(20000, 0.1): mean 2000, sd ≈ 42; allow 5 sd
    assert abs(counts.sum() - p * k * rounds) < 5 * np.sqrt(k * rounds * p * (1 - p))
    # every client is sampled at about rate p (Binomial(400, 0.1): sd 6)
    assert counts.min() > 10 and counts.max() < 70
    assert len(set(sizes)) > 3  # the cohort size varies
    # the same key gives the same draw
    assert sampler(k, 5, _rng(7, 5)).clients == sampler(k, 5, _rng(7, 5)).clients


def test_poisson_cohort_can_be_empty() -> None:
    sampler = SAMPLERS.build("poisson", {"rate": 0.05}, participation=1.0)
    cohorts = [sampler(4, r, _rng(3, r)).clients for r in range(1, 21)]
    assert [] in cohorts  # P(empty) = 0.95⁴ ≈ 0.81 per round
    assert any(cohorts)


def _trace(tmp_path: Path, data: object, name: str = "trace.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_trace_sampler_cycles_through_its_rounds(tmp_path: Path) -> None:
    path = _trace(tmp_path, {"rounds": [[2, 0, 2], [1], []]})
    sampler = SAMPLERS.build("trace", {"path": str(path)}, participation=1.0)
    got = [sampler(4, r, _rng(1, r)).clients for r in range(1, 8)]
    # round r uses entry (r − 1) mod 3; ids are de-duplicated and sorted
    assert got == [[0, 2], [1], [], [0, 2], [1], [], [0, 2]]
    cohort = sampler(4, 1, _rng(1, 1))
    assert cohort.scheme == "trace" and cohort.rate is None


def test_trace_sampler_fraction_thins_the_available(tmp_path: Path) -> None:
    path = _trace(tmp_path, {"rounds": [[0, 1, 2, 3, 4, 5], [3]]})
    sampler = SAMPLERS.build("trace", {"path": str(path), "fraction": 0.5}, participation=1.0)
    for r in (1, 3, 5):
        got = sampler(8, r, _rng(2, r)).clients
        assert len(got) == 3 and set(got) <= set(range(6)) and got == sorted(got)
        assert got == sampler(8, r, _rng(2, r)).clients
    assert sampler(8, 2, _rng(2, 2)).clients == [3]  # max(1, round(0.5 · 1)) = 1


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"round": [[0]]}),  # misspelt key
        json.dumps({"rounds": []}),  # no rounds
        json.dumps({"rounds": [1, 2]}),  # entries are not lists
        json.dumps({"rounds": [["a"]]}),  # not client ids
        json.dumps([[0, 1]]),  # not an object
    ],
)
def test_bad_trace_file_is_a_config_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=r"^federation\.sampling\.path: ") as err:
        load_trace(path)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        SAMPLERS.build("trace", {"path": str(path)}, participation=1.0)


def test_missing_trace_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read availability trace"):
        load_trace(tmp_path / "nope.json")


def test_trace_naming_unknown_clients_fails_at_load(tmp_path: Path) -> None:
    trace = _trace(tmp_path, {"rounds": [[0, 1], [9]]})
    raw = tiny_raw()
    raw["federation"]["sampling"] = {"name": "trace", "path": str(trace)}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    with pytest.raises(
        ConfigError, match=r"^federation\.sampling\.path: trace names clients \[9\]"
    ):
        load_config(cfg)


def test_empty_poisson_rounds_are_logged_no_ops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = tiny_raw()
    raw["methods"] = [raw["methods"][1]]  # fedavg only
    raw["federation"].update(rounds=4, sampling={"name": "poisson", "rate": 0.05})
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(cfg_path)
    with caplog.at_level("WARNING", logger="geofl"):
        run = run_experiment(cfg, tmp_path / "run")
    records = read_rounds(seed_dir(run, "fedavg", 3) / "rounds.jsonl")
    assert [r.round for r in records] == [1, 2, 3, 4]
    statuses = [r.status for r in records]
    # seed 3, 4 clients, p = 0.05: cohort sizes [0, 1, 0, 0] (see the sampler's own draws)
    assert RoundStatus.AGGREGATED in statuses, statuses
    # an empty round after a real one, so the hash comparison below means something
    assert any(r.status is RoundStatus.EMPTY_COHORT for r in records[1:]), statuses
    for prev, rec in itertools.pairwise(records):
        if rec.status is RoundStatus.EMPTY_COHORT:
            assert rec.model_sha256 == prev.model_sha256, rec.round
            assert rec.cohort == [] and rec.participants == [] and rec.weights == []
            assert rec.bytes_up == 0 and rec.bytes_down == 0 and rec.train_loss is None
            assert rec.test == prev.test  # the unchanged model evaluates the same
    for rec in records:
        assert rec.sampling == {"scheme": "poisson", "rate": 0.05}
        assert (rec.status is RoundStatus.EMPTY_COHORT) == (rec.cohort == [])
    assert "the sampler drew no client" in caplog.text
