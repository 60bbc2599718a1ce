"""Every value a DP client releases is accounted, removed or declared (issue 33, item 2).

The neighbouring datasets are the issue's: 40 records with label histogram
[10, 10, 10, 9, 1], and the same without the only class-4 record ([10, 10, 10, 9, 0]).
"""

from __future__ import annotations

from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant
from flwr.app import Array, RecordDict

from geofl.client.data import ClientData
from geofl.client.dpsgd import DpSgd, DpSgdParams
from geofl.client.release import (
    RELEASE_STEPS,
    apply_release,
    histogram_released,
    noisy_count,
)
from geofl.client.spatial import SpatialAlphaParams, build_spatial_alpha, noisy_alpha
from geofl.client.state import ClientState
from geofl.client.step import ClientResult, dp_events_of
from geofl.client.trainer import LocalTrainParams
from geofl.deploy.wire import check_reply, encode_reply
from geofl.models import MODELS, FlatModel
from geofl.plugins import load_all
from geofl.privacy.accounting import ACCOUNTANTS
from geofl.privacy.budget import ledger_epsilon
from geofl.rng import torch_generator
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

load_all()

DELTA = 1e-5


def _records() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch_generator(3, "data")
    y = torch.tensor([0] * 10 + [1] * 10 + [2] * 10 + [3] * 9 + [4])
    return torch.randn(len(y), 3, 8, 8, generator=g), y


def _client(x: torch.Tensor, y: torch.Tensor) -> ClientData:
    return ClientData(0, x, y, torch.bincount(y, minlength=5).numpy())


def _neighbours() -> tuple[ClientData, ClientData]:
    x, y = _records()
    keep = y != 4
    full, without = _client(x, y), _client(x[keep], y[keep])
    assert full.label_histogram.tolist() == [10, 10, 10, 9, 1]
    assert without.label_histogram.tolist() == [10, 10, 10, 9, 0]
    return full, without


def _dp_sgd() -> DpSgd:
    model = MODELS.build(
        "small_cnn",
        {"width": 4, "blocks": 1, "norm": "group"},
        in_channels=3,
        num_classes=5,
        generator=torch_generator(0, "init"),
    )
    train = LocalTrainParams(lr=0.1, momentum=0.0, weight_decay=0.0, batch_size=8, local_steps=2)
    # A fixed q: q = B/n would put n in the ledger's public event.
    params = DpSgdParams(noise_multiplier=1.0, sampling_probability=0.25)
    return DpSgd(FlatModel(model), train, ClassificationTask(5), params)


def _step(data: ClientData, release: list[tuple[str, dict[str, Any]]]) -> ClientResult:
    """The client step's release half, as :func:`geofl.client.step.client_step` runs it."""
    tr = _dp_sgd()
    directives = ClientDirectives(1, 0)
    upd = tr(tr.workspace.snapshot(), data, directives, torch_generator(9, "train"))
    steps = [RELEASE_STEPS.build(name, params) for name, params in release]
    upd = apply_release(
        upd, steps, data=data, directives=directives, generator=torch_generator(9, "release")
    )
    events = tuple(dp_events_of(upd.local_log))
    eps = ledger_epsilon(events, accountant="rdp", params={}, delta=DELTA)
    return ClientResult(upd, ClientState({}, events), upd.local_log, eps)


def _released(content: RecordDict) -> dict[str, Any]:
    """Everything in a reply but the noisy update Δw, as comparable values."""
    out: dict[str, Any] = {}
    for name, rec in content.array_records.items():
        for key, arr in rec.items():
            if key != "delta":
                out[f"{name}.{key}"] = arr.numpy().tolist()
    for name, mrec in content.metric_records.items():
        out.update({f"{name}.{k}": v for k, v in mrec.items()})
    for name, crec in content.config_records.items():
        out.update({f"{name}.{k}": v for k, v in crec.items()})
    return out


def test_dp_sgd_sends_no_label_histogram() -> None:
    full, _ = _neighbours()
    res = _step(full, [])
    assert res.update.meta.label_histogram is None
    assert "label_histogram" not in encode_reply(res).array_records["update"]


def test_removing_the_only_class4_record_changes_nothing_released_but_the_update() -> None:
    """With n_k concealed and a fixed q, the reply of the neighbours differs in Δw only."""
    full, without = _neighbours()
    a = encode_reply(_step(full, [("conceal_size", {})]))
    b = encode_reply(_step(without, [("conceal_size", {})]))
    assert _released(a) == _released(b)
    da = a.array_records["update"]["delta"].numpy()
    db = b.array_records["update"]["delta"].numpy()
    assert not np.array_equal(da, db)  # the noisy update is what differs (inside ε)


def _hand_epsilon(*extra_z: float) -> float:
    """ε(δ) of the DP-SGD round (2 steps of PoissonSampled(0.25, Gaussian(1))) composed
    with one Gaussian(z) per extra release, by dp_accounting directly."""
    orders = list(ACCOUNTANTS.build("rdp", {}).orders)  # type: ignore[attr-defined]
    ref = rdp_privacy_accountant.RdpAccountant(orders)
    ref.compose(dpa.PoissonSampledDpEvent(0.25, dpa.GaussianDpEvent(1.0)), 2)
    for z in extra_z:
        ref.compose(dpa.GaussianDpEvent(z))
    return float(ref.get_epsilon(DELTA))


def test_noisy_count_is_in_the_ledger_and_epsilon_is_the_composition() -> None:
    full, _ = _neighbours()
    plain = _step(full, [])
    noisy = _step(full, [("noisy_size", {"noise_multiplier": 4.0})])
    assert noisy.state.dp_events[-1] == {"mechanism": "gaussian", "noise_multiplier": 4.0}
    assert plain.epsilon == pytest.approx(_hand_epsilon(), rel=1e-9)
    assert noisy.epsilon == pytest.approx(_hand_epsilon(4.0), rel=1e-9)
    assert noisy.epsilon is not None and plain.epsilon is not None
    assert noisy.epsilon > plain.epsilon
    # The released n_k is the mechanism's draw from the release stream, not n.
    expected = noisy_count(40, 4.0, torch_generator(9, "release"))
    assert noisy.update.meta.num_samples == expected
    assert encode_reply(noisy).metric_records["meta"]["num_samples"] == expected


def test_noisy_count_by_hand() -> None:
    g = torch_generator(5)
    draw = float(torch.randn((), generator=torch_generator(5), dtype=torch.float64))
    assert noisy_count(100, 3.0, g) == max(1, round(100 + 3.0 * draw))
    assert noisy_count(1, 1e6, torch_generator(0)) >= 1


def test_noisy_alpha_is_in_the_ledger_and_epsilon_is_the_composition() -> None:
    bands = ("B02", "B03", "B04", "B08")
    x = torch.zeros(6, 4, 2, 2)
    x[:, 2], x[:, 3] = 0.1, 0.5
    data = ClientData(0, x, torch.zeros(6, dtype=torch.int64), np.ones(2), bands=bands)
    exact = build_spatial_alpha(SpatialAlphaParams(terms=("ndvi",)))
    noisy = build_spatial_alpha(SpatialAlphaParams(terms=("ndvi",), noise_multiplier=2.0))
    upd = ClientUpdate(torch.zeros(3), UpdateMeta(0, 6, 1))
    d = ClientDirectives(1, 0)
    e = apply_release(upd, [exact], data=data, directives=d, generator=torch_generator(1))
    n = apply_release(upd, [noisy], data=data, directives=d, generator=torch_generator(1))
    assert dp_events_of(e.local_log) == []  # exact α_k: outside ε (declared)
    assert dp_events_of(n.local_log) == [{"mechanism": "gaussian", "noise_multiplier": 2.0}]
    alpha = float(e.meta.spatial_alpha or 0.0)
    ref = noisy_alpha(alpha, 2.0, torch_generator(1))["alpha"]
    assert n.meta.spatial_alpha == ref and 0.5 <= ref <= 1.5 and ref != alpha
    # Composed with the DP-SGD round: ε equals dp_accounting's composition.
    events = [*_step(ClientData(0, *_records()[0:2], np.ones(5)), []).state.dp_events]
    events += dp_events_of(n.local_log)
    eps = ledger_epsilon(events, accountant="rdp", params={}, delta=DELTA)
    assert eps == pytest.approx(_hand_epsilon(2.0), rel=1e-9)


def test_withhold_histogram_removes_it_from_the_message() -> None:
    upd = ClientUpdate(torch.zeros(3), UpdateMeta(0, 6, 1, label_histogram=np.array([5, 1])))
    data = ClientData(0, torch.zeros(6, 2), torch.zeros(6, dtype=torch.int64), np.array([5, 1]))
    step = RELEASE_STEPS.build("withhold_histogram", {})
    out = apply_release(
        upd, [step], data=data, directives=ClientDirectives(1, 0), generator=torch_generator(0)
    )
    assert out.meta.label_histogram is None


def test_which_methods_release_a_histogram() -> None:
    assert not histogram_released("dp_sgd", [])
    assert not histogram_released("local_sgd", ["l2_clip", "withhold_histogram", "gaussian"])
    assert histogram_released("local_sgd", ["l2_clip", "risk_aware"])


def test_a_histogram_the_method_does_not_allow_is_refused_in_one_line() -> None:
    full, _ = _neighbours()
    content = encode_reply(_step(full, []))
    assert check_reply(content, histogram_allowed=False) is None
    content.array_records["update"]["label_histogram"] = Array(np.array([10, 10, 10, 9, 1]))
    why = check_reply(content, histogram_allowed=False)
    assert why is not None and "label_histogram" in why and "\n" not in why
    assert check_reply(content, histogram_allowed=True) is None
