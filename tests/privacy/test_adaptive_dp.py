"""ADP (004 §2.7, Eq. 10–13) with hand-checkable numbers: g(r, t), σ, C(t), composition."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from dp_accounting import GaussianDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from tests.conftest import tiny_raw
from typer.testing import CliRunner

import geofl.algorithms.dual_shield  # noqa: F401  (registers dual_shield)
from geofl.algorithms.dual_shield import DualShieldParams, DualShieldStrategy
from geofl.cli import app
from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS
from geofl.config.load import load_config
from geofl.errors import ConfigError
from geofl.privacy.adaptive import (
    REPUTATION_KEY,
    ROUNDS_KEY,
    adp_epsilon,
    adp_sigma,
    budget_multiplier,
    public_clip,
    public_norm_key,
    public_norms,
    table6_epsilons,
)
from geofl.rng import torch_generator
from geofl.server.aggregators import build_mean
from geofl.server.strategy import UpdateBatch
from geofl.server.tier import FlatTier
from geofl.server.weighting import uniform_weights
from geofl.update import ClientDirectives, UpdateMeta

#: √(2 ln(1.25/δ)) at δ = 1e-5: √(2 · 11.7361) = 4.84480.
ROOT = math.sqrt(2.0 * math.log(1.25e5))


# ------------------------------------------------------------------------ Eq. 11–12
@pytest.mark.parametrize(("r", "end"), [(0.2, 0.90), (0.5, 1.125), (0.9, 1.425)])
def test_g_end_values_are_figure_2s(r: float, end: float) -> None:
    # Fig. 2's 1.12 and 1.42 are 1.125 and 1.425 rounded down; 0.6·1.5 = 0.9 exactly
    assert budget_multiplier(r, 40, 40) == pytest.approx(end, abs=1e-12)
    assert round(budget_multiplier(r, 40, 40), 2) == pytest.approx(end, abs=0.0051)


def test_g_spans_half_to_one_and_a_half() -> None:
    assert budget_multiplier(0.0, 0, 10) == 0.5 and budget_multiplier(1.0, 10, 10) == 1.5
    assert budget_multiplier(0.5, 5, 10) == pytest.approx(0.75 * 1.25)


def test_sigma_by_hand() -> None:
    # C = 2, ε_round = 1, r = 0.5, t = T: ε_j = 1.125, σ = 2·2/1.125 · 4.8448 = 17.2260
    eps = adp_epsilon(1.0, 0.5, 10, 10)
    assert eps == pytest.approx(1.125)
    assert adp_sigma(2.0, eps, 1e-5) == pytest.approx(4.0 / 1.125 * ROOT)
    assert adp_sigma(2.0, eps, 1e-5) == pytest.approx(17.2260, abs=1e-4)


# ------------------------------------------------------------------------------ Eq. 10
def test_clip_is_the_quantile_of_the_window_of_public_norms() -> None:
    extra = {public_norm_key(i + 1): n for i, n in enumerate([4.0, 1.0, 2.0, 100.0, 100.0])}
    norms = public_norms(extra, 3)  # the 3 most recent: 4, 1, 2
    assert norms == [4.0, 1.0, 2.0]
    assert public_clip(norms, 0.5, 9.0) == 2.0  # median
    assert public_clip(norms, 0.75, 9.0) == 3.0  # sorted 1, 2, 4: 2 + ½ (4 − 2)
    assert public_clip(norms, 1.0, 9.0, clip_max=3.5) == 3.5
    assert public_clip(public_norms({}, 3), 0.5, 9.0) == 9.0  # round 1: clip_init
    assert public_norms(extra, 1) == [4.0]


# ------------------------------------------------------------------- the release step
def _directives(r: float, round_idx: int, norms: list[float]) -> ClientDirectives:
    extra: dict[str, Any] = {REPUTATION_KEY: r, ROUNDS_KEY: 10.0}
    extra.update({public_norm_key(i + 1): n for i, n in enumerate(norms)})
    return ClientDirectives(round_idx, 3, extra)


def test_step_clips_noises_and_reports_z() -> None:
    step = RELEASE_STEPS.build("adaptive_dp", {"epsilon_round": 2.0, "window": 3})
    data = ClientData(3, torch.zeros(2, 1), torch.zeros(2, dtype=torch.long), np.ones(1))
    delta = torch.full((40_000,), 0.05)  # ‖Δw‖ = 10 > C = 2 → clipped
    d = _directives(0.5, 10, [2.0, 1.0, 3.0, 50.0])
    out, log = step(delta, data=data, directives=d, generator=torch_generator(1, "release"))
    eps = 2.0 * 1.125
    assert (log["clip"], log["clipped"], log["epsilon"]) == (2.0, True, pytest.approx(eps))
    assert log["sigma"] == pytest.approx(4.0 / eps * ROOT)
    assert log["dp_event"] == {
        "mechanism": "gaussian",
        "noise_multiplier": pytest.approx(ROOT / eps),
    }
    noise = out - delta * (2.0 / 10.0)
    assert float(noise.std()) == pytest.approx(log["sigma"], rel=0.02)
    again, _ = step(delta, data=data, directives=d, generator=torch_generator(1, "release"))
    assert torch.equal(out, again)


def test_step_without_a_dual_shield_server_fails_in_one_line() -> None:
    step = RELEASE_STEPS.build("adaptive_dp", {})
    data = ClientData(0, torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), np.ones(1))
    with pytest.raises(ValueError, match="dual_shield"):
        step(torch.ones(3), data=data, directives=ClientDirectives(1, 0), generator=None)  # type: ignore[arg-type]


# ---------------------------------------------------------- the server's scheduling
def test_server_sends_reputation_from_before_the_round_and_public_norms() -> None:
    tier = FlatTier(uniform_weights, build_mean(None), ())  # type: ignore[arg-type]
    s = DualShieldStrategy(tier, 1.0, DualShieldParams(k_min=1), 4, rounds=7)
    plan = s.configure(1, [0, 2])
    assert plan.extra[2] == {ROUNDS_KEY: 7.0, REPUTATION_KEY: 0.5}  # r(0), no norms yet
    rows = torch.tensor([[3.0, 4.0], [3.0, 4.0], [-3.0, -4.0]])
    metas = [UpdateMeta(client_id=c, num_samples=1, round=1) for c in (0, 1, 2)]
    res = s.aggregate(1, torch.zeros(2), UpdateBatch(rows, metas, num_clients=4))
    plan = s.configure(2, [2])
    assert plan.extra[2][REPUTATION_KEY] == pytest.approx(float(s.book.r[2]))
    assert plan.extra[2][public_norm_key(1)] == pytest.approx(float(res.params.norm()))
    restored = DualShieldStrategy(tier, 1.0, DualShieldParams(k_min=1), 4, rounds=7)
    restored.load_state_dict(s.state_dict())
    assert restored.configure(2, [2]).extra == plan.extra


# ---------------------------------------------------------------------- accounting
def test_forty_identical_rounds_compose_as_dp_accounting() -> None:
    z = ROOT / 1.0  # ε_round = 1, g = 1
    acc = rdp.RdpAccountant()
    acc.compose(SelfComposedDpEvent(GaussianDpEvent(z), 40))
    assert table6_epsilons(1.0) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)


def _classic(eps_round: float) -> float:
    """min over α > 1 of 40 α/(2 z²) + ln(1/δ)/(α − 1) (Mironov 2017, Prop. 3)."""
    z = ROOT / eps_round
    alphas = 1.0 + np.linspace(1e-3, 50.0, 200_000)
    return float(np.min(40 * alphas / (2 * z * z) + math.log(1e5) / (alphas - 1)))


@pytest.mark.parametrize(
    ("eps_round", "paper"), [(0.5, 3.3), (1.0, 7.1), (2.0, 15.9), (4.0, 38.7), (8.0, 104.6)]
)
def test_table_6(eps_round: float, paper: float) -> None:
    # The paper's column is the classic RDP → (ε, δ) conversion; dp_accounting's (ours)
    # is tighter (Balle et al. 2020): lower by 0.4–1.7.
    assert _classic(eps_round) == pytest.approx(paper, abs=0.06)
    ours = table6_epsilons(eps_round)
    assert paper - 1.8 < ours < paper


# ---------------------------------------------------------------------- bad input
def _load(tmp_path: Path, release: dict[str, Any], algorithm: str = "dual_shield") -> Any:
    raw = tiny_raw()
    raw["methods"][1].update(
        {"algorithm": {"name": algorithm}, "release": [{"name": "adaptive_dp", **release}]}
    )
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"epsilon_round": 0.0}, "epsilon_round"),
        ({"epsilon_round": -1.0}, "epsilon_round"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"window": 0}, "window"),
    ],
)
def test_bad_adp_params_name_the_field(tmp_path: Path, params: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, params)
    line = str(err.value)
    assert line.startswith("methods.1.release.0.") and field in line.split(":")[0], line
    assert "\n" not in line


def test_adp_needs_dual_shield(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dual_shield"):
        _load(tmp_path, {}, algorithm="fedavg")
    assert _load(tmp_path, {}).methods[1].release[0].name == "adaptive_dp"


def test_cli_exits_2_on_a_bad_window(tiny_config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(tiny_config_file),
            "--out",
            str(out),
            "--set",
            "methods.1.algorithm={name: dual_shield}",
            "--set",
            "methods.1.release=[{name: adaptive_dp, window: 0}]",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "window" in result.output and not out.exists()
