"""The hierarchy in runs: the asynchronous scheduler with zero delays and full delivery
reproduces the synchronous hierarchy bit for bit; a run interrupted and resumed equals one
that never stopped (queue, buffers, model versions and drivers travel in the checkpoint);
deterministic per seed; bad hierarchy config refused at load, naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tests.engine.hierarchy_helpers import (
    CrashAfter,
    agri_raw,
    config,
    make_run,
    round_records,
)

from geofl.engine.evaluation.heldout import evaluate
from geofl.engine.experiment import run_experiment
from geofl.engine.hierarchy.scheduler import HierarchicalScheduler
from geofl.errors import ConfigError

# The ground uplink with every link up: what passes the NQI gate is delivered in < 1 s.
UPLINK = {"network": {"p_fail": 0.0}, "checkpoint": {"tau_cos": 0.0}}


def _rounds(tmp: Path, hierarchy: dict[str, Any], name: str, rounds: int = 3) -> list[Any]:
    run = make_run(config(tmp, agri_raw(hierarchy, rounds=rounds, uplink=UPLINK), name), tmp / name)
    params, out = run.init_params, []
    for r in range(1, rounds + 1):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = res.params
        out.append((params, res.record))
    return out


@pytest.mark.parametrize("personal", [None, {"alpha": 0.6, "beta": 0.2}])
def test_async_with_ideal_contacts_reproduces_the_synchronous_hierarchy(
    tmp_path: Path, personal: dict[str, float] | None
) -> None:
    extra = {} if personal is None else {"personalization": personal}
    sync = _rounds(tmp_path, {"mode": "sync", **extra}, "sync")
    ideal = _rounds(tmp_path, {"leo": {"contacts": "ideal"}, **extra}, "ideal")
    for (p_s, rec_s), (p_a, rec_a) in zip(sync, ideal, strict=True):
        assert torch.equal(p_s, p_a)  # bit-identical
        assert rec_s.participants == rec_a.participants and rec_s.weights == rec_a.weights
        assert rec_s.hierarchy is not None and rec_a.hierarchy is not None
        assert rec_a.hierarchy["staleness"] == [0] * len(rec_a.participants)
        assert rec_s.hierarchy["regions"] == rec_a.hierarchy["regions"]
    assert any(rec.participants for _, rec in sync)


@pytest.mark.slow
def test_interrupted_and_resumed_equals_uninterrupted_and_is_deterministic(
    tmp_path: Path,
) -> None:
    # Orbit contacts with outages: models wait for passes across round boundaries; drivers
    # fail, and re-elected drivers' contact plans are computed at their election (a resumed
    # run recomputes them: the plans are not in the checkpoint).
    hier = {"round_s": 1800.0, "driver_deadline_s": 300.0, "kappa": 0.5, "p_driver_fail": 0.3}
    raw = agri_raw(hier, rounds=5, uplink={"network": {"p_fail": 0.2}})
    whole = run_experiment(config(tmp_path, raw, "a"), tmp_path / "whole")
    again = run_experiment(config(tmp_path, raw, "b"), tmp_path / "again")
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config(tmp_path, raw, "c"), cut, subscribers=[CrashAfter(2)])
    run_experiment(config(tmp_path, raw, "c"), cut, resume=True)
    recs = round_records(whole)
    assert recs == round_records(again) == round_records(cut)
    stale = [s for r in recs for s in r["hierarchy"]["staleness"]]
    assert max(stale) >= 1  # the resumed part really carried late updates
    late = [r["hierarchy"] for r in recs if r["round"] > 2]
    changes = [c for r in recs for c in r["hierarchy"]["driver_changes"]]
    elected = {(c["cluster"], c["new"]) for c in changes if c["cause"] == "failover"}
    assert any(h["driver_changes"] for h in late)  # re-elections after the resume
    assert any((e[3], e[4]) in elected for h in late for e in h["events"] if e[1] == "uplink")


@pytest.mark.parametrize(
    ("hierarchy", "needle"),
    [
        ({"kappa": -0.1}, "hierarchy.kappa"),
        ({"driver_deadline_s": 4000.0, "round_s": 3600.0}, "driver_deadline_s"),
        ({"trim_fraction": 0.5}, "hierarchy.trim_fraction"),
        ({"personalization": {"alpha": 0.8, "beta": 0.3}}, "alpha + beta"),
        ({"leo": {"tle_file": "/nonexistent.tle"}}, "tle_file"),
        ({"leo": {"n": 2, "planes": 4}}, "planes"),
        ({"links": {"driver_leo_mbps": 0.0}}, "hierarchy.links.driver_leo_mbps"),
        ({"links": {"frame_bytes": 0}}, "hierarchy.links.frame_bytes"),
    ],
)
def test_bad_hierarchy_config_is_refused_naming_the_field(
    tmp_path: Path, hierarchy: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle.replace("+", r"\+")):
        config(tmp_path, agri_raw(hierarchy))


def test_malformed_tle_file_names_the_line(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from geofl.network.orbits import walker_constellation

    tles = walker_constellation(n_leo=2, planes=1, epoch=datetime(2026, 1, 1, tzinfo=UTC))
    lines = [x for t in tles for x in (t.name, t.line1, t.line2)]
    good = tmp_path / "good.tle"
    good.write_text("\n".join(lines) + "\n")
    cfg = config(tmp_path, agri_raw({"leo": {"n": 2, "planes": 1, "tle_file": str(good)}}))
    assert cfg.methods[0].hierarchy is not None
    lines[4] = lines[4][:20] + ("0" if lines[4][20] != "0" else "1") + lines[4][21:]
    bad = tmp_path / "bad.tle"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"tle_file.*line 5"):
        config(tmp_path, agri_raw({"leo": {"n": 2, "planes": 1, "tle_file": str(bad)}}))


def test_the_hierarchy_refuses_a_server_side_algorithm_and_an_untractored_dataset(
    tmp_path: Path,
) -> None:
    raw = agri_raw({"mode": "sync"}, algorithm={"name": "scaffold"})
    with pytest.raises(ConfigError, match="algorithm"):
        make_run(config(tmp_path, raw, "scaffold"), tmp_path / "x")
    raw = agri_raw({"mode": "sync"})
    raw["data"] = {"dataset": "synthetic_tabular_binary", "params": {"num_samples": 300}}
    raw["task"] = {"name": "binary"}
    raw["methods"][0]["partition"] = {"name": "iid"}
    with pytest.raises(ConfigError, match="farm/tractor context"):
        make_run(config(tmp_path, raw, "tab"), tmp_path / "y")


def test_cli_exits_2_on_a_negative_kappa(tmp_path: Path) -> None:
    import yaml
    from typer.testing import CliRunner

    from geofl.cli import app

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(agri_raw({"kappa": -1.0})))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "methods.0.hierarchy.kappa" in result.output
    assert not out.exists()


def test_driver_failures_re_elect_and_lose_no_buffered_update(tmp_path: Path) -> None:
    # Drivers aggregate at the start of each round: uploads (≈0.1 s on the ground) wait in
    # the driver's buffer until the next round's deadline, across its health check.
    hier = {"leo": {"contacts": "ideal"}, "p_driver_fail": 0.5, "driver_deadline_s": 0.0}
    raw = agri_raw(hier, rounds=4, uplink=UPLINK)
    run = make_run(config(tmp_path, raw), tmp_path / "fail")
    params, arrived, incorporated, failovers, down = run.init_params, 0, 0, [], 0
    for r in range(1, 5):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params, h = res.params, res.record.hierarchy
        assert h is not None
        arrived += h["delivered"].get("tractor_driver", 0)
        incorporated += len(res.record.participants)
        failovers += h["failovers"]
        down += h["down"]
    sch = run.scheduler
    pending = sum(sch.monitor.pending(c) for c in range(sch.topo.clusters.num_clusters))  # type: ignore[union-attr]
    assert down > 0 and all(f["driver"] != f["failed"] for f in failovers)
    assert sum(f["handed_over"] for f in failovers) > 0  # buffers moved to the new drivers
    # the driver's error-feedback residual stays with the cluster, as the buffer does
    assert any(f["residual_handed_over"] for f in failovers)
    assert all(f["cluster"] in sch.links.residual for f in failovers if f["residual_handed_over"])  # type: ignore[union-attr]
    assert arrived == incorporated + pending  # every update that reached a driver is kept


def test_table10_metric_is_each_regional_models_test_auc_carried_by_its_updates(
    tmp_path: Path,
) -> None:
    """Every update carries its regional model's test AUC; re-evaluating that model by hand
    gives the same value, and the round's Table 10 rows are the count-weighted means."""
    rounds = _rounds(tmp_path, {"mode": "sync"}, "t10", rounds=2)
    run = make_run(
        config(tmp_path, agri_raw({"mode": "sync"}, rounds=2, uplink=UPLINK), "t10b"),
        tmp_path / "t10b",
    )
    sched = run.scheduler
    assert isinstance(sched, HierarchicalScheduler) and sched.probe is not None
    for _, rec in rounds:
        h = rec.hierarchy
        assert h is not None and h["metric"] == "roc_auc"
        assert len(h["update_metric"]) == len(h["staleness"]) == len(rec.participants)
        per_region = [r["test_metric"] for r in h["regions"] for _ in range(r["tractors"])]
        assert h["update_metric"] == per_region
        assert all(0.0 <= v <= 1.0 for v in per_region)
        rows = {row["bucket"]: row for row in h["staleness_table"]}
        assert rows["0-1"]["updates"] == len(per_region)  # sync: staleness 0
        assert rows["0-1"]["metric"] == pytest.approx(sum(per_region) / len(per_region))
        assert rows["2-3"]["metric"] is None and rows["4+"]["fraction"] == 0.0
    # the probe is the test split's AUC of the vector it is given
    params = rounds[-1][0]
    run.workspace.load(params)
    d = run.data
    want = evaluate(run.workspace.module, d.test.inputs, d.test.targets, run.comps.task)
    assert sched.probe[1](params) == pytest.approx(want.values["roc_auc"])


def test_table10_metric_can_be_switched_off(tmp_path: Path) -> None:
    (_, rec), *_ = _rounds(tmp_path, {"mode": "sync", "staleness_metric": False}, "off", 1)
    h = rec.hierarchy
    assert h is not None and h["metric"] is None
    assert all(row["metric"] is None for row in h["staleness_table"])
    assert all(r["test_metric"] is None for r in h["regions"])


def test_the_timeline_events_match_the_hop_counts(tmp_path: Path) -> None:
    for _, rec in _rounds(tmp_path, {}, "timeline", rounds=3):
        h = rec.hierarchy
        assert h is not None
        kinds = [e[1] for e in h["events"]]
        assert kinds.count("uplink") == h["delivered"].get("driver_leo", 0)
        assert kinds.count("relay") == h["delivered"].get("leo_geo", 0)
        assert kinds.count("downlink") == h["sent"].get("leo_driver", 0)
        assert kinds.count("geo") == (1 if rec.participants else 0)
        start, end = (rec.round - 1) * 3600.0, rec.round * 3600.0
        assert all(start <= e[0] <= end for e in h["events"])
