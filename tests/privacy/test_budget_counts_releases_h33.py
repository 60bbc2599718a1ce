"""The budget check (``privacy.target_epsilon``) composes every release of the round —
the trainer's and the release steps' (``noisy_size``'s noisy count, a noisy update) — so
it checks exactly the ε the client reports after the round (issue 33, item 5).

Hand check: under RDP, k Gaussian releases with noise multiplier z compose to one with
z/√k (Σ_k α/(2z²) = α/(2(z/√k)²)), so a client whose only release is its noisy count
(z = 2) reaches ε(G(2)) after round 1 and ε(G(2/√2)) after round 2. With the target
between the two, round 1 trains and round 2 is declined, naming ε(G(√2)). Before the fix
the check looked at the trainer's plan only: a noisy-count client never declined, and a
DP-SGD client with a noisy count reported an ε past its target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch

from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS, apply_release, planned_releases
from geofl.client.state import ClientState
from geofl.client.step import (
    ClientPrivacy,
    ClientProgram,
    ClientStreams,
    client_step,
    dp_events_of,
)
from geofl.client.trainer import LocalTrainParams
from geofl.errors import BudgetExhaustedError
from geofl.plugins import load_all
from geofl.privacy.budget import ledger_epsilon
from geofl.rng import torch_generator
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

load_all()

DELTA = 1e-5
Z = 2.0
COUNT = {"mechanism": "gaussian", "noise_multiplier": Z}
DPSGD = {
    "mechanism": "poisson_gaussian",
    "noise_multiplier": 1.0,
    "sampling_probability": 0.25,
    "count": 4,
}
epsilon = partial(ledger_epsilon, accountant="rdp", params={}, delta=DELTA)


class _Trainer:
    """A trainer whose round releases ``planned`` (and whose update is zero)."""

    def __init__(self, planned: list[dict[str, Any]]) -> None:
        self.planned = planned

    def state_specs(self) -> Mapping[str, Any]:
        return {}

    def planned_release(self, n: int) -> list[dict[str, Any]]:
        return list(self.planned)

    def __call__(
        self, params: torch.Tensor, data: ClientData, d: ClientDirectives, *_: Any, **__: Any
    ) -> ClientUpdate:
        local_log = {"dp_sgd": {"dp_event": dict(self.planned[0])}} if self.planned else {}
        meta = UpdateMeta(client_id=data.client_id, num_samples=len(data), round=d.round)
        return ClientUpdate(torch.zeros_like(params), meta, local_log)


def _program(trainer: _Trainer, target: float) -> ClientProgram:
    train = LocalTrainParams(lr=0.1, batch_size=4, local_steps=1)
    release = [RELEASE_STEPS.build("noisy_size", {"noise_multiplier": Z})]
    privacy = ClientPrivacy(epsilon, target)
    return ClientProgram(trainer, train, release=release, privacy=privacy)


def _round(program: ClientProgram, state: ClientState, r: int) -> Any:
    data = ClientData(0, torch.zeros(8, 1), torch.zeros(8, dtype=torch.long), np.array([8]))
    streams = ClientStreams((0, "round", r, "client", 0))
    return client_step(program, torch.zeros(3), data, state, ClientDirectives(r, 0), streams)


def test_the_noisy_count_alone_is_budgeted_hand_checked() -> None:
    one, two = epsilon([COUNT]), epsilon([COUNT, COUNT])
    assert two == pytest.approx(epsilon([{**COUNT, "noise_multiplier": Z / math.sqrt(2)}]))
    target = (one + two) / 2
    program = _program(_Trainer([]), target)
    res = _round(program, ClientState({}, ()), 1)
    assert res.epsilon == one and res.state.dp_events == (COUNT,)
    with pytest.raises(BudgetExhaustedError) as err:
        _round(program, res.state, 2)
    assert err.value.epsilon == two and two > target


def test_dp_sgd_with_a_noisy_count_never_reports_past_its_target() -> None:
    """Target between ε(DP-SGD round) and ε(DP-SGD round + count): declined up front,
    with the ε the report would state for that round."""
    alone, both = epsilon([DPSGD]), epsilon([DPSGD, COUNT])
    assert alone < both
    program = _program(_Trainer([DPSGD]), (alone + both) / 2)
    with pytest.raises(BudgetExhaustedError) as err:
        _round(program, ClientState({}, ()), 1)
    assert err.value.epsilon == both
    ok = _round(_program(_Trainer([DPSGD]), both), ClientState({}, ()), 1)
    assert ok.epsilon == both  # at the target exactly: trains, reports what was checked


STEPS = [
    ("noisy_size", {"noise_multiplier": 3.0}),
    ("gaussian", {"clip": 2.0, "sigma": 0.5}),
    ("spatial_alpha", {"terms": ["ndvi"], "noise_multiplier": 2.0}),
    ("spatial_alpha", {"terms": ["ndvi"]}),
    ("l2_clip", {"bound": 1.0}),
]


@pytest.mark.parametrize(("name", "params"), STEPS)
def test_each_steps_plan_is_what_it_reports(name: str, params: dict[str, Any]) -> None:
    """What the check composes for a step is the DpEvent the step then reports."""
    x = torch.zeros(6, 4, 2, 2)
    x[:, 2], x[:, 3] = 0.1, 0.5
    bands = ("B02", "B03", "B04", "B08")
    data = ClientData(0, x, torch.zeros(6, dtype=torch.int64), np.ones(2), bands=bands)
    step, d = RELEASE_STEPS.build(name, params), ClientDirectives(1, 0)
    upd = ClientUpdate(torch.ones(3), UpdateMeta(0, 6, 1))
    out = apply_release(upd, [step], data=data, directives=d, generator=torch_generator(1))
    assert planned_releases([step], data, d) == dp_events_of(out.local_log)
