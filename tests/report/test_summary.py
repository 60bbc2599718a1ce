"""Summary statistics over seeds (geofl.report.summary)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from geofl.errors import RunDirError
from geofl.report import summarize_run, write_summary
from geofl.report.summary import Stat, format_pm, load_run, make_stat
from geofl.tasks.metrics import rolling_std

MakeRunDir = Any


def test_final_accuracy_mean_and_sample_std(run_dir: Path) -> None:
    stat = summarize_run(run_dir)["methods"]["fedavg"]["final_test_accuracy"]
    assert stat["values"] == pytest.approx([0.90, 0.94])
    assert stat["n"] == 2
    assert stat["mean"] == pytest.approx(0.92)
    assert stat["std"] == pytest.approx(math.sqrt(2) * 0.02)  # ddof=1: 0.0282843


def test_summary_structure(run_dir: Path) -> None:
    summary = summarize_run(run_dir)
    assert summary["name"] == "fake-run"
    assert summary["seeds"] == [0, 1]
    assert list(summary["methods"]) == ["centralized", "fedavg", "consistency"]
    for ms in summary["methods"].values():
        assert ms["seeds_done"] == [0, 1]
        assert ms["incomplete"] == []
        for stat in (ms["final_test_macro_f1"], ms["final_test_loss"], ms["best_val_round"]):
            assert stat["n"] == 2


def test_best_val_and_rolling_std_match_the_files(run_dir: Path) -> None:
    ms = summarize_run(run_dir)["methods"]["consistency"]
    seed_dirs = [run_dir / "methods" / "consistency" / f"seed-{s}" for s in (0, 1)]
    finals = [json.loads((d / "final.json").read_text()) for d in seed_dirs]
    assert ms["best_val_round"]["values"] == [f["best_val"]["round"] for f in finals]
    assert ms["best_val_test_accuracy"]["values"] == pytest.approx(
        [f["best_val"]["test"]["accuracy"] for f in finals]
    )
    expected = []
    for d in seed_dirs:
        lines = (d / "rounds.jsonl").read_text().splitlines()
        acc = np.array([json.loads(line)["test"]["accuracy"] for line in lines])
        expected.append(float(rolling_std(acc, 10)[-1]))
    assert ms["final_rolling_std"]["values"] == pytest.approx(expected)
    assert all(v > 0 for v in expected)


def test_make_stat_edge_cases() -> None:
    one = make_stat([0.5])
    assert (one["mean"], one["std"], one["n"]) == (0.5, 0.0, 1)
    empty = make_stat([])
    assert empty["n"] == 0
    assert math.isnan(empty["mean"])
    assert math.isnan(empty["std"])
    skipped = make_stat([0.5, math.nan, 0.7])
    assert skipped["values"] == [0.5, 0.7]
    assert skipped["n"] == 2


def test_format_pm() -> None:
    stat = Stat(mean=0.9504, std=0.0032, values=[], n=3)
    assert format_pm(stat) == "95.04 ± 0.32"
    assert format_pm(stat, digits=1) == "95.0 ± 0.3"
    assert format_pm(make_stat([12.5]), scale=1.0, digits=0) == "12"  # n = 1: no spread
    assert format_pm(make_stat([])) == "–"


def test_incomplete_seed_is_listed_and_skipped(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(incomplete=[("fedavg", 1)], missing=[("consistency", 0)])
    methods = summarize_run(run_dir)["methods"]
    fedavg = methods["fedavg"]
    assert fedavg["seeds_done"] == [0]
    assert fedavg["incomplete"] == [1]
    assert fedavg["final_test_accuracy"]["mean"] == pytest.approx(0.90)
    assert fedavg["final_test_accuracy"]["std"] == 0.0
    assert methods["consistency"]["incomplete"] == [0]  # seed directory missing entirely
    assert methods["consistency"]["seeds_done"] == [1]


def test_paper_entry(run_dir: Path) -> None:
    methods = summarize_run(run_dir)["methods"]
    assert methods["fedavg"]["paper"] == {
        "final_test_accuracy": "72.91 ± 2.82",
        "source": "000 Table 1 row 3",
    }
    assert methods["centralized"]["paper"] is None


def test_write_summary_is_strict_json(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(incomplete=[("fedavg", 0), ("fedavg", 1)], paper={})

    def no_nan(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token}")

    returned = write_summary(run_dir)
    on_disk = json.loads((run_dir / "summary.json").read_text(), parse_constant=no_nan)
    assert on_disk["methods"]["fedavg"]["final_test_accuracy"] == {
        "mean": None,
        "std": None,
        "values": [],
        "n": 0,
    }
    assert math.isnan(returned["methods"]["fedavg"]["final_test_accuracy"]["mean"])
    assert on_disk["methods"]["centralized"]["final_test_accuracy"]["mean"] == pytest.approx(0.965)
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.yaml",
        "methods",
        "run.json",
        "summary.json",
    ]  # no temporary file left behind


def test_missing_run_json_raises(run_dir: Path) -> None:
    (run_dir / "run.json").unlink()
    with pytest.raises(RunDirError, match=r"run\.json"):
        summarize_run(run_dir)
    with pytest.raises(RunDirError, match="not found"):
        summarize_run(run_dir / "nope")


def test_truncated_last_line_is_tolerated_but_corrupt_middle_is_not(run_dir: Path) -> None:
    rounds = run_dir / "methods" / "fedavg" / "seed-0" / "rounds.jsonl"
    lines = rounds.read_text().splitlines()
    rounds.write_text("\n".join(lines) + '\n{"round": 16, "va')
    assert len(load_run(run_dir).methods["fedavg"][0].rounds) == 15
    rounds.write_text("\n".join([*lines[:3], "{oops", *lines[3:]]) + "\n")
    with pytest.raises(RunDirError, match=r"rounds\.jsonl:4"):
        load_run(run_dir)


def test_centralized_partition_has_one_client(run_dir: Path) -> None:
    part = load_run(run_dir).methods["centralized"][0].partition
    assert part is not None
    assert len(part["histograms"]) == 1
    assert part["partitioner"] == "pooled"
