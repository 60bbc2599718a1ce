"""The Adaptive-CGF attacker (004 Table 7): projection, norm cap, timing, on hand examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geofl.attacks.adaptive import (
    AdaptiveCgfAttack,
    AdaptiveOdaAttack,
    cosine_distance,
    project_to_cone,
)
from geofl.attacks.client import ATTACKS, AttackContext
from geofl.client.data import ClientData
from geofl.privacy.adaptive import REPUTATION_KEY, public_norm_key
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

SHAPE = (3, 6, 6)


def test_projection_by_hand() -> None:
    # u = (0, 3, 4) is orthogonal to ref = e0 (s = 1); target s* = 0.2 → cos = 0.8, sin = 0.6;
    # the rotated u keeps ‖u‖ = 5 and its off-reference direction (0, 0.6, 0.8):
    # 5 (0.8, 0.6·0.6, 0.6·0.8) = (4, 1.8, 2.4); capped at norm 2.5: (2, 0.9, 1.2).
    u, ref = torch.tensor([0.0, 3.0, 4.0]), torch.tensor([2.0, 0.0, 0.0])
    v = project_to_cone(u, ref, 0.2, None)
    assert torch.allclose(v, torch.tensor([4.0, 1.8, 2.4]), atol=1e-6)
    assert cosine_distance(v, ref) == pytest.approx(0.2)
    w = project_to_cone(u, ref, 0.2, 2.5)
    assert torch.allclose(w, torch.tensor([2.0, 0.9, 1.2]), atol=1e-6)
    assert cosine_distance(w, ref) <= 0.2 + 1e-6 and float(w.norm()) <= 2.5 + 1e-6


def test_projection_keeps_an_update_already_inside_and_handles_antiparallel() -> None:
    ref = torch.tensor([1.0, 0.0])
    inside = torch.tensor([3.0, 1.0])  # s = 1 − 3/√10 = 0.051
    assert torch.equal(project_to_cone(inside, ref, 0.2, None), inside)
    assert torch.equal(project_to_cone(inside, None, 0.2, None), inside)
    flipped = project_to_cone(torch.tensor([-2.0, 0.0]), ref, 0.2, None)
    assert torch.allclose(flipped, torch.tensor([2.0, 0.0]))


@pytest.mark.parametrize("seed", range(5))
def test_random_projection_meets_both_targets(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    u, ref = 10 * torch.randn(500, generator=gen), torch.randn(500, generator=gen)
    v = project_to_cone(u, ref, 0.3, 1.5)
    assert cosine_distance(v, ref) <= 0.3 + 1e-6
    assert float(v.norm()) <= 1.5 * (1 + 1e-6)


def _attack(**params: object) -> AdaptiveCgfAttack:
    ctx = AttackContext(7, 10, SHAPE, (5,) * 10, path="methods.0.attack")
    a = ATTACKS.build("adaptive_cgf", {"fraction": 0.2, **params}, ctx=ctx)
    assert isinstance(a, AdaptiveCgfAttack)
    return a


def _data(client: int, n: int = 20) -> ClientData:
    targets = torch.arange(n) % 10
    return ClientData(client, torch.zeros(n, *SHAPE), targets, np.bincount(targets, minlength=10))


def test_attacker_uses_the_last_global_change_and_public_clip() -> None:
    a = _attack(max_distance=0.2)
    k = min(a.clients)
    w1, w2 = torch.zeros(3), torch.tensor([1.0, 0.0, 0.0])
    norms = {public_norm_key(1): 2.0, public_norm_key(2): 3.0, public_norm_key(3): 2.5}
    a.observe(w1, ClientDirectives(1, k, {REPUTATION_KEY: 0.5}))
    d2 = ClientDirectives(2, k, {REPUTATION_KEY: 0.5, **norms})
    a.observe(w2, d2)
    assert torch.equal(a.reference(2), w2 - w1)  # type: ignore[arg-type]
    upd = ClientUpdate(torch.tensor([0.0, 3.0, 4.0]), UpdateMeta(k, 10, 2))
    out = a(upd, d2, torch.Generator())
    # rotated to (4, 1.8, 2.4), then capped at the median public norm 2.5
    assert torch.allclose(out.delta, torch.tensor([2.0, 0.9, 1.2]), atol=1e-6)


def test_attacker_pauses_below_the_reputation_floor_and_off_schedule() -> None:
    a = _attack(reputation_floor=0.3, schedule={"period": 2})
    k = min(a.clients)
    a.observe(torch.zeros(3), ClientDirectives(1, k, {REPUTATION_KEY: 0.29}))
    assert not a.attacks(k, 1)  # round 1 on schedule, but r < floor
    data = _data(k)
    assert a.poison(data, 1) is data
    a.observe(torch.zeros(3), ClientDirectives(3, k, {REPUTATION_KEY: 0.3}))
    assert a.attacks(k, 3) and not a.attacks(k, 2)
    assert not torch.equal(a.poison(data, 3).targets, data.targets)
    honest = ClientUpdate(torch.tensor([0.0, 3.0, 4.0]), UpdateMeta(k, 10, 2))
    assert a(honest, ClientDirectives(2, k, {REPUTATION_KEY: 0.9}), torch.Generator()) is honest


def test_describe_says_what_it_targets() -> None:
    a = _attack(max_distance=0.1, max_norm=3.0)
    d = a.describe([_data(k) for k in range(10)])
    assert (d["attack"], d["max_distance"], d["max_norm"]) == ("adaptive_cgf", 0.1, 3.0)
    assert math.isclose(d["reputation_floor"], 0.3)


def _adaptive_oda(**params: object) -> AdaptiveOdaAttack:
    ctx = AttackContext(7, 10, SHAPE, (5, 5), path="methods.0.attack")
    a = ATTACKS.build("adaptive_oda", {"fraction": 0.2, "trigger": {"size": 2}, **params}, ctx=ctx)
    assert isinstance(a, AdaptiveOdaAttack)
    return a


def _scenes(client: int, n: int = 10) -> ClientData:
    """n images, each with one class-0 object and one class-1 object."""
    y = torch.tensor([[0.0, 0, 2, 2, 1], [3.0, 3, 5, 5, 0]]).repeat(n, 1, 1)
    return ClientData(client, torch.zeros(n, *SHAPE), y, np.array([n, n]))


def test_adaptive_oda_times_poisons_and_projects_like_adaptive_cgf() -> None:
    """The detection Adaptive-CGF: ODA poisoning (target boxes removed under the trigger)
    only in rounds the schedule and the reputation floor allow, and the same projection
    and public-clip cap as ``adaptive_cgf`` (the hand example above)."""
    a = _adaptive_oda(reputation_floor=0.3, poison_ratio=0.2)
    k = min(a.clients)
    data = _scenes(k)
    a.observe(torch.zeros(3), ClientDirectives(1, k, {REPUTATION_KEY: 0.29}))
    assert a.poison(data, 1) is data  # below the floor: honest data
    w2 = torch.tensor([1.0, 0.0, 0.0])
    norms = {public_norm_key(1): 2.0, public_norm_key(2): 3.0, public_norm_key(3): 2.5}
    d2 = ClientDirectives(2, k, {REPUTATION_KEY: 0.5, **norms})
    a.observe(w2, d2)
    poisoned = a.poison(data, 2)
    idx = a.poison_indices(data)
    assert len(idx) == 2  # ⌊0.2·10 + ½⌋
    assert poisoned.targets[idx][..., 4].tolist() == [[1.0, -1.0]] * 2  # class-0 boxes gone
    assert (poisoned.inputs[idx] != 0).any() and not (poisoned.inputs[~_mask(idx, 10)] != 0).any()
    upd = ClientUpdate(torch.tensor([0.0, 3.0, 4.0]), UpdateMeta(k, 10, 2))
    out = a(upd, d2, torch.Generator())
    assert torch.allclose(out.delta, torch.tensor([2.0, 0.9, 1.2]), atol=1e-6)
    d = a.describe([_scenes(j) for j in range(10)])
    assert (d["attack"], d["placement"], d["max_distance"]) == ("adaptive_oda", "center", 0.2)


def _mask(idx: torch.Tensor, n: int) -> torch.Tensor:
    m = torch.zeros(n, dtype=torch.bool)
    m[idx] = True
    return m
