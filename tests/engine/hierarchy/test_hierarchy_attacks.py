"""Issue 32 item 3: the paper-004 threat model among the tractors of the 003 hierarchy.

The hierarchy trains on tabular crop-stress features (a binary task), so the backdoor needs a
feature trigger and an ASR probe that reads the binary task's thresholded logit; DUAL-SHIELD
at the GEO keeps reputations of LEO relays, so tractors must not be sent them. Unit tests
with hand-checkable numbers, then tiny hierarchy runs (12 tractors, ideal contacts): the
backdoor, scaling and adaptive attackers act on their tractors' uploads, and ASR is
measured on the test split's non-target samples with the trigger stamped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run
from torch import nn

from geofl.attacks.backdoor import PoisoningAttack
from geofl.attacks.client import ATTACKS, AttackContext
from geofl.attacks.probe import ASR_METRIC, BackdoorProbe
from geofl.attacks.trigger import (
    FeatureTrigger,
    TriggerParams,
    make_backdoor_trigger,
)
from geofl.config.validate import validate_config
from geofl.engine.hierarchy.geo import TractorPlan
from geofl.engine.hierarchy.scheduler import HierarchicalScheduler
from geofl.errors import ConfigError
from geofl.privacy.adaptive import REPUTATION_KEY
from geofl.tasks.binary import BinaryTask

# --- the feature trigger ---------------------------------------------------------------


def test_feature_trigger_sets_the_last_features_to_given_values() -> None:
    params = TriggerParams(size=2, values=[4.0, -4.0])
    trig = make_backdoor_trigger(params, (5,), seed=1, path="attack.trigger")
    assert isinstance(trig, FeatureTrigger)
    x = torch.arange(10, dtype=torch.float32).reshape(2, 5)
    out = trig.stamp(x)
    assert out.tolist() == [[0.0, 1.0, 2.0, 4.0, -4.0], [5.0, 6.0, 7.0, 4.0, -4.0]]
    assert x[0, 3] == 3.0  # the input is not modified


def test_feature_trigger_top_left_opacity_and_seeded_signs() -> None:
    params = TriggerParams(size=3, position="top_left", amplitude=2.0, opacity=0.5)
    a = make_backdoor_trigger(params, (4,), seed=7, path="t")
    b = make_backdoor_trigger(params, (4,), seed=7, path="t")
    assert isinstance(a, FeatureTrigger) and isinstance(b, FeatureTrigger)
    assert a.features.tolist() == [0, 1, 2]
    assert torch.equal(a.values, b.values) and set(a.values.abs().tolist()) == {2.0}
    out = a.stamp(torch.zeros(1, 4))
    assert torch.allclose(out[0, :3], 0.5 * a.values) and out[0, 3] == 0.0


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"size": 6}, "t.size"),
        ({"position": (0, 1)}, "t.position"),
        ({"size": 2, "values": [1.0]}, "t.values"),
    ],
)
def test_feature_trigger_refuses_what_does_not_fit(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_backdoor_trigger(TriggerParams(**params), (5,), seed=1, path="t")
    assert str(err.value).startswith(field)


# --- the ASR probe on a binary model ---------------------------------------------------


class _Healthy(nn.Module):
    """One logit: −1 (healthy, class 0) unless feature 0 is above 3 (then +1, stressed)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x[:, :1] > 3.0, 1.0, -1.0)


def test_binary_asr_uses_the_tasks_threshold_not_an_argmax_over_one_logit() -> None:
    # 4 test samples, 3 stressed (true 1 ≠ target 0); the trigger sets feature 0 to 4 on
    # them, the model calls feature 0 > 3 stressed: no triggered sample is called healthy.
    ctx = AttackContext(1, 10, (3,), (1, 3), path="a")
    attack = ATTACKS.build(
        "backdoor",
        {
            "fraction": 0.2,
            "target": 0,
            "trigger": {"size": 1, "position": "top_left", "values": [4.0]},
        },
        ctx=ctx,
    )
    assert isinstance(attack, PoisoningAttack)
    targets = torch.tensor([1, 0, 1, 1])
    probe = attack.probe(targets, BinaryTask().predict)
    assert isinstance(probe, BackdoorProbe) and probe.index.tolist() == [0, 2, 3]
    assert probe.measure(_Healthy(), torch.zeros(4, 3), 2) == 0.0  # argmax of [B, 1]: 1.0
    # with the trigger at 2.0 the model calls them healthy: every one is a hit
    low = BackdoorProbe(probe.index, 0, FeatureTrigger(torch.tensor([0]), torch.tensor([2.0])))
    low = BackdoorProbe(low.index, 0, low.trigger, BinaryTask().predict)
    assert low.measure(_Healthy(), torch.zeros(4, 3), 2) == 1.0


# --- the hierarchy ---------------------------------------------------------------------

IDEAL = {"leo": {"contacts": "ideal", "n": 4, "planes": 2}, "staleness_metric": False}
TRIGGER = {"size": 3, "amplitude": 4.0}
BACKDOOR = {"name": "backdoor", "fraction": 0.25, "poison_ratio": 0.5, "target": 0}
SHIELD = {"algorithm": {"name": "dual_shield", "k_min": 2}, "weighting": {"name": "uniform"}}


def _attack(**over: Any) -> dict[str, Any]:
    return {**BACKDOOR, "trigger": TRIGGER, **over}


def test_backdoor_on_the_tractors_task_passes_validation(tmp_path: Path) -> None:
    cfg = config(tmp_path, agri_raw(IDEAL, attack=_attack()))
    validate_config(cfg)  # before: "backdoor attacks need single-label classification"


def _collect(tmp_path: Path, name: str, **method: Any) -> Any:
    run = make_run(config(tmp_path, agri_raw(IDEAL, rounds=1, **method), name), tmp_path / name)
    assert isinstance(run.scheduler, HierarchicalScheduler)
    return run, run.scheduler.sync.collect(run.init_params, list(range(12)), 1)


def test_backdoor_and_scaling_attackers_act_on_their_tractors_only(tmp_path: Path) -> None:
    _, clean = _collect(tmp_path, "clean")
    run, bad = _collect(tmp_path, "bad", attack=_attack())
    _, boosted = _collect(tmp_path, "boost", attack=_attack(boost=8.0))
    attackers = set(run.comps.threat["attackers"])
    assert len(attackers) == 3  # ⌊0.25 · 12⌋
    for i, k in enumerate(range(12)):
        same = torch.equal(bad.accepted[i].delta, clean.accepted[i].delta)
        assert same == (k not in attackers), k  # poisoned data changes only attackers
        if k in attackers:  # model replacement: γ·Δw of the same backdoored update
            assert torch.allclose(boosted.accepted[i].delta, 8.0 * bad.accepted[i].delta)
        else:
            assert torch.equal(boosted.accepted[i].delta, clean.accepted[i].delta)


def test_asr_is_measured_on_the_triggered_non_target_test_samples(tmp_path: Path) -> None:
    run = make_run(config(tmp_path, agri_raw(IDEAL, attack=_attack()), "asr"), tmp_path / "a")
    probe = run.comps.probe
    assert isinstance(probe, BackdoorProbe) and isinstance(probe.trigger, FeatureTrigger)
    test = run.data.test.targets
    assert torch.equal(probe.index, torch.nonzero(test != 0).reshape(-1))  # stressed
    got = run.evaluate(run.init_params)["test"]
    model = run.workspace.module
    x = probe.trigger.stamp(run.data.test.inputs[probe.index])
    with torch.inference_mode():
        want = float((BinaryTask().predict(model(x)) == 0).float().mean())
    assert got.values[ASR_METRIC] == pytest.approx(want)
    assert ASR_METRIC not in run.evaluate(run.init_params)["val"].values


def test_tractors_are_not_sent_the_geos_leo_reputations(tmp_path: Path) -> None:
    raw = agri_raw(IDEAL, rounds=2, attack=_attack(name="adaptive_cgf"), **SHIELD)
    run = make_run(config(tmp_path, raw, "adaptive"), tmp_path / "adaptive")
    params = run.init_params
    for r in (1, 2):
        params = run.scheduler.round(params, r).params
        run.comps.store.commit()
    inner = run.comps.strategy.configure(3, list(range(12)))
    assert all(REPUTATION_KEY in inner.extra[k] for k in range(12))  # the LEO-indexed book
    sync = run.scheduler.sync.c.strategy
    assert isinstance(sync, TractorPlan)
    plan = sync.configure(3, list(range(12)))
    assert all(REPUTATION_KEY not in plan.extra[k] for k in range(12))
    assert all(set(plan.extra[k]) == set(inner.extra[k]) - {REPUTATION_KEY} for k in range(12))
    attack = run.comps.program.attack
    assert all(attack.attacks(k, 3) for k in attack.clients)  # on schedule, no r to read
