"""iDLG / DLG gradient inversion (Zhao et al. 2020; Zhu et al. 2019; 004 Fig. 4)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from geofl.attacks.inversion import (
    InversionParams,
    infer_label,
    inversion_curve,
    invert_gradients,
    model_gradients,
    reconstruction_quality,
    release_gradients,
    run_gradient_inversion,
    sigma_for_budget,
    tiny_mlp,
)
from geofl.plugins import ANALYSES, load_all
from geofl.rng import torch_generator


def _setup(batch: int = 1) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    model = tiny_mlp(8, 10, hidden=32, generator=torch_generator(0, "test", "model"))
    x = torch.rand((batch, 3, 8, 8), generator=torch_generator(0, "test", "x"))
    y = torch.arange(batch, dtype=torch.int64) + 2
    return model, x, y


def test_idlg_recovers_label_and_image_without_noise() -> None:
    model, x, y = _setup()
    grads = [g.detach() for g in model_gradients(model, x, y)]
    label = infer_label(grads[-2], grads[-1])
    assert label == int(y[0])
    assert infer_label(grads[-2], None) == int(y[0])  # sigmoid features are ≥ 0
    recon = invert_gradients(
        model,
        grads,
        (1, 3, 8, 8),
        label=torch.tensor([label]),
        steps=10,
        generator=torch_generator(0, "test", "dummy"),
    )
    psnr, ssim = reconstruction_quality(x[0], recon[0])
    assert psnr > 30.0
    assert ssim > 0.95


def test_noise_lowers_psnr() -> None:
    params = InversionParams(budgets=[None, 8.0], steps=5, hidden=32)
    _, (plain, noisy) = run_gradient_inversion(params)
    assert plain.label == params.label
    assert plain.psnr > 30.0
    assert noisy.sigma > 0
    assert noisy.psnr < plain.psnr - 10.0


def test_release_uses_clip_and_noise() -> None:
    grads = [torch.full((2, 3), 3.0), torch.full((4,), 4.0)]  # ‖g‖ = √(6·9 + 4·16) = √118
    out = release_gradients(grads, clip=1.0, sigma=0.0, generator=torch_generator(0))
    assert [o.shape for o in out] == [g.shape for g in grads]
    assert float(torch.cat([o.reshape(-1) for o in out]).norm()) == pytest.approx(1.0, rel=1e-6)
    a = release_gradients(grads, clip=1.0, sigma=1.0, generator=torch_generator(1))
    b = release_gradients(grads, clip=1.0, sigma=1.0, generator=torch_generator(1))
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def test_sigma_for_budget_decreases_with_epsilon() -> None:
    s = [sigma_for_budget(eps, 1e-5, 1.0) for eps in (0.5, 2.0, 8.0)]
    assert s[0] > s[1] > s[2] > 0
    with pytest.raises(ValueError, match="ε > 0"):
        sigma_for_budget(0.0, 1e-5, 1.0)


def test_dlg_batch_of_two_without_labels() -> None:
    model, x, y = _setup(batch=2)
    grads = [g.detach() for g in model_gradients(model, x, y)]
    recon = invert_gradients(
        model,
        grads,
        (2, 3, 8, 8),
        label=None,
        steps=15,
        num_classes=10,
        generator=torch_generator(0, "test", "dlg"),
    )
    assert recon.shape == x.shape
    assert torch.isfinite(recon).all()


def test_analysis_is_registered_and_writes_json_and_figure(tmp_path: Path) -> None:
    load_all()
    analysis = ANALYSES.build("gradient_inversion", {"budgets": [None, 4.0], "steps": 2})
    result = analysis(tmp_path)
    written = json.loads((tmp_path / "analysis" / "gradient_inversion.json").read_text())
    assert written == result
    assert [b["epsilon"] for b in written["budgets"]] == [None, 4.0]
    assert (tmp_path / "analysis" / "gradient_inversion.png").stat().st_size > 0


def test_sigma_for_budget_classic_is_004_eq_11() -> None:
    # σ = 2C/ε · √(2 ln(1.25/δ)): δ = 1e-5 → √(2 ln 125000) = 4.84448...
    z = math.sqrt(2 * math.log(125000))
    assert sigma_for_budget(8.0, 1e-5, 0.5, "classic") == pytest.approx(2 * 0.5 * z / 8)
    assert sigma_for_budget(1e3, 1e-5, 1.0, "classic") == pytest.approx(2 * z / 1e3)


def test_sigma_for_budget_reaches_large_epsilon() -> None:
    # The curve of 004 Fig. 4 moves only where z ≲ 1/(2√D): ε ≥ 1e4 under RDP. Before the
    # lower bracket followed ε, ε = 1e6 raised "Unable to find bracketing interval".
    s = [sigma_for_budget(eps, 1e-5, 1.0) for eps in (1e3, 1e4, 1e5, 1e6)]
    assert s[0] > s[1] > s[2] > s[3] > 0
    assert sigma_for_budget(1e6, 1e-5, 1.0) > sigma_for_budget(1e6, 1e-5, 1.0, "classic")
    # unchanged where the old bracket sufficed (ε = 8: z ≈ 0.638 under RDP)
    assert sigma_for_budget(8.0, 1e-5, 0.5) == pytest.approx(0.638, abs=0.002)


def test_repeats_average_into_a_curve(tmp_path: Path) -> None:
    load_all()
    params = {"budgets": [None, 1e5], "steps": 2, "hidden": 8, "repeats": 2, "seed": 5}
    result = ANALYSES.build("gradient_inversion", params)(tmp_path)
    curve = result["curve"]
    assert [c["epsilon"] for c in curve] == [None, 1e5] and curve[0]["n"] == 2
    one = [run_gradient_inversion(InversionParams(**{**params, "seed": s}))[1] for s in (5, 6)]
    assert curve == inversion_curve(one, 3)
    psnr = [one[0][1].psnr, one[1][1].psnr]
    assert curve[1]["psnr_db_mean"] == pytest.approx(sum(psnr) / 2)
    assert curve[1]["psnr_db_sd"] == pytest.approx(abs(psnr[0] - psnr[1]) / math.sqrt(2))
    assert result["budgets"] == [r.as_dict() for r in one[0]]
    assert "2 repeat(s), seeds 5–6" in result["protocol"]
