"""Secure aggregation's settings and refusals (no Flower processes): ``privacy.
secure_aggregation`` is refused for server sides that need individual updates — by
``geofl config validate`` and by ``geofl deploy loopback --secagg`` before anything starts,
one line and exit 2 each — and accepted for the linear ones; a site's SecAgg+ input is the
weighted mean of its clients' updates (hand-checked), never their individual values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, RecordDict
from flwr.common import parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat

from geofl.algorithms.dpftrl import DpFtrlStrategy, FtrlSettings
from geofl.cli import app
from geofl.client.state import ClientState
from geofl.client.step import ClientResult
from geofl.config.load import config_from_raw
from geofl.config.training import SecureAggregationConfig
from geofl.deploy.secagg import (
    SecureSum,
    merge_requests,
    secure_outcome,
    site_sum,
    split_requests,
)
from geofl.deploy.setup import fingerprint, with_secure_aggregation
from geofl.deploy.wire import encode_declined, encode_reply
from geofl.errors import BudgetExhaustedError, ConfigError
from geofl.server.aggregators import AGGREGATORS
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy, UpdateBatch
from geofl.server.tier import FlatTier
from geofl.server.weighting import data_size_weights
from geofl.update import ClientUpdate, UpdateMeta


def _raw(**method: Any) -> dict[str, Any]:
    return {
        "name": "secagg",
        "seeds": [1],
        "data": {"dataset": "synthetic", "params": {"num_samples": 64, "size": 16, "seed": 0}},
        "model": {"name": "small_cnn", "params": {"width": 4, "blocks": 1}},
        "federation": {"num_clients": 4, "rounds": 1},
        "privacy": {"secure_aggregation": True},
        "methods": [{"name": "m", **method}],
    }


REFUSED = [
    ({"aggregator": {"name": "median"}}, "methods.0.aggregator", "median compares"),
    ({"aggregator": {"name": "krum", "num_byzantine": 0}}, "methods.0.aggregator", "krum compares"),
    ({"aggregator": {"name": "trimmed_mean"}}, "methods.0.aggregator", "trimmed"),
    (
        {"algorithm": {"name": "flame"}, "weighting": {"name": "uniform"}},
        "methods.0.algorithm",
        "FLAME clusters",
    ),
    ({"algorithm": {"name": "dual_shield"}}, "methods.0.algorithm", "DUAL-SHIELD"),
    ({"algorithm": {"name": "backdoor_indicator"}}, "methods.0.algorithm", "BackdoorIndicator"),
    ({"algorithm": {"name": "scaffold"}}, "methods.0.algorithm", "SCAFFOLD"),
    ({"weighting": {"name": "consistency"}}, "methods.0.weighting", "consistency weighs"),
    ({"defenses": [{"name": "norm_bound"}]}, "methods.0.defenses", "norm_bound"),
    ({"network": {"name": "lossy", "drop_prob": 0.1}}, "methods.0.network", "lossy"),
]


@pytest.mark.parametrize(("method", "field", "why"), REFUSED)
def test_validate_refuses_server_sides_that_need_individual_updates(
    tmp_path: Path, method: dict[str, Any], field: str, why: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_raw(**method)), encoding="utf-8")
    res = CliRunner().invoke(app, ["config", "validate", str(path)])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and field in line and why in line, line
    assert "secure aggregation" in line


@pytest.mark.parametrize(
    "method",
    [
        {},
        {"algorithm": {"name": "fedprox", "mu": 0.01}},
        {"algorithm": {"name": "fedadam"}, "weighting": {"name": "uniform"}},
        {"trainer": {"name": "dp_sgd", "noise_multiplier": 1.0}},
    ],
)
def test_linear_server_sides_are_accepted(method: dict[str, Any]) -> None:
    cfg = config_from_raw(_raw(**method))
    assert cfg.privacy.secure_aggregation == SecureAggregationConfig()


def test_deploy_secagg_flag_is_refused_before_anything_starts(tmp_path: Path) -> None:
    raw = _raw(aggregator={"name": "median"})
    del raw["privacy"]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["deploy", "loopback", str(path), "--out", str(out), "--secagg"])
    assert res.exit_code == 2, res.output
    assert "methods.0.aggregator: median compares" in res.output
    assert res.output.strip().count("\n") == 0
    assert not out.exists()  # no SuperLink, no SuperNode, nothing written


def test_settings_refuse_a_modulus_without_room() -> None:
    settings = {"quantization_range": 2**30, "modulus_range": 2**30}
    with pytest.raises(ConfigError, match="modulus_range"):
        config_from_raw({**_raw(), "privacy": {"secure_aggregation": settings}})


def test_switching_it_on_enters_the_fingerprint_by_name() -> None:
    raw = _raw()
    del raw["privacy"]
    cfg = config_from_raw(raw)
    on = with_secure_aggregation(cfg, True)
    off, with_it = fingerprint(cfg, cfg.methods[0], 1), fingerprint(on, on.methods[0], 1)
    assert "secure_aggregation" not in off and "secure_aggregation" in with_it
    assert {k: v for k, v in with_it.items() if k != "secure_aggregation"} == off
    median = config_from_raw({**raw, "methods": [{"name": "m", "aggregator": {"name": "median"}}]})
    with pytest.raises(ConfigError, match=r"methods\.0\.aggregator"):
        with_secure_aggregation(median, True)


def _result(k: int, delta: list[float], n: int, loss: float) -> RecordDict:
    hist = np.array([n, 0])
    meta = UpdateMeta(client_id=k, num_samples=n, round=1, train_loss=loss, label_histogram=hist)
    events = ({"mechanism": "gaussian", "noise_multiplier": 2.0},)
    res = ClientResult(ClientUpdate(torch.tensor(delta), meta), ClientState({}, events), {}, 0.5)
    return encode_reply(res)


def test_site_sum_is_the_weighted_mean_and_hides_each_client() -> None:
    """Clients 0 (n=1, Δ=[1, 2], loss 3) and 1 (n=3, Δ=[5, 6], loss 7), data_size: the
    site's vector is (1·[1, 2, 3] + 3·[5, 6, 7]) / 4 = [4, 5, 6] with W = 4; client 2
    declined; the records carry ledgers and ε only."""
    replies = {0: _result(0, [1, 2], 1, 3.0), 1: _result(1, [5, 6], 3, 7.0)}
    replies[2] = encode_declined(2, 1, 9.0, 8.0)
    content = site_sum(replies, 2, "data_size", SecureAggregationConfig())
    fitres = compat.recorddict_to_fitres(content, keep_input=True)
    (vector,) = _arrays(fitres)
    np.testing.assert_allclose(vector, [4.0, 5.0, 6.0])
    assert fitres.num_examples == 4
    assert fitres.metrics.pop("loss_released") is True
    recs = {k: json.loads(str(v)) for k, v in fitres.metrics.items()}
    assert recs["client.2"] == {"declined": True, "epsilon": 9.0, "target": 8.0}
    assert recs["client.0"]["epsilon"] == 0.5 and recs["client.0"]["dp_events"]
    assert all(set(r) <= {"dp_events", "epsilon", "declined", "target"} for r in recs.values())
    uniform = compat.recorddict_to_fitres(
        site_sum(replies, 2, "uniform", SecureAggregationConfig()), keep_input=True
    )
    np.testing.assert_allclose(_arrays(uniform)[0], [3.0, 4.0, 5.0])  # (Δ0 + Δ1) / 2


def _arrays(fitres: Any) -> list[np.ndarray]:
    return list(parameters_to_ndarrays(fitres.parameters))


def test_requests_merge_and_split_per_client() -> None:
    a = RecordDict({"model": ConfigRecord({"x": 1}), "directives": ConfigRecord({"k": 0})})
    b = RecordDict({"model": ConfigRecord({"x": 2}), "directives": ConfigRecord({"k": 11})})
    merged = merge_requests({0: a, 11: b})
    merged["secaggplus_configs"] = ConfigRecord({"stage": "collect_masked_vectors"})
    back = split_requests(merged)
    assert sorted(back) == [0, 11]
    assert back[11].config_records["directives"]["k"] == 11


def test_outcomes_from_what_the_server_learned() -> None:
    sums = SecureSum([])
    sums.mean, sums.answered = np.array([0.5, -0.5, 2.0]), {7}
    records = {
        0: {"dp_events": [{"mechanism": "gaussian", "noise_multiplier": 2.0}], "epsilon": 1.5},
        1: {"declined": True, "epsilon": 9.0, "target": 8.0},
        2: {"error": "client 2 is not hosted here"},
        4: {"dp_events": "not a list"},
    }
    sums.records = {7: {k: json.dumps(r) for k, r in records.items()}}
    ok = secure_outcome(0, 7, 1, sums)
    assert isinstance(ok, ClientResult)
    assert ok.update.delta.tolist() == [0.5, -0.5] and ok.update.meta.train_loss == 2.0
    assert ok.update.meta.num_samples == 1 and ok.update.meta.label_histogram is None
    assert ok.epsilon == 1.5 and len(ok.state.dp_events) == 1
    assert isinstance(secure_outcome(1, 7, 1, sums), BudgetExhaustedError)
    assert "not hosted" in secure_outcome(2, 7, 1, sums).detail  # type: ignore[union-attr]
    assert "dropped out" in secure_outcome(3, 8, 1, sums).detail  # type: ignore[union-attr]
    assert "no well-formed record" in secure_outcome(4, 7, 1, sums).detail  # type: ignore[union-attr]
    sums.answered.add(8)  # node 8 answered, but may not speak for node 7's client 0
    assert "no well-formed record" in secure_outcome(0, 8, 1, sums).detail  # type: ignore[union-attr]
    sums.mean = None
    assert "halted" in secure_outcome(0, 7, 1, sums).detail  # type: ignore[union-attr]


def test_a_kept_loss_or_a_non_finite_update_never_enters_the_sum() -> None:
    """DP-SGD keeps its loss (NaN): the site sends 0 there and says the loss is not
    released; a non-finite Δ is refused by the site, since the server cannot see it."""
    replies = {0: _result(0, [1, 2], 1, float("nan")), 1: _result(1, [5, 6], 3, 7.0)}
    replies[2] = _result(2, [float("inf"), 0], 2, 1.0)
    fitres = compat.recorddict_to_fitres(
        site_sum(replies, 2, "data_size", SecureAggregationConfig()), keep_input=True
    )
    np.testing.assert_allclose(_arrays(fitres)[0], [4.0, 5.0, 0.0])
    assert fitres.metrics["loss_released"] is False
    assert "not 2 finite values" in json.loads(str(fitres.metrics["client.2"]))["error"]
    sums = SecureSum([])
    sums.mean, sums.answered, sums.loss_released = np.array([4.0, 5.0, 0.0]), {3}, False
    sums.records = {3: {0: str(fitres.metrics["client.0"])}}
    res = secure_outcome(0, 3, 1, sums)
    assert isinstance(res, ClientResult) and np.isnan(res.update.meta.train_loss)


def _batch(deltas: torch.Tensor, sizes: list[int]) -> UpdateBatch:
    metas = [UpdateMeta(client_id=k, num_samples=n, round=1) for k, n in enumerate(sizes)]
    return UpdateBatch(deltas, metas, {}, len(sizes))


def test_the_server_steps_on_copies_of_the_mean_as_on_the_updates() -> None:
    """The round loop gives each admitted client the secure mean as its upload: FedAvg's
    data-size mean of K copies of m is m, and DP-FTRL's sum of K copies of the uniform
    mean is Σ_k Δ_k (every ‖Δ_k‖ ≤ C, so ‖m‖ ≤ C and its re-clip changes nothing)."""
    g = torch.Generator().manual_seed(0)
    deltas = torch.randn(3, 5, generator=g) * 0.1
    sizes = [2, 3, 5]
    w = torch.tensor(sizes, dtype=torch.float64) / 10
    mean = (w @ deltas.double()).float()
    tier = FlatTier(data_size_weights, AGGREGATORS.build("mean", {}))
    fedavg = ComposedStrategy(tier, PlainServerOptimizer(1.0))
    params = torch.zeros(5)
    plain = fedavg.aggregate(1, params, _batch(deltas, sizes)).params
    secure = fedavg.aggregate(1, params, _batch(mean.expand(3, 5).clone(), [1, 1, 1])).params
    torch.testing.assert_close(secure, plain)
    s = FtrlSettings(0.0, 1.0, 1.0, 0.0, 3.0, 1, 1e-5)
    ftrl = [DpFtrlStrategy(s, num_clients=3, dim=5, seed=0) for _ in range(2)]
    plain = ftrl[0].aggregate(1, params, _batch(deltas, [1, 1, 1])).params
    uniform = deltas.mean(0).expand(3, 5).clone()
    secure = ftrl[1].aggregate(1, params, _batch(uniform, [1, 1, 1])).params
    torch.testing.assert_close(secure, plain)
