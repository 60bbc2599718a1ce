"""Risk-aware and uniform update perturbation (000 Eq. 5–8) as release steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofl.client.data import ClientData
from geofl.client.release import apply_release
from geofl.errors import ConfigError
from geofl.plugins import RELEASE_STEPS, load_all
from geofl.privacy.mechanisms import clip_and_noise
from geofl.rng import torch_generator
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

load_all()
CLASSES = ("Industrial", "Forest", "River", "SeaLake")


def _data(hist: list[int], client: int = 0, gsd: float | None = 10.0) -> ClientData:
    y = torch.as_tensor(np.repeat(np.arange(4), hist))
    x = torch.zeros(len(y), 1, 2, 2)
    return ClientData(client, x, y, np.asarray(hist), classes=CLASSES, gsd_m=gsd)


def test_clip_and_noise_without_noise_is_the_clip_by_hand() -> None:
    # ‖(3, 4)‖ = 5 > C = 2.5 → scale 0.5 → (1.5, 2.0)   (000 Eq. 5)
    out, norm = clip_and_noise(torch.tensor([3.0, 4.0]), clip=2.5, sigma=0.0, generator=None)  # type: ignore[arg-type]
    assert norm == 5.0 and out.tolist() == [1.5, 2.0]


def test_noise_has_sigma_std_and_is_seeded() -> None:
    d = torch.zeros(200_000)
    a, _ = clip_and_noise(d, clip=1.0, sigma=0.07, generator=torch_generator(1, "r", 1, "c", 0))
    b, _ = clip_and_noise(d, clip=1.0, sigma=0.07, generator=torch_generator(1, "r", 1, "c", 0))
    c, _ = clip_and_noise(d, clip=1.0, sigma=0.07, generator=torch_generator(1, "r", 1, "c", 1))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert float(a.std()) == pytest.approx(0.07, rel=0.01)
    assert float(a.mean()) == pytest.approx(0.0, abs=1e-3)
    assert d.abs().sum() == 0  # input untouched


def _release(step_name: str, params: dict[str, object], data: ClientData, delta: torch.Tensor):  # type: ignore[no-untyped-def]
    step = RELEASE_STEPS.build(step_name, params)
    upd = ClientUpdate(delta, UpdateMeta(client_id=data.client_id, num_samples=len(data), round=1))
    return apply_release(
        upd,
        [step],
        data=data,
        directives=ClientDirectives(1, data.client_id),
        generator=torch_generator(9, "release"),
    )


@pytest.mark.parametrize(
    ("hist", "level", "clip", "sigma"),
    [
        ([3, 1, 0, 0], "high", 80.0, 0.07),  # r = 0.673847 (see test_risk)
        ([0, 334, 333, 333], "low", 120.0, 0.03),  # r = 0.163922
    ],
)
def test_risk_aware_picks_the_level_setting(
    hist: list[int], level: str, clip: float, sigma: float
) -> None:
    delta = torch.full((50_000,), 1.0)  # ‖Δw‖ = 223.6 > every C → clipped
    out = _release("risk_aware", {}, _data(hist), delta)
    log = out.local_log["risk_aware"]
    assert (log["level"], log["clip"], log["sigma"], log["clipped"]) == (level, clip, sigma, True)
    # replace-one neighbours: clipped updates differ by ≤ 2C, so z = σ / (2C)
    assert log["dp_event"] == {"mechanism": "gaussian", "noise_multiplier": sigma / (2 * clip)}
    noise = out.delta - delta * (clip / float(torch.linalg.vector_norm(delta)))
    assert float(noise.std()) == pytest.approx(sigma, rel=0.03)
    # What the server receives carries no risk information.
    assert "risk" not in repr(out.meta)


def test_risk_aware_mid_level_and_custom_levels() -> None:
    # r with custom thresholds: the high client above now lands in mid.
    params = {"risk": {"tau_mid": 0.5, "tau_high": 0.9}, "mid": {"clip": 7.0, "sigma": 0.0}}
    out = _release("risk_aware", params, _data([3, 1, 0, 0]), torch.tensor([30.0, 40.0]))
    assert out.local_log["risk_aware"]["level"] == "mid"
    assert out.delta.tolist() == pytest.approx([4.2, 5.6])  # 50 → 7: scale 0.14


def test_uniform_gaussian_is_the_same_for_every_client() -> None:
    d = torch.ones(10)
    a = _release("gaussian", {"clip": 1.0, "sigma": 0.0}, _data([3, 1, 0, 0]), d)
    b = _release("gaussian", {"clip": 1.0, "sigma": 0.0}, _data([0, 334, 333, 333], 1), d)
    assert torch.equal(a.delta, b.delta)
    assert float(torch.linalg.vector_norm(a.delta)) == pytest.approx(1.0)
    assert a.local_log["gaussian"]["dp_event"]["noise_multiplier"] == 0.0


def test_risk_aware_without_class_names_fails_clearly() -> None:
    data = ClientData(0, torch.zeros(2, 1, 2, 2), torch.tensor([0, 1]), np.array([1, 1]))
    with pytest.raises(ValueError, match="class names"):
        _release("risk_aware", {}, data, torch.ones(3))


@pytest.mark.parametrize(
    ("name", "params", "field"),
    [
        ("gaussian", {"clip": 0.0}, "clip"),
        ("gaussian", {"sigma": -0.1}, "sigma"),
        ("risk_aware", {"high": {"clip": -1, "sigma": 0.1}}, "high.clip"),
    ],
)
def test_bad_noise_parameters_name_the_field(
    name: str, params: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        RELEASE_STEPS.validate(name, params)
