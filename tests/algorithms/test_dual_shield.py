"""The dual_shield and flame strategies: what they record, exact resume, load-time checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

import geofl.algorithms.flame  # noqa: F401  (registers flame and dual_shield)
from geofl.algorithms.dual_shield import DualShieldParams, DualShieldStrategy
from geofl.algorithms.flame import FlameStrategy
from geofl.cli import app
from geofl.config.load import load_config
from geofl.errors import ConfigError
from geofl.records import RoundRecord, RoundStatus
from geofl.server.aggregators import build_mean
from geofl.server.defenses import NormBoundParams, build_norm_bound
from geofl.server.strategy import UpdateBatch
from geofl.server.tier import FlatTier
from geofl.server.weighting import uniform_weights
from geofl.update import UpdateMeta

N, D = 12, 30


def _tier(*defenses: Any) -> FlatTier:
    return FlatTier(uniform_weights, build_mean(None), defenses)  # type: ignore[arg-type]


def _batch(round_idx: int, clients: list[int], bad: set[int]) -> UpdateBatch:
    """Benign updates near e0 (+ noise keyed by round and client); ``bad`` ones along −e1."""
    rows = []
    for c in clients:
        gen = torch.Generator().manual_seed(1000 * round_idx + c)
        u = 0.2 * torch.randn(D, generator=gen)
        u[0] += 1.0 + 0.1 * c  # benign step sizes differ
        if c in bad:
            u = -5.0 * torch.roll(u, 1)
        rows.append(u)
    metas = [UpdateMeta(client_id=c, num_samples=10, round=round_idx) for c in clients]
    return UpdateBatch(torch.stack(rows), metas, num_clients=N)


def _cohort(r: int) -> list[int]:
    return [(r * 5 + i) % N for i in range(8)]


def test_dual_shield_rejects_attackers_and_records_reputations() -> None:
    strategy = DualShieldStrategy(_tier(), 1.0, DualShieldParams(), N)
    params = torch.zeros(D)
    for r in range(1, 5):
        batch = _batch(r, _cohort(r), bad={0, 1})
        res = strategy.aggregate(r, params, batch)
        params = res.params
        ids = [m.client_id for m in batch.metas]
        for c, kept in zip(ids, res.kept.tolist(), strict=True):
            if c in (0, 1):
                assert not kept
        assert float(res.weights.sum()) == pytest.approx(1.0)
        rec = RoundRecord(r, RoundStatus.AGGREGATED, ids, res.weights.tolist(), strategy=res.info)
        reps = RoundRecord.from_json(rec.to_json()).client_scalars("hra.reputation")
        assert sorted(reps) == list(range(N))
        assert reps == pytest.approx(dict(enumerate(strategy.book.r.tolist())))
        assert set(rec.client_scalars("cgf.z")) == set(ids)
        # Eq. 9: the survivors' weights are proportional to their reputations
        r_rows = torch.tensor([reps[c] for c in ids], dtype=torch.float64)
        expect = torch.where(res.kept, r_rows, 0.0)
        assert torch.allclose(res.weights, expect / expect.sum())
    assert strategy.book.r[0] < 0.5 < strategy.book.r[5]


def test_dual_shield_resumes_exactly() -> None:
    def run(strategy: DualShieldStrategy, params: torch.Tensor, rounds: range) -> torch.Tensor:
        for r in rounds:
            params = strategy.aggregate(r, params, _batch(r, _cohort(r), bad={3})).params
        return params

    p = DualShieldParams(reference="history", absent="decay")
    a = DualShieldStrategy(_tier(), 0.5, p, N)
    mid = run(a, torch.zeros(D), range(1, 4))
    state = a.state_dict()
    end_a = run(a, mid, range(4, 7))
    b = DualShieldStrategy(_tier(), 0.5, p, N)
    b.load_state_dict(state)
    assert torch.equal(run(b, mid, range(4, 7)), end_a)
    assert torch.equal(a.book.r, b.book.r)


def test_dual_shield_gives_rows_a_defense_dropped_no_evidence() -> None:
    tier = _tier(build_norm_bound(NormBoundParams(factor=2.0)))
    strategy = DualShieldStrategy(tier, 1.0, DualShieldParams(k_min=1), N)
    batch = _batch(1, list(range(8)), bad={2})  # norm 5× the others: norm_bound drops it
    res = strategy.aggregate(1, torch.zeros(D), batch)
    assert strategy.last is not None and not bool(strategy.last.screened[2])
    assert not bool(res.kept[2]) and float(res.weights[2]) == 0.0
    assert float(strategy.book.r[2]) == pytest.approx(0.92 * 0.5)
    assert "cgf.z.2" not in res.info


def test_flame_strategy_noise_is_keyed_by_round() -> None:
    a = FlameStrategy(_tier(), 1.0, 0.01, seed=4)
    b = FlameStrategy(_tier(), 1.0, 0.01, seed=4)
    batch = _batch(2, list(range(10)), bad={0, 1, 2})
    ra, rb = a.aggregate(2, torch.zeros(D), batch), b.aggregate(2, torch.zeros(D), batch)
    assert torch.equal(ra.params, rb.params)
    assert not ra.kept[:3].any() and ra.info["flame.noise_std"] > 0
    assert not torch.equal(ra.params, a.aggregate(3, torch.zeros(D), batch).params)


# ----------------------------------------------------------------------------- config


def _load(tmp_path: Path, method: dict[str, Any]) -> Any:
    raw = tiny_raw()
    raw["methods"][1].update(method)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"lam": 0.0}, "lam"),
        ({"lam": -1.0}, "lam"),
        ({"beta": 0.0}, "beta"),
        ({"beta": 1.0}, "beta"),
        ({"k_min": 0}, "k_min"),
        ({"r_min": -0.1}, "r_min"),
        ({"r_min": 1.0}, "r_min"),
        ({"r_min": 0.6}, "r_init"),  # above r_j(0) = 0.5
        ({"reference": "mode"}, "reference"),
    ],
)
def test_bad_dual_shield_params_name_the_field(
    tmp_path: Path, params: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, {"algorithm": {"name": "dual_shield", **params}})
    line = str(err.value)
    assert line.startswith(f"methods.1.algorithm.{field}: ") and "\n" not in line, line


@pytest.mark.parametrize("algorithm", ["dual_shield", "flame"])
def test_a_robust_aggregator_is_refused(tmp_path: Path, algorithm: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, {"algorithm": {"name": algorithm}, "aggregator": {"name": "median"}})
    assert str(err.value).startswith("methods.1.aggregator.name: ")


def test_dual_shield_refuses_a_weighting_it_would_replace(tmp_path: Path) -> None:
    method = {"algorithm": {"name": "dual_shield"}, "weighting": {"name": "consistency"}}
    with pytest.raises(ConfigError, match=r"^methods\.1\.weighting\.name: "):
        _load(tmp_path, method)


def test_the_defaults_load(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"algorithm": {"name": "dual_shield", "absent": "decay"}})
    assert cfg.methods[1].algorithm.name == "dual_shield"
    flame = {"algorithm": {"name": "flame"}, "weighting": {"name": "uniform"}}
    assert _load(tmp_path, flame).methods[1].algorithm.name == "flame"


def test_cli_exits_2_on_a_bad_lambda(tiny_config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(tiny_config_file),
            "--out",
            str(out),
            "--set",
            "methods.1.algorithm={name: dual_shield, lam: 0}",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "methods.1.algorithm.lam: " in result.output and not out.exists()


def test_ablation_switches_cgf_only_and_hra_only() -> None:
    """004 Table 4: CGF only averages the survivors plainly; HRA only keeps every update,
    weighs it by r, and its reputation moves by m̃ alone (Eq. 8 with m = 1)."""
    batch = _batch(1, list(range(8)), bad={0, 1})
    full = DualShieldStrategy(_tier(), 1.0, DualShieldParams(), N).aggregate(
        1, torch.zeros(D), batch
    )
    cgf_only = DualShieldStrategy(_tier(), 1.0, DualShieldParams(hra_weighting=False), N)
    res = cgf_only.aggregate(1, torch.zeros(D), batch)
    assert res.kept.tolist() == full.kept.tolist() == [False, False] + [True] * 6
    assert res.weights.tolist() == pytest.approx([0.0, 0.0] + [1 / 6] * 6)
    assert torch.allclose(res.aggregate, batch.deltas[2:].mean(0), atol=1e-6)
    hra_only = DualShieldStrategy(_tier(), 1.0, DualShieldParams(cgf_filter=False), N)
    res = hra_only.aggregate(1, torch.zeros(D), batch)
    assert res.kept.all()
    last = hra_only.last
    assert last is not None and last.cgf is not None
    expected_r = (0.92 * 0.5 + 0.08 * last.cgf.soft).clamp_min(0.1)
    assert torch.allclose(last.reputation, expected_r)
    assert torch.allclose(res.weights, expected_r / expected_r.sum())
    assert float(res.weights[0]) < float(res.weights[2])  # the attackers still weigh less


def test_fused_server_step_matches_the_unfused_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second pass writes Δ, the survivors' mean (into last round's buffer), the server
    step, ‖Δw‖ and the history blend chunk by chunk: over three rounds, with small blocks and
    two workers, the same as Δ and the mean first, then the step, the norm and observe()."""
    from geofl.algorithms import dual_shield as ds
    from geofl.server import columns
    from geofl.server.cgf import CosineFilter

    monkeypatch.setattr(columns, "BLOCK_BYTES", 8 * 4 * 256)
    monkeypatch.setattr(columns, "MIN_COLUMNS_PER_WORKER", 8)
    monkeypatch.setattr(columns, "EPILOGUE_COLUMNS", 8)
    fused = DualShieldStrategy(_tier(), 0.7, DualShieldParams(), N)
    ref = CosineFilter(DualShieldParams().cgf())
    params = torch.linspace(-1.0, 1.0, D)
    torch.set_num_threads(2)
    try:
        for r in (1, 2, 3):
            batch = _batch(r, _cohort(r), bad={0, 5})
            res = fused.aggregate(r, params, batch)
            last = fused.last
            assert last is not None and last.cgf is not None
            delta, mean = ds.survivor_products(last.weights, last.hard, batch.deltas)
            ref.observe(mean, last.cgf)
            assert torch.equal(res.aggregate, delta)
            assert torch.equal(res.params, fused.plain.step(params, delta))  # bit for bit
            change = float(torch.linalg.vector_norm(res.params - params, dtype=torch.float64))
            assert fused.public_norms[0] == pytest.approx(change, rel=1e-12)
            assert fused.filter.previous is not None and ref.previous is not None
            assert torch.equal(fused.filter.previous, ref.previous)
            assert fused.filter.history is not None and ref.history is not None
            assert torch.allclose(fused.filter.history, ref.history, rtol=0, atol=1e-7)
            params = res.params
    finally:
        torch.set_num_threads(1)
