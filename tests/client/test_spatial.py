"""Spatially modulated aggregation (001 Eq. 10–11): α_k on the client, ω_k on the server."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import tiny_raw

from geofl.client.data import ClientData
from geofl.client.spatial import (
    SpatialAlphaParams,
    alpha_from_score,
    client_alpha,
    histogram_entropy,
    ndvi,
    ndvi_stats,
    normalized_entropy,
    quantize_score,
    red_nir_indices,
    spectral_entropy,
)
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError
from geofl.io import read_jsonl
from geofl.server.validate import validate_update
from geofl.server.weighting import WEIGHTINGS, spatial_weights
from geofl.update import ClientUpdate, UpdateMeta

BANDS = ("B02", "B03", "B04", "B08")


def test_ndvi_of_known_reflectances() -> None:
    red = torch.tensor([0.1, 0.3, 0.0, 0.2])
    nir = torch.tensor([0.5, 0.3, 0.0, 0.0])
    # (0.5−0.1)/0.6 = 2/3; equal bands → 0; dark pixel → 0 by convention; no NIR → −1
    assert ndvi(red, nir).tolist() == pytest.approx([2 / 3, 0.0, 0.0, -1.0])
    mu, var = ndvi_stats(torch.tensor([0.1, 0.3]), torch.tensor([0.5, 0.3]))
    assert mu == pytest.approx(1 / 3) and var == pytest.approx(1 / 9)  # values 2/3 and 0


def test_dark_round_off_gives_neutral_ndvi_and_entropy() -> None:
    # De-standardised no-data zeros: ±1e-9 round-off, not reflectance.
    red = torch.tensor([1e-9, -2e-9, 3e-9, 0.1])
    nir = torch.tensor([-5e-10, 4e-9, 1e-9, 0.0])
    assert ndvi(red, nir).tolist() == [0.0, 0.0, 0.0, -1.0]
    assert spectral_entropy(torch.tensor([1e-9, 3e-9, 2e-9, 0.0])) == 0.0


def test_entropy_of_known_histograms() -> None:
    assert float(histogram_entropy(torch.tensor([1.0, 1.0, 1.0, 1.0]))) == pytest.approx(
        math.log(4)
    )
    assert float(histogram_entropy(torch.tensor([5.0, 0.0, 0.0]))) == 0.0
    # p = (½, ¼, ¼): H = ½ log 2 + 2·¼ log 4 = 1.5 log 2
    assert float(histogram_entropy(torch.tensor([2.0, 1.0, 1.0]))) == pytest.approx(
        1.5 * math.log(2)
    )
    assert normalized_entropy(torch.tensor([3.0, 3.0])) == pytest.approx(1.0)
    assert spectral_entropy(torch.tensor([0.2, 0.2, 0.2, 0.2])) == pytest.approx(1.0)
    assert spectral_entropy(torch.tensor([0.0, 0.0])) == 0.0


def test_linear_scaling_endpoints_and_quantisation() -> None:
    assert alpha_from_score(0.0) == 0.5 and alpha_from_score(1.0) == 1.5
    assert alpha_from_score(0.25) == 0.75 and alpha_from_score(2.0) == 1.5
    assert quantize_score(0.3, 5) == 0.25 and quantize_score(0.4, 5) == 0.5
    assert quantize_score(0.3, None) == 0.3 and quantize_score(0.7, 2) == 1.0


def test_red_nir_uses_b8a_when_b08_is_absent() -> None:
    assert red_nir_indices(BANDS) == (2, 3)
    assert red_nir_indices(("B04", "B8A", "B08")) == (0, 2)
    assert red_nir_indices(("B04", "B8A")) == (0, 1)
    assert red_nir_indices(("B04", "B03", "B02")) is None


def _client(
    red: float, nir: float, *, n: int = 6, meta: dict[str, Any] | None = None
) -> ClientData:
    x = torch.zeros(n, 4, 2, 2)
    x[:, 0], x[:, 1], x[:, 2], x[:, 3] = 0.05, 0.08, red, nir
    return ClientData(
        0, x, torch.zeros(n, dtype=torch.int64), np.ones(2), bands=BANDS, metadata=meta or {}
    )


def test_alpha_is_ordered_by_ndvi_and_within_bounds() -> None:
    params = SpatialAlphaParams(terms=("ndvi",))
    alphas = [client_alpha(_client(0.3, nir), params)[0] for nir in (0.1, 0.3, 0.5, 0.9)]
    assert alphas == sorted(alphas) and len(set(alphas)) == 4
    assert all(0.5 <= a <= 1.5 for a in alphas)
    # NDVI = (0.9−0.3)/1.2 = ½ everywhere, σ² = 0: t = ½·(1.5/2) = 0.375 → α = 0.875
    assert alphas[-1] == pytest.approx(0.875)


def test_alpha_hand_computed_with_every_term_and_destandardisation() -> None:
    meta = {
        "elevation_mean": np.array([100.0, 100.0, 3900.0, 3900.0, 100.0, 3900.0]),
        "season": np.array([0, 1, 2, 3, 0, 1]),
    }
    mean, std = torch.full((1, 4, 1, 1), 0.1), torch.full((1, 4, 1, 1), 2.0)
    raw = _client(0.3, 0.9, meta=meta)
    assert isinstance(raw.inputs, torch.Tensor)
    standardised = ClientData(
        0,
        (raw.inputs - mean) / std,
        raw.targets,
        raw.label_histogram,
        bands=BANDS,
        band_mean=mean,
        band_std=std,
        metadata=meta,
    )
    alpha, log = client_alpha(standardised, SpatialAlphaParams(elevation_bins=4))
    assert log["ndvi"]["mean"] == pytest.approx(0.5)
    assert log["elevation"]["t"] == pytest.approx(1.0 / 2.0)  # 2 of 4 bins, equal mass
    p = np.array([0.05, 0.08, 0.3, 0.9]) / 1.33
    assert log["spectral"]["t"] == pytest.approx(-(p * np.log(p)).sum() / math.log(4))
    h_season = -(2 / 6 * math.log(2 / 6) * 2 + 1 / 6 * math.log(1 / 6) * 2) / math.log(4)
    assert log["season"]["t"] == pytest.approx(h_season)
    s = (0.375 + 0.5 + log["spectral"]["t"] + h_season) / 4
    assert alpha == pytest.approx(0.5 + s)
    assert log["used"] == ["ndvi", "elevation", "spectral", "season"] and log["missing"] == []


def test_ablation_terms_and_missing_metadata_fallback() -> None:
    client = _client(0.3, 0.9)  # no elevation or season metadata
    alpha, log = client_alpha(client, SpatialAlphaParams(terms=("elevation", "season")))
    assert alpha == 1.0 and log["used"] == [] and log["missing"] == ["elevation", "season"]
    a_spec, _ = client_alpha(client, SpatialAlphaParams(terms=("spectral",)))
    a_both, log = client_alpha(client, SpatialAlphaParams(terms=("ndvi", "spectral", "season")))
    assert log["used"] == ["ndvi", "spectral"]
    assert a_both == pytest.approx(0.5 + (0.375 + (a_spec - 0.5)) / 2)
    with pytest.raises(ValueError, match="terms repeat"):
        SpatialAlphaParams(terms=("ndvi", "ndvi"))
    with pytest.raises(ValueError, match="at least 1"):
        SpatialAlphaParams(terms=())


def test_spatial_weights_normalise_alpha_times_size() -> None:
    w = spatial_weights(torch.tensor([0.5, 1.5, 1.0]), torch.tensor([100.0, 100.0, 200.0]))
    assert w.tolist() == pytest.approx([50 / 400, 150 / 400, 200 / 400])
    metas = [
        UpdateMeta(k, n, 1, spatial_alpha=a) for k, (n, a) in enumerate([(10, 1.0), (30, 1.0)])
    ]
    assert WEIGHTINGS.build("spatial", {})(metas, 1).tolist() == pytest.approx([0.25, 0.75])


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.5, 1.5), st.integers(1, 10_000)), min_size=1, max_size=12),
    st.randoms(use_true_random=False),
)
def test_weights_are_permutation_equivariant_on_the_simplex(
    rows: list[tuple[float, int]], rnd: Any
) -> None:
    alpha = torch.tensor([a for a, _ in rows], dtype=torch.float64)
    n = torch.tensor([m for _, m in rows], dtype=torch.float64)
    w = spatial_weights(alpha, n)
    assert float(w.sum()) == pytest.approx(1.0) and bool((w > 0).all())
    perm = list(range(len(rows)))
    rnd.shuffle(perm)
    idx = torch.tensor(perm)
    assert torch.allclose(spatial_weights(alpha[idx], n[idx]), w[idx])
    # bounded α: no weight moves more than 3× from its data-size share
    share = n / n.sum()
    assert bool((w <= 3 * share + 1e-12).all()) and bool((w >= share / 3 - 1e-12).all())


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), 0.49, 1.51, "1.0", True])
def test_validation_refuses_bad_alpha(alpha: Any) -> None:
    update = ClientUpdate(torch.zeros(3), UpdateMeta(0, 5, 1, spatial_alpha=alpha))
    reason = validate_update(update, 3)
    assert reason is not None and "spatial_alpha" in reason


def test_validation_accepts_alpha_at_the_bounds_and_absent() -> None:
    for alpha in (None, 0.5, 1.5, 1.0):
        assert (
            validate_update(
                ClientUpdate(torch.zeros(3), UpdateMeta(0, 5, 1, spatial_alpha=alpha)), 3
            )
            is None
        )


def _spatial_raw(**method: Any) -> dict[str, Any]:
    raw = tiny_raw(
        methods=[
            {
                "name": "spatial",
                "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
                "release": [{"name": "spatial_alpha", "levels": 9}],
                "weighting": {"name": "spatial"},
                **method,
            }
        ]
    )
    raw["federation"]["rounds"] = 2
    return raw


def _load(tmp_path: Path, raw: dict[str, Any], overrides: list[str] | None = None) -> Any:
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_config(p, overrides or [])


def test_recorded_weights_equal_omega_on_synthetic_data(tmp_path: Path) -> None:
    out = run_experiment(_load(tmp_path, _spatial_raw()), tmp_path / "run")
    sdir = next(out.glob("methods/spatial/seed-*"))
    sizes = read_jsonl(sdir / "rounds.jsonl")
    import json

    n = json.loads((sdir / "partition.json").read_text())["sizes"]
    assert len(sizes) == 2
    for rec in sizes:
        parts = rec["participants"]
        alpha = [rec["client_log"][str(k)]["spatial_alpha"]["alpha"] for k in parts]
        assert all(0.5 <= a <= 1.5 and (a - 0.5) * 8 == round((a - 0.5) * 8) for a in alpha)
        omega = spatial_weights(torch.tensor(alpha), torch.tensor([float(n[k]) for k in parts]))
        assert rec["weights"] == pytest.approx(omega.tolist(), abs=1e-12)


def test_spatial_weighting_without_the_release_step_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^methods\.0\.weighting\.name: .*spatial_alpha"):
        _load(tmp_path, _spatial_raw(release=[]))


def test_dataset_without_nir_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    raw = _spatial_raw()
    raw["data"]["bands"] = "rgb"
    with pytest.raises(ConfigError, match=r"^methods\.0\.release\.0\.name: spatial_alpha needs"):
        run_experiment(_load(tmp_path, raw), tmp_path / "never")
    assert not (tmp_path / "never").exists()
