"""Typed round records: JSON round trip, pre-typed records, damaged rounds.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from geofl.errors import RunDirError
from geofl.records import (
    Rejection,
    RejectionReason,
    RoundRecord,
    RoundStatus,
    metrics_from_json,
    metrics_to_json,
    read_rounds,
)
from geofl.tasks.base import SplitMetrics

METRICS = {
    "accuracy": 0.5,
    "macro_f1": 0.25,
    "loss": 1.5,
    "per_class_accuracy": [0.5, 0.0, 1.0],
    "n": 10,
}


def _full() -> RoundRecord:
    return RoundRecord(
        round=4,
        status=RoundStatus.AGGREGATED,
        participants=[0, 3],
        weights=[0.25, 0.75],
        rejected=[
            Rejection(1, RejectionReason.MALFORMED, "delta has 3 non-finite values (NaN/Inf)"),
            Rejection(2, RejectionReason.LOST_IN_TRANSIT),
        ],
        excluded=[5],
        cohort=[0, 1, 2, 3, 5],
        sampling={"scheme": "poisson", "rate": 0.05},
        train_loss=1.25,
        train_metrics={"accuracy": 0.5},
        bytes_up=96,
        bytes_down=240,
        update_norms=[0.5, 2.0],
        client_log={"0": {"l2_clip": {"norm": 3.0, "bound": 1.0, "clipped": True}}},
        time_s={"train": 0.5, "total": 1.0},
        model_sha256="ab" * 32,
        update_set_sha256="cd" * 32,
        val=metrics_from_json(METRICS),
        test=metrics_from_json(METRICS),
        strategy={"control_norm": 0.125},
    )


def test_to_json_from_json_round_trip() -> None:
    rec = _full()
    line = json.dumps(rec.to_json())  # what rounds.jsonl holds
    data = json.loads(line)
    assert data["status"] == "aggregated"
    assert data["rejected"] == [
        {"client": 1, "reason": "malformed", "detail": "delta has 3 non-finite values (NaN/Inf)"},
        {"client": 2, "reason": "lost in transit", "detail": ""},
    ]
    back = RoundRecord.from_json(data)
    assert back == rec
    assert back.status is RoundStatus.AGGREGATED
    assert back.rejected[1].reason is RejectionReason.LOST_IN_TRANSIT
    assert back.failed_clients == [1, 2] and back.evaluated


#: A round record exactly as the engine wrote it before tasks existed (key order included).
LEGACY_LINE = (
    '{"round": 3, "status": "aggregated", "participants": [0, 1], "weights": [0.5, 0.5], '
    '"rejected": [], "excluded": [], "cohort": [0, 1], "sampling": {"scheme": "fixed", '
    '"rate": null}, "train_loss": 1.25, "train_accuracy": 0.625, "bytes_up": 8, '
    '"bytes_down": 8, "aggregation_error": null, "update_norms": [0.5, 0.25], '
    '"client_log": {}, "time_s": {"train": 0.5}, "model_sha256": "ab", '
    '"update_set_sha256": "cd", "val": {"accuracy": 0.5, "macro_f1": 0.25, "loss": 1.5, '
    '"per_class_accuracy": [0.5, null, 1.0], "n": 10}, "test": {"accuracy": 0.5, '
    '"macro_f1": 0.25, "loss": 1.5, "per_class_accuracy": [0.5, null, 1.0], "n": 10}, '
    '"strategy": {}}'
)


def test_classification_record_json_is_byte_identical_to_the_pre_task_layout() -> None:
    rec = RoundRecord.from_json(json.loads(LEGACY_LINE))
    assert rec.train_metrics == {"accuracy": 0.625} and rec.train_accuracy == 0.625
    assert rec.val is not None and rec.val["accuracy"] == 0.5 and rec.val.n == 10
    assert rec.val.per_class["accuracy"][0] == 0.5
    from geofl.io import dumps_line

    assert dumps_line(rec.to_json()) == LEGACY_LINE


def test_other_tasks_write_their_metric_names() -> None:
    m = SplitMetrics({"rmse": 0.5, "loss": 0.25}, {"rmse": [0.5]}, 4, ("a note",))
    rec = RoundRecord(1, RoundStatus.AGGREGATED, [0], [1.0], train_metrics={"rmse": 0.75}, test=m)
    data = json.loads(json.dumps(rec.to_json()))
    assert data["train_rmse"] == 0.75 and "train_accuracy" not in data
    assert data["test"] == {
        "rmse": 0.5,
        "loss": 0.25,
        "per_class_rmse": [0.5],
        "n": 4,
        "notes": ["a note"],
    }
    back = RoundRecord.from_json(data)
    assert back == rec and back.train_accuracy is None
    assert metrics_from_json(metrics_to_json(m)) == m


@pytest.mark.parametrize("status", list(RoundStatus))
def test_every_status_round_trips_and_unevaluated_rounds_omit_metrics(status: RoundStatus) -> None:
    rec = RoundRecord(round=2, status=status, participants=[], weights=[])
    data = json.loads(json.dumps(rec.to_json()))
    assert "val" not in data and "test" not in data
    back = RoundRecord.from_json(data)
    assert back == rec and back.status is status and not back.evaluated


def _pre_typed(**over: Any) -> dict[str, Any]:
    """A record as the engine wrote it before records were typed: no status, validator text
    as the rejection reason."""
    data: dict[str, Any] = {
        "round": 2,
        "participants": [0, 3],
        "weights": [0.5, 0.5],
        "rejected": [
            {"client": 1, "reason": "delta has 3 non-finite values (NaN/Inf)"},
            {"client": 2, "reason": "lost in transit"},
        ],
        "excluded": [],
        "train_loss": 2.0,
        "train_accuracy": 0.25,
        "bytes_up": 64,
        "update_norms": [1.0, 1.0],
        "time_s": {"total": 0.1},
        "model_sha256": "00" * 32,
        "val": {k: v for k, v in METRICS.items() if k != "per_class_accuracy"},
        "test": dict(METRICS),
    }
    data.update(over)
    return data


def test_pre_typed_record_loads_with_typed_reasons_and_inferred_status() -> None:
    rec = RoundRecord.from_json(_pre_typed())
    assert rec.status is RoundStatus.AGGREGATED  # it had participants
    assert rec.rejected == [
        Rejection(1, RejectionReason.MALFORMED, "delta has 3 non-finite values (NaN/Inf)"),
        Rejection(2, RejectionReason.LOST_IN_TRANSIT, ""),
    ]
    assert rec.failed_clients == [1, 2]
    assert rec.cohort == [] and rec.sampling == {} and rec.strategy == {}
    assert rec.bytes_down == 0 and rec.update_set_sha256 == ""
    # and it is written back in the typed layout
    again = RoundRecord.from_json(json.loads(json.dumps(rec.to_json())))
    assert again == rec


def test_pre_typed_status_inference() -> None:
    failed = RoundRecord.from_json(
        _pre_typed(participants=[0, 3], aggregation_error="Krum needs more than 4 updates")
    )
    assert failed.status is RoundStatus.AGGREGATION_FAILED
    assert failed.aggregation_error == "Krum needs more than 4 updates"
    none = RoundRecord.from_json(_pre_typed(participants=[], weights=[]))
    assert none.status is RoundStatus.NO_UPDATES


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_read_rounds_mixes_typed_and_pre_typed_lines(tmp_path: Path) -> None:
    typed = _full()
    path = _write_lines(
        tmp_path / "rounds.jsonl",
        [json.dumps(_pre_typed(round=1)), json.dumps(typed.to_json())],
    )
    records = read_rounds(path)
    assert [r.round for r in records] == [1, 4]
    assert records[1] == typed
    assert read_rounds(tmp_path / "absent.jsonl") == []


@pytest.mark.parametrize(
    "damaged",
    [
        '{"round": 2, "participants": [0',  # torn
        '{"participants": [0]}',  # no round
        '{"round": 2, "participants": [0], "status": "exploded"}',  # unknown status
        '{"round": "two", "participants": []}',  # wrong type
        "[1, 2]",  # not an object
    ],
)
def test_read_rounds_strict_names_file_and_line(tmp_path: Path, damaged: str) -> None:
    good = [json.dumps(_pre_typed(round=r)) for r in (1, 3)]
    path = _write_lines(tmp_path / "rounds.jsonl", [good[0], damaged, good[1]])
    with pytest.raises(RunDirError, match=r"rounds\.jsonl:2: damaged round record") as err:
        read_rounds(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    # non-strict reading (resume after a crash) keeps what precedes the damage
    assert [r.round for r in read_rounds(path, strict=False)] == [1]


def test_non_finite_statistics_are_written_as_null_and_read_back(tmp_path: Path) -> None:
    from geofl.io import dumps_line

    inf, nan = float("inf"), float("nan")
    rec = RoundRecord(
        round=1,
        status=RoundStatus.AGGREGATED,
        participants=[0, 1],
        weights=[nan, 1.0],
        update_norms=[inf, 0.5],
        update_noise=[nan, 0.25],
        time_s={"train": inf},
        strategy={"cgf.score.0": -inf},
        epsilon={"0": inf, "1": 2.0},  # a non-private client's ε
    )
    line = dumps_line(rec.to_json())  # strict JSON: non-finite numbers become null
    assert "Infinity" not in line and "NaN" not in line
    (back,) = read_rounds(_write_lines(tmp_path / "rounds.jsonl", [line]))
    assert math.isnan(back.update_norms[0]) and back.update_norms[1] == 0.5
    assert math.isnan(back.update_noise[0]) and math.isnan(back.weights[0])
    assert math.isnan(back.time_s["train"]) and math.isnan(back.strategy["cgf.score.0"])
    assert back.epsilon == {"0": inf, "1": 2.0}
