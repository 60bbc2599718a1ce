"""Schedules over rounds, early stopping, best-model metric, rounds to target (001 §6.1.2/4).

Numbers are hand-checkable: 001's step schedule (10⁻³ halved every 30 rounds), constructed
validation-loss and test-accuracy sequences.
"""

from __future__ import annotations

import math

import pytest

from geofl.client.trainer import LocalTrainParams, train_for_round
from geofl.config.schema import EarlyStoppingConfig, TargetConfig
from geofl.engine.evaluation.convergence import EarlyStopper, communication, rounds_to_target
from geofl.records import RoundRecord, RoundStatus
from geofl.server.lr_schedule import LR_SCHEDULES
from geofl.tasks.base import SplitMetrics
from geofl.update import LR_DIRECTIVE, ClientDirectives


def _schedule(name: str, rounds: int = 100, **params: object) -> object:
    return LR_SCHEDULES.build(name, params, base_lr=1e-3, rounds=rounds)


def test_step_schedule_of_001_halves_every_30_rounds() -> None:
    step = _schedule("step", every=30, factor=0.5)
    assert callable(step)
    assert [step(r) for r in (1, 30, 31, 60, 61, 91)] == [
        1e-3,
        1e-3,
        5e-4,
        5e-4,
        2.5e-4,
        1.25e-4,
    ]


def test_constant_and_cosine_schedules() -> None:
    constant = _schedule("constant")
    cosine = _schedule("cosine", rounds=10, final_factor=0.1)
    assert callable(constant) and callable(cosine)
    assert constant(1) == constant(77) == 1e-3
    assert cosine(1) == pytest.approx(1e-3)
    assert cosine(6) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))  # half-way: cos(π/2) = 0
    assert cosine(11) == pytest.approx(1e-4)


def test_train_params_take_the_rounds_lr_from_the_directives() -> None:
    base = LocalTrainParams(optimizer="adam", lr=1e-3)
    assert train_for_round(base, ClientDirectives(3, 0)) is base  # nothing sent: unchanged
    scheduled = train_for_round(base, ClientDirectives(31, 0, {LR_DIRECTIVE: 5e-4}))
    assert scheduled.lr == 5e-4 and scheduled.optimizer == "adam" and base.lr == 1e-3


def _record(r: int, *, val_loss: float | None = None, acc: float | None = None) -> RoundRecord:
    val = None if val_loss is None else SplitMetrics({"loss": val_loss}, n=10)
    test = None if acc is None else SplitMetrics({"accuracy": acc, "loss": 1.0}, n=10)
    return RoundRecord(
        r, RoundStatus.AGGREGATED, [0], [1.0], bytes_up=100, bytes_down=200, val=val, test=test
    )


def test_early_stopping_after_patience_rounds_without_gain() -> None:
    """Best 0.8 at round 2; 0.8 again at 5 is no gain; 5 − 2 = 3 = patience → stop at 5."""
    stopper = EarlyStopper(EarlyStoppingConfig(metric="loss", patience=3), "min")
    losses = [1.0, 0.8, 0.9, 0.85, 0.8]
    stops = [stopper.update(r, v) for r, v in enumerate(losses, start=1)]
    assert stops == [False, False, False, False, True]
    assert stopper.best_round == 2 and stopper.stopped_at == 5


def test_early_stopping_min_delta_nan_and_skipped_rounds() -> None:
    stopper = EarlyStopper(EarlyStoppingConfig(patience=4, min_delta=0.05), "min")
    # round 2 gains 0.04 < min_delta (no gain); NaN never gains; rounds 3, 5 not evaluated
    records = [
        _record(1, val_loss=1.0),
        _record(2, val_loss=0.96),
        _record(3),
        _record(4, val_loss=math.nan),
        _record(5),
        _record(6, val_loss=0.9),
        _record(9, val_loss=0.89),
        _record(10, val_loss=0.88),
    ]
    stops = [stopper.observe(r) for r in records]
    assert stops == [False, False, False, False, False, False, False, True]
    assert stopper.best_round == 6 and stopper.stopped_at == 10
    assert stopper.to_json()["best_val"] == 0.9


def test_rounds_to_target_and_communication() -> None:
    """Test accuracy 0.5, 0.7, 0.82, 0.79: ≥ 0.8 first in round 3, after 3 × 300 bytes."""
    records = [_record(r, acc=a) for r, a in enumerate([0.5, 0.7, 0.82, 0.79], start=1)]
    hit = rounds_to_target(records, TargetConfig(metric="accuracy", value=0.8), "max")
    assert hit["round"] == 3 and hit["bytes_total"] == 900
    miss = rounds_to_target(records, TargetConfig(metric="accuracy", value=0.9), "max")
    assert miss["round"] is None and miss["bytes_total"] is None
    low = rounds_to_target(records, TargetConfig(metric="loss", value=1.0), "min")
    assert low["round"] == 1
    assert communication(records) == {
        "rounds": 4,
        "bytes_up": 400,
        "bytes_down": 800,
        "bytes_total": 1200,
    }
