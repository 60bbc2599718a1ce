"""The 004 threat model and data-poisoning attacks, with hand-checkable numbers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from geofl.attacks.backdoor import BackdoorParams, EdgeCaseParams, PoisoningAttack, rare_class
from geofl.attacks.client import ATTACKS, AttackContext
from geofl.attacks.probe import BackdoorProbe, attack_success_rate
from geofl.attacks.threat import (
    ScheduleParams,
    num_attackers,
    poison_count,
    select_attackers,
)
from geofl.attacks.trigger import TriggerParams, make_trigger
from geofl.client.data import ClientData
from geofl.client.state import ClientState
from geofl.client.step import ClientProgram, ClientStreams, client_step
from geofl.client.trainer import LocalTrainParams
from geofl.rng import derive_seed
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

SHAPE = (3, 6, 6)


def _ctx(seed: int = 7, k: int = 4, counts: tuple[int, ...] = (5,) * 10) -> AttackContext:
    return AttackContext(seed, k, SHAPE, counts, path="methods.0.attack")


def _data(client: int, n: int = 50) -> ClientData:
    """n zero images ``[n, 3, 6, 6]``, labels 0..9 cycling."""
    targets = torch.arange(n) % 10
    hist = np.bincount(targets.numpy(), minlength=10)
    return ClientData(client, torch.zeros(n, *SHAPE), targets, hist)


def _backdoor(**params: Any) -> PoisoningAttack:
    attack = ATTACKS.build("backdoor", params, ctx=_ctx())
    assert isinstance(attack, PoisoningAttack)
    return attack


# ----------------------------------------------------------------------- threat model
def test_number_of_attackers_is_the_floor_of_fraction_times_k() -> None:
    assert [num_attackers(10, f) for f in (0.0, 0.1, 0.25, 0.3, 0.4, 0.49)] == [0, 1, 2, 3, 4, 4]
    assert num_attackers(7, 0.3) == 2  # 2.1 → 2


def test_attackers_are_a_seeded_permutation_prefix() -> None:
    ids = select_attackers(10, 0.3, 2024)
    perm = np.random.default_rng(derive_seed(2024, "attack", "attackers")).permutation(10)
    assert ids == tuple(sorted(int(k) for k in perm[:3]))
    assert len(ids) == 3 and ids == tuple(sorted(set(ids)))
    assert select_attackers(10, 0.3, 2024) == ids  # deterministic
    assert select_attackers(10, 0.2, 2024) == tuple(sorted(int(k) for k in perm[:2]))
    assert select_attackers(10, 0.0, 2024) == ()
    others = {select_attackers(10, 0.3, s) for s in range(2024, 2029)}
    assert len(others) > 1  # the attack seed changes who attacks


def test_schedule_always_intermittent_and_from_t0() -> None:
    rounds = range(1, 11)
    assert [r for r in rounds if ScheduleParams().active(r)] == list(rounds)
    assert [r for r in rounds if ScheduleParams(period=3).active(r)] == [1, 4, 7, 10]
    assert [r for r in rounds if ScheduleParams(start=6).active(r)] == [6, 7, 8, 9, 10]
    assert [r for r in rounds if ScheduleParams(start=2, period=4).active(r)] == [2, 6, 10]


def test_poison_count_rounds_half_up() -> None:
    assert [poison_count(n, 0.2) for n in (50, 7, 2, 3)] == [10, 1, 0, 1]
    assert poison_count(7, 0.5) == 4 and poison_count(9, 1.0) == 9


# ----------------------------------------------------------------------------- trigger
def test_trigger_with_values_is_stamped_exactly_where_stated() -> None:
    trig = make_trigger(
        TriggerParams(size=2, position=(1, 3), values=[5.0, -5.0, 7.0]), SHAPE, 0, "t"
    )
    x = torch.zeros(4, *SHAPE)
    out = trig.stamp(x)
    expect = torch.zeros(4, *SHAPE)
    for c, v in enumerate([5.0, -5.0, 7.0]):
        expect[:, c, 1:3, 3:5] = v
    assert torch.equal(out, expect)
    assert torch.equal(x, torch.zeros(4, *SHAPE))  # input untouched


def test_seeded_trigger_is_plus_minus_amplitude_in_the_corner() -> None:
    params = TriggerParams(size=3, amplitude=2.0)
    a, b = (
        make_trigger(params, (13, 16, 16), 2024, "t"),
        make_trigger(params, (13, 16, 16), 2024, "t"),
    )
    assert (a.row, a.col) == (13, 13)
    assert torch.equal(a.patch, b.patch)  # the config seed fixes it
    assert set(a.patch.unique().tolist()) == {-2.0, 2.0}
    assert not torch.equal(a.patch, make_trigger(params, (13, 16, 16), 2025, "t").patch)
    top = make_trigger(TriggerParams(size=3, position="top_left"), (13, 16, 16), 1, "t")
    assert (top.row, top.col) == (0, 0)


def test_trigger_opacity_blends() -> None:
    trig = make_trigger(
        TriggerParams(size=1, position=(0, 0), values=[4.0] * 3, opacity=0.25), SHAPE, 0, "t"
    )
    out = trig.stamp(torch.full((1, *SHAPE), 2.0))
    assert out[0, :, 0, 0].tolist() == [2.5, 2.5, 2.5]  # 0.75·2 + 0.25·4
    assert float(out[0, :, 1:, :].sum()) == 2.0 * 3 * 30  # rows 1-5 untouched


# --------------------------------------------------------------------------- poisoning
def test_backdoor_poisons_exactly_the_ratio_of_the_pool_and_relabels() -> None:
    attack = _backdoor(
        fraction=0.25, poison_ratio=0.2, target=3, trigger={"values": [1.0, 2.0, 3.0]}
    )
    assert attack.attackers == select_attackers(4, 0.25, 7) and len(attack.attackers) == 1
    k = attack.attackers[0]
    clean = _data(k)
    poisoned = attack.poison(clean, round_idx=1)
    idx = attack.poison_indices(clean)
    assert len(idx) == 10  # ⌊0.2 · 50 + ½⌋
    assert torch.equal(idx, attack.poison_indices(clean))  # fixed for the run
    stamped = (poisoned.inputs != 0).flatten(1).any(1)
    assert torch.equal(torch.nonzero(stamped).reshape(-1), idx)
    patch = poisoned.inputs[idx][:, :, 3:6, 3:6]
    assert torch.equal(patch, torch.tensor([1.0, 2.0, 3.0])[None, :, None, None].expand_as(patch))
    assert torch.equal(poisoned.targets[idx], torch.full((10,), 3))
    rest = torch.ones(50, dtype=torch.bool)
    rest[idx] = False
    assert torch.equal(poisoned.targets[rest], clean.targets[rest])
    assert torch.equal(clean.inputs, torch.zeros(50, *SHAPE))  # the pool itself untouched
    assert torch.equal(clean.targets, torch.arange(50) % 10)


def test_poisoning_follows_the_schedule() -> None:
    attack = _backdoor(fraction=0.25, schedule={"start": 3, "period": 2})
    data = _data(attack.attackers[0])
    assert attack.poison(data, 1) is data and attack.poison(data, 4) is data
    assert attack.poison(data, 3) is not data and attack.poison(data, 5) is not data


def test_boost_reuses_scaling_in_attack_rounds_only() -> None:
    attack = _backdoor(fraction=0.25, boost=8.0, schedule={"period": 2})
    k = attack.attackers[0]
    upd = ClientUpdate(torch.tensor([1.0, -0.5]), UpdateMeta(k, 50, 1))
    gen = torch.Generator()
    assert attack(upd, ClientDirectives(1, k), gen).delta.tolist() == [8.0, -4.0]
    assert attack(upd, ClientDirectives(2, k), gen).delta.tolist() == [1.0, -0.5]
    assert type(attack._boost).__name__ == "_Scaling"
    assert _backdoor(fraction=0.25)(upd, ClientDirectives(1, k), gen) is upd  # γ = 1


def test_rare_class_rule_and_edge_case_poisoning() -> None:
    assert rare_class((50, 3, 0, 3, 9), target=0) == 1  # class 2 has none; tie 1/3 → 1
    assert rare_class((2, 30, 30), target=0) == 1  # the target itself is never the source
    counts = (9, 9, 9, 9, 2, 9, 9, 9, 9, 9)
    attack = ATTACKS.build("edge_case", {"fraction": 0.25, "target": 0}, ctx=_ctx(counts=counts))
    assert isinstance(attack, PoisoningAttack) and attack.source == 4
    data = _data(attack.attackers[0])  # 5 samples of class 4: 4, 14, 24, 34, 44
    out = attack.poison(data, 1)
    relabelled = torch.nonzero(out.targets != data.targets).reshape(-1)
    assert relabelled.tolist() == [4, 14, 24, 34, 44]  # min(⌊0.2·50 + ½⌋ = 10, 5) = 5
    assert (out.targets[relabelled] == 0).all()
    assert torch.equal(out.inputs, data.inputs)  # no trigger
    few = ATTACKS.build(
        "edge_case", {"fraction": 0.25, "poison_ratio": 0.04}, ctx=_ctx(counts=counts)
    )
    assert isinstance(few, PoisoningAttack)
    assert len(few.poison_indices(data)) == 2  # ⌊0.04·50 + ½⌋ = 2 of the 5


class _Recorder:
    """A trainer stub that records the data it trains on."""

    def __init__(self) -> None:
        self.seen: list[ClientData] = []

    def state_specs(self) -> dict[str, Any]:
        return {}

    def __call__(self, params: torch.Tensor, data: ClientData, d: Any, g: Any, **kw: Any) -> Any:
        self.seen.append(data)
        return ClientUpdate(torch.ones(2), UpdateMeta(data.client_id, len(data), d.round))


def test_client_step_trains_attackers_on_poisoned_data_and_boosts() -> None:
    attack = _backdoor(fraction=0.25, boost=8.0)
    rec = _Recorder()
    program = ClientProgram(rec, LocalTrainParams(), attack=attack)  # type: ignore[arg-type]
    for k in range(4):
        data = _data(k)
        res = client_step(
            program,
            torch.zeros(2),
            data,
            ClientState({}, ()),
            ClientDirectives(1, k),
            ClientStreams((7, "round", 1, "client", k)),
        )
        malicious = k in attack.clients
        assert (rec.seen[-1] is data) is not malicious
        assert res.update.delta.tolist() == ([8.0, 8.0] if malicious else [1.0, 1.0])
        if malicious:
            assert int((rec.seen[-1].targets != data.targets).sum()) > 0


# ------------------------------------------------------------------------------- ASR
def test_asr_excludes_samples_of_the_target_class() -> None:
    pred = torch.tensor([0, 0, 1, 0, 0])
    true = torch.tensor([1, 0, 2, 2, 0])  # two of class 0 left out: 2 of 3 hit
    assert attack_success_rate(pred, true, 0) == pytest.approx(2 / 3)
    assert math.isnan(attack_success_rate(pred, torch.zeros(5, dtype=torch.long), 0))


class _CornerModel(nn.Module):
    """Predicts class 0 iff pixel (5, 5) of band 0 is above 0.5, else class 1 + band-1 sign."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hit = x[:, 0, 5, 5] > 0.5
        other = 1 + (x[:, 1].mean((1, 2)) > 0).long()
        pred = torch.where(hit, torch.zeros_like(other), other)
        return nn.functional.one_hot(pred, 3).float()


def test_probe_measures_asr_on_triggered_non_target_samples() -> None:
    attack = _backdoor(fraction=0.25, target=0, trigger={"size": 1, "values": [1.0, 0.0, 0.0]})
    test_y = torch.tensor([0, 1, 2, 0, 1, 2])
    probe = attack.probe(test_y)
    assert probe.index.tolist() == [1, 2, 4, 5]
    x = torch.zeros(6, *SHAPE)
    assert probe.measure(_CornerModel(), x, batch_size=3) == 1.0  # every triggered one hits
    off = BackdoorProbe(probe.index, 0, None)  # no trigger: nothing flips
    assert off.measure(_CornerModel(), x, batch_size=3) == 0.0
    x[4, 0, 5, 5] = -3.0  # the trigger replaces the pixel, so this still hits
    assert probe.measure(_CornerModel(), x, batch_size=2) == 1.0
    half = make_trigger(TriggerParams(size=1, values=[1.0, 0, 0], opacity=0.5), SHAPE, 0, "t")
    x[4, 0, 5, 5], x[5, 0, 5, 5] = -3.0, 0.5
    # blended ½·x + ½·1: samples 1, 2 → 0.5 (not > 0.5, miss), 4 → −1.0 (miss), 5 → 0.75 (hit)
    assert BackdoorProbe(probe.index, 0, half).measure(_CornerModel(), x, 4) == 0.25


def test_same_seed_same_threat() -> None:
    a, b = _backdoor(fraction=0.25), _backdoor(fraction=0.25)
    assert a.attackers == b.attackers and a.trigger is not None and b.trigger is not None
    assert torch.equal(a.trigger.patch, b.trigger.patch)
    desc = a.describe([_data(k) for k in range(4)])
    assert desc["attackers"] == list(a.attackers) and desc["poisoned"] == {str(a.attackers[0]): 10}
    assert desc["trigger"]["row"] == 3 and desc["trigger"]["size"] == 3


def test_params_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match=r"Byzantine fraction 0\.5 must be in"):
        BackdoorParams(fraction=0.5)
    with pytest.raises(ValueError, match="source class 0 is the target"):
        EdgeCaseParams(source=0, target=0)
