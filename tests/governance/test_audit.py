"""`geofl ledger verify` / `show` on a tampered copy of one small governed run.

Every tampering must end in exit 1 with one line naming the file (and line or round) and
what differs; the intact run must pass.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.plugins import load_all
from geofl.records import read_rounds
from geofl.rundir import seed_dir

NAME = "fedavg/seed-3"


@pytest.fixture(scope="module")
def governed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 6-round governed run; client 4's uploads are lost in rounds 3-4 → watchlist."""
    tmp = tmp_path_factory.mktemp("audit")
    method = {
        "name": "fedavg",
        "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
        "network": {"name": "scripted_outage", "outages": {4: [3, 4]}},
    }
    raw = tiny_raw(federation={"num_clients": 6, "rounds": 6}, methods=[method])
    raw["governance"] = {"committee": {"size": 2}, "label": "rule_B"}
    cfg = tmp / "gov.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOFL_CACHE", str(tmp / "cache"))
        load_all()  # the governance section is a plug-in's (main loads it in load_config)
        run = run_experiment(load_config(cfg), tmp / "run")
    best = json.loads((seed_dir(run, "fedavg", 3) / "final.json").read_text())["best_val"]
    assert best["round"] != 6, "the swap tests need best.pt and checkpoint.pt to differ"
    return run


@pytest.fixture
def run(governed: Path, tmp_path: Path) -> Path:
    """A private copy of the governed run, to tamper with."""
    return Path(shutil.copytree(governed, tmp_path / "run"))


def _sd(run: Path) -> Path:
    return seed_dir(run, "fedavg", 3)


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["ledger", *args])


def _mismatches(run: Path) -> list[str]:
    """The `mismatch:` lines of `ledger verify` (which must exit 1)."""
    res = _cli("verify", str(run))
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("mismatch:")]
    assert lines and all(NAME in ln for ln in lines), res.output
    return lines


def _only(run: Path) -> str:
    (line,) = _mismatches(run)
    return line


def _edit_lines(path: Path, edit: Any) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(edit(lines)))


def _edit_log(run: Path, edit: Any) -> None:
    path = _sd(run) / "governance.jsonl"
    entries = [json.loads(ln) for ln in path.read_text().splitlines()]
    edit(entries)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


def _round_entry(entries: list[dict[str, Any]], r: int) -> dict[str, Any]:
    return next(e for e in entries if e.get("round") == r)


def test_verify_passes_the_intact_run(governed: Path) -> None:
    res = _cli("verify", str(governed))
    assert res.exit_code == 0, res.output
    assert f"ok: {NAME} (6 rounds)" in res.output and "mismatch" not in res.output
    head = json.loads((_sd(governed) / "ledger" / "head.json").read_text())
    assert f"head: {NAME}: block {head['block_number']} {head['block_hash']}" in res.output


def test_show_says_success_for_every_round_of_the_intact_run(governed: Path) -> None:
    res = _cli("show", str(governed))
    assert res.exit_code == 0, res.output
    assert res.output.count("Success") == 6 and "MISMATCH" not in res.output


def test_a_deleted_round_line_is_named(run: Path) -> None:
    _edit_lines(_sd(run) / "rounds.jsonl", lambda lines: lines[:2] + lines[3:])
    line = _only(run)
    assert "rounds.jsonl: no record of round 3, which the chain commits" in line


def test_a_duplicated_round_line_is_named(run: Path) -> None:
    _edit_lines(_sd(run) / "rounds.jsonl", lambda lines: [*lines[:4], lines[3], *lines[4:]])
    assert "rounds.jsonl:5: second record of round 4 (first at line 4)" in _only(run)


def test_reordered_round_lines_are_named(run: Path) -> None:
    _edit_lines(_sd(run) / "rounds.jsonl", lambda ls: [*ls[:2], ls[3], ls[2], *ls[4:]])
    assert "rounds.jsonl:4: round 3 is out of order" in _only(run)


def test_a_garbled_round_line_is_named_and_not_blamed_on_the_checkpoint(run: Path) -> None:
    _edit_lines(_sd(run) / "rounds.jsonl", lambda ls: [*ls[:2], "{garbled" + ls[2][9:], *ls[3:]])
    line = _only(run)
    assert "rounds.jsonl:3: damaged round record (JSONDecodeError" in line
    assert "the chain commits round 3 here" in line and "checkpoint" not in line


def test_an_edited_model_hash_is_named(run: Path) -> None:
    path = _sd(run) / "rounds.jsonl"
    rec = read_rounds(path)[1]
    forged = ("0" if rec.model_sha256[0] != "0" else "1") + rec.model_sha256[1:]
    path.write_text(path.read_text().replace(rec.model_sha256, forged, 1))
    line = _only(run)
    assert "rounds.jsonl:2: round 2: model hash 0x" in line
    assert f"differs from the chain's 0x{rec.model_sha256[:8]}" in line


def test_a_permission_change_removed_from_the_log_is_named(run: Path) -> None:
    _edit_log(run, lambda es: _round_entry(es, 4).update(permissions=[]))
    line = _only(run)
    assert "governance.jsonl:5: permission proposal #1 (client4 active→watchlist, round 4)" in line
    assert "applied on chain, is missing from the log" in line


def test_show_does_not_say_success_for_a_round_that_lost_its_permission_change(
    run: Path,
) -> None:
    _edit_log(run, lambda es: _round_entry(es, 4).update(permissions=[]))
    res = _cli("show", str(run))
    assert res.exit_code == 0, res.output
    assert res.output.count("Success") == 5 and "MISMATCH" in res.output
    row4 = _cli("show", str(run), "--round", "4").output
    assert "Success" not in row4 and "MISMATCH" in row4
    assert "active→watchlist" in row4  # the chain's change is shown, and that the log lacks it
    assert "missing from the" in row4


def test_a_permission_entry_not_on_chain_is_named(run: Path) -> None:
    def forge(entries: list[dict[str, Any]]) -> None:
        real = _round_entry(entries, 4)["permissions"][0]
        _round_entry(entries, 5)["permissions"] = [{**real, "proposal_id": 2, "round_id": 5}]

    _edit_log(run, forge)
    assert "governance.jsonl:6: permission proposal #2 (client4" in _only(run)
    assert "is not on chain" in _only(run)


def test_an_approver_edited_in_the_log_is_named(run: Path) -> None:
    def edit(entries: list[dict[str, Any]]) -> None:
        perm = _round_entry(entries, 4)["permissions"][0]
        perm["approvers"] = perm["approvers"][:1]

    _edit_log(run, edit)
    assert "governance.jsonl:5: permission proposal #1: approvers" in _only(run)


def test_a_committee_removed_from_the_log_is_named(run: Path) -> None:
    _edit_log(run, lambda es: _round_entry(es, 2).pop("committee"))
    assert "governance.jsonl:3: round 2: committee election 2" in _only(run)


def test_a_round_entry_removed_from_the_log_is_named(run: Path) -> None:
    _edit_log(run, lambda es: es.remove(_round_entry(es, 6)))
    line = _only(run)
    assert "governance.jsonl: no entry for round 6, whose aggregation commitment" in line


def test_a_forged_aggregation_tx_in_the_log_is_named(run: Path) -> None:
    def edit(entries: list[dict[str, Any]]) -> None:
        agg = _round_entry(entries, 3)["aggregation"]
        agg["tx"] = _round_entry(entries, 2)["aggregation"]["tx"]

    _edit_log(run, edit)
    assert "governance.jsonl:4: round 3: aggregation tx" in _only(run)


def test_a_deleted_checkpoint_is_named(run: Path) -> None:
    (_sd(run) / "checkpoint.pt").unlink()
    line = _only(run)
    assert "checkpoint.pt: missing; it must hold round 6's committed model" in line


def test_a_deleted_best_model_is_named(run: Path) -> None:
    (_sd(run) / "best.pt").unlink()
    assert "best.pt: missing; it must hold round 3's committed model" in _only(run)


def test_swapped_checkpoint_and_best_model_are_named(run: Path) -> None:
    sd = _sd(run)
    tmp = sd / "swap.tmp"
    (sd / "best.pt").rename(tmp)
    (sd / "checkpoint.pt").rename(sd / "best.pt")
    tmp.rename(sd / "checkpoint.pt")
    ckpt, best = _mismatches(run)
    assert "checkpoint.pt: holds the model committed for round 3, not round 6's" in ckpt
    assert "best.pt: holds the model committed for round 6, not round 3's" in best
    assert "swapped or stale" in ckpt and "swapped or stale" in best


def test_a_stale_best_model_is_named(run: Path) -> None:
    sd = _sd(run)
    shutil.copyfile(sd / "checkpoint.pt", sd / "best.pt")
    line = _only(run)
    assert "best.pt: holds the model committed for round 6, not round 3's" in line
    assert "checkpoint.pt's layout" in line


def test_a_rounds_file_that_cannot_be_read_is_exit_2(run: Path) -> None:
    path = _sd(run) / "rounds.jsonl"
    path.unlink()
    path.mkdir()  # exists, but no file can be read there
    res = _cli("verify", str(run))
    assert res.exit_code == 2, res.output
    assert res.output.count("error:") == 1 and "rounds.jsonl: cannot be read" in res.output
