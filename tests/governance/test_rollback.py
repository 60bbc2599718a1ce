"""`geofl ledger verify` against a rolled-back governed run, and against an anchored head.

The attack (geofl issue 31, item 10): drop the last round consistently from every file the
chain binds (the chain log and its head, ``rounds.jsonl``, ``governance.jsonl``,
``checkpoint.pt``). What is left is exactly what a run killed one round earlier leaves, so
every per-round check passes; only the files that state how far the run got
(``final.json``, ``summary.json``, ``config.yaml``) or a head anchored elsewhere can tell.

One tiny governed run (3 clients, 3 rounds) is stopped after round 2 (the "killed" run)
and a copy of it resumed to the end (the "full" run); the rolled-back run is the killed
one with the full run's ``final.json`` and ``summary.json``.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.engine.stop import StopRequest
from geofl.errors import RunStoppedError
from geofl.events import RunInfo
from geofl.governance.audit import ChainRecords, LedgerRun, audit_counts, parse_head
from geofl.governance.ledger import AggregationCommitted
from geofl.plugins import load_all
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

NAME = "fedavg/seed-3"


class _StopAfter:
    """Requests a stop once round ``r`` is written (the loop then stops cleanly)."""

    def __init__(self, stop: StopRequest, r: int) -> None:
        self.stop, self.r = stop, r

    def on_run_start(self, info: RunInfo) -> None:
        pass

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if record.round == self.r:
            self.stop.request(signal.SIGTERM)

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        pass


def _config(tmp: Path, name: str, **over: Any) -> Path:
    method = {"name": "fedavg", "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}}
    raw = tiny_raw(federation={"num_clients": 3, "rounds": 3}, methods=[method], **over)
    raw["governance"] = {"committee": {"size": 2}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The killed run (rounds 1-2 of 3) and the full run (the killed one resumed)."""
    tmp = tmp_path_factory.mktemp("rollback")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOFL_CACHE", str(tmp / "cache"))
        load_all()  # the governance section is a plug-in's (main loads it in load_config)
        cfg = load_config(_config(tmp, "gov"))
        stop = StopRequest()
        with pytest.raises(RunStoppedError):
            run_experiment(cfg, tmp / "killed", stop=stop, subscribers=[_StopAfter(stop, 2)])
        shutil.copytree(tmp / "killed", tmp / "full")
        run_experiment(cfg, tmp / "full", resume=True)
    final = json.loads((seed_dir(tmp / "full", "fedavg", 3) / "final.json").read_text())
    assert final["best_val"]["round"] < 3, "the rollback must not also drop the best round"
    return {"killed": tmp / "killed", "full": tmp / "full"}


def _sd(run: Path) -> Path:
    return seed_dir(run, "fedavg", 3)


@pytest.fixture
def rolled(runs: dict[str, Path], tmp_path: Path) -> Path:
    """The full run with round 3 dropped from every chain-bound file; final.json,
    summary.json and config.yaml still say 3 rounds."""
    run = Path(shutil.copytree(runs["killed"], tmp_path / "rolled"))
    shutil.copyfile(_sd(runs["full"]) / "final.json", _sd(run) / "final.json")
    shutil.copyfile(runs["full"] / "summary.json", run / "summary.json")
    return run


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["ledger", *args])


def _mismatches(*args: str) -> list[str]:
    """The `mismatch:` lines of `ledger verify` (which must exit 1)."""
    res = _cli("verify", *args)
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("mismatch:")]
    assert lines and all(NAME in ln for ln in lines), res.output
    return lines


def _only_mismatch(*args: str) -> str:
    (line,) = _mismatches(*args)
    return line


def _head(run: Path) -> str:
    """The head hash `ledger verify` prints for the run (what a user would anchor)."""
    res = _cli("verify", str(run))
    assert res.exit_code == 0, res.output
    (line,) = [ln for ln in res.output.splitlines() if ln.startswith("head:")]
    return line.split()[-1]


def test_the_rollback_is_consistent_in_every_chain_bound_file(
    runs: dict[str, Path], rolled: Path
) -> None:
    full, cut = _sd(runs["full"]), _sd(rolled)
    for name in ("ledger/transactions.jsonl", "rounds.jsonl", "governance.jsonl"):
        short, long = (cut / name).read_text(), (full / name).read_text()
        assert long.startswith(short) and len(short) < len(long), name
    head = json.loads((cut / "ledger" / "head.json").read_text())
    assert head["transactions"] == len((cut / "ledger/transactions.jsonl").read_text().split())


def test_the_full_run_verifies_and_prints_its_head(runs: dict[str, Path]) -> None:
    res = _cli("verify", str(runs["full"]))
    assert res.exit_code == 0, res.output
    assert f"ok: {NAME} (3 rounds)" in res.output and "final.json" in res.output
    head = json.loads((_sd(runs["full"]) / "ledger" / "head.json").read_text())
    assert f"head: {NAME}: block {head['block_number']} {head['block_hash']}" in res.output


def test_a_killed_run_verifies_for_the_rounds_it_has(runs: dict[str, Path]) -> None:
    assert not (_sd(runs["killed"]) / "final.json").exists()
    res = _cli("verify", str(runs["killed"]))
    assert res.exit_code == 0, res.output
    assert f"ok: {NAME} (2 rounds)" in res.output and "mismatch" not in res.output


def test_a_rolled_back_run_is_named_by_final_json(rolled: Path) -> None:
    line = _only_mismatch(str(rolled))
    assert "final.json: the run completed 3 rounds" in line
    assert "the chain commits 2 (last: round 2): rolled back or truncated" in line


def test_a_rolled_back_run_without_final_json_is_named_by_the_summary(rolled: Path) -> None:
    (_sd(rolled) / "final.json").unlink()
    line = _only_mismatch(str(rolled))
    assert f"summary.json: lists {NAME} as done, but final.json is missing" in line
    assert "the chain commits 2 of the 3 rounds config.yaml plans" in line


def test_a_forged_early_stop_is_named(rolled: Path) -> None:
    path = _sd(rolled) / "final.json"
    final = json.loads(path.read_text())
    final["early_stopping"] = {"stopped_at": 2}
    final["communication"]["rounds"] = 2
    path.write_text(json.dumps(final))
    line = _only_mismatch(str(rolled))
    assert "final.json: says an early stop ended the run at round 2" in line
    assert "config.yaml sets no eval.early_stopping" in line


def test_round_counts_edited_in_final_json_are_named(rolled: Path) -> None:
    path = _sd(rolled) / "final.json"
    final = json.loads(path.read_text())
    final["rounds"] = final["communication"]["rounds"] = 2
    path.write_text(json.dumps(final))
    planned, completed = _mismatches(str(rolled))  # two numbers edited: two findings
    assert "final.json: plans 2 rounds, config.yaml 3" in planned
    assert "final.json: communication.rounds 2 differs from the 3 rounds the run ran" in completed


def test_the_anchored_head_passes(runs: dict[str, Path]) -> None:
    res = _cli("verify", str(runs["full"]), "--expect-head", _head(runs["full"]).upper()[2:])
    assert res.exit_code == 0, res.output
    assert "anchored" in res.output


def test_an_anchored_head_exposes_a_rollback_that_looks_like_a_killed_run(
    runs: dict[str, Path],
) -> None:
    # Without final.json and summary.json the rolled-back run is the killed run: the
    # files alone cannot tell (the killed run verifies), the anchored head can.
    line = _only_mismatch(str(runs["killed"]), "--expect-head", _head(runs["full"]))
    assert "ledger: the anchored head 0x" in line and "is not on this chain" in line
    assert "rolled back or rewritten" in line


def test_an_anchored_head_names_blocks_added_after_it(runs: dict[str, Path]) -> None:
    anchor = _head(runs["killed"])
    line = _only_mismatch(str(runs["full"]), "--expect-head", anchor)
    assert "ledger: the chain goes on past the anchored head (block" in line
    assert "not covered by the anchor" in line


@pytest.mark.parametrize("bad", ["", "0x12", "12:0x" + "a" * 64, "0x" + "g" * 64])
def test_a_malformed_expected_head_is_exit_2(runs: dict[str, Path], bad: str) -> None:
    res = _cli("verify", str(runs["full"]), "--expect-head", bad)
    assert res.exit_code == 2, res.output
    assert res.output.count("error:") == 1 and "--expect-head" in res.output


def test_an_expected_head_needs_one_run(runs: dict[str, Path], tmp_path: Path) -> None:
    run = Path(shutil.copytree(runs["full"], tmp_path / "two"))
    shutil.copytree(_sd(run), seed_dir(run, "fedavg", 4))
    head = _head(runs["full"])
    res = _cli("verify", str(run), "--expect-head", head)
    assert res.exit_code == 2, res.output
    assert "--expect-head: 2 governed runs match" in res.output and "--seed" in res.output
    assert _cli("verify", str(run), "--seed", "3", "--expect-head", head).exit_code == 0


def test_an_early_stopped_run_verifies(tmp_path: Path) -> None:
    stop_early = {"early_stopping": {"metric": "loss", "patience": 1, "min_delta": 1000.0}}
    raw_path = _config(tmp_path, "early", eval=stop_early)
    raw = yaml.safe_load(raw_path.read_text())
    raw["federation"]["rounds"] = 4
    raw_path.write_text(yaml.safe_dump(raw))
    load_all()
    run = run_experiment(load_config(raw_path), tmp_path / "early")
    final = json.loads((_sd(run) / "final.json").read_text())
    assert (final["rounds"], final["communication"]["rounds"]) == (4, 2)
    assert final["early_stopping"]["stopped_at"] == 2
    res = _cli("verify", str(run))
    assert res.exit_code == 0, res.output
    assert f"ok: {NAME} (2 rounds)" in res.output


# -- the count checks on hand-made files and chains (no run needed) --------------------


def _chain(*rounds: int) -> ChainRecords:
    aggs = tuple(
        AggregationCommitted(
            block_number=10 + r,
            tx_hash=f"0x{r:064x}",
            log_index=0,
            round_id=r,
            model_hash=f"0x{r:064x}",
            update_set_hash=f"0x{r:064x}",
            rule_index=1,
        )
        for r in rounds
    )
    return ChainRecords((), aggs, (), (), {}, {})


def _counts(
    tmp_path: Path,
    chain: ChainRecords,
    *,
    config: dict[str, Any],
    final: dict[str, Any] | None = None,
    summary: dict[str, Any] | None = None,
) -> list[str]:
    sd = tmp_path / "methods" / "fedavg" / "seed-3"
    sd.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    if final is not None:
        (sd / "final.json").write_text(json.dumps(final))
    if summary is not None:
        (tmp_path / "summary.json").write_text(json.dumps(summary))
    return [str(f) for f in audit_counts(LedgerRun("fedavg", 3, sd), chain, tmp_path)]


PLAN_10 = {"federation": {"rounds": 10}}
EARLY = {**PLAN_10, "eval": {"early_stopping": {"patience": 2}}}


def test_an_early_stop_agrees_with_a_shorter_chain(tmp_path: Path) -> None:
    final = {"rounds": 10, "early_stopping": {"stopped_at": 4}, "communication": {"rounds": 4}}
    assert _counts(tmp_path, _chain(1, 2, 3, 4), config=EARLY, final=final) == []
    assert _counts(tmp_path, _chain(1, 2, 3), config=EARLY, final=final) == [
        "final.json: the run completed 4 rounds (10 planned, stopped early at round 4), the "
        "chain commits 3 (last: round 3): rolled back or truncated"
    ]


def test_an_older_final_json_without_communication_counts_the_planned_rounds(
    tmp_path: Path,
) -> None:
    rounds = range(1, 11)
    assert _counts(tmp_path, _chain(*rounds), config=PLAN_10, final={"rounds": 10}) == []
    (found,) = _counts(tmp_path, _chain(*rounds, 11), config=PLAN_10, final={"rounds": 10})
    assert found.endswith(
        "the chain commits 11 (last: round 11): rounds were added after the run ended"
    )


def test_a_round_missing_in_between_is_named(tmp_path: Path) -> None:
    plan_3 = {"federation": {"rounds": 3}}
    (found,) = _counts(tmp_path, _chain(1, 3), config=plan_3, final={"rounds": 3})
    assert found.endswith("the chain commits 2 (last: round 3): rounds are missing in between")


def test_a_target_round_the_chain_does_not_commit_is_named(tmp_path: Path) -> None:
    final = {"rounds": 10, "communication": {"rounds": 10}, "target": {"round": 12}}
    summary = {"methods": {"fedavg": {"seeds_done": [3], "target": {"per_seed": {"3": 11}}}}}
    found = _counts(tmp_path, _chain(*range(1, 11)), config=PLAN_10, final=final, summary=summary)
    assert found == [
        "final.json: target reached at round 12, which is not committed on chain",
        "summary.json: fedavg/seed-3 reached the target at round 11, which is not committed "
        "on chain",
    ]


def test_an_unfinished_run_may_commit_fewer_rounds_than_planned_not_more(tmp_path: Path) -> None:
    summary = {"methods": {"fedavg": {"seeds_done": [], "incomplete": [3]}}}
    assert _counts(tmp_path, _chain(1, 2), config=PLAN_10, summary=summary) == []
    assert _counts(tmp_path, _chain(*range(1, 12)), config=PLAN_10) == [
        "config.yaml: plans 10 rounds, the chain commits 11 (last: round 11)"
    ]


def test_a_damaged_summary_is_named(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{not json")
    (found,) = _counts(tmp_path, _chain(1, 2), config=PLAN_10)
    assert found.startswith("summary.json: damaged (JSONDecodeError")
    assert found.endswith("whether fedavg/seed-3 finished is unknown")


@pytest.mark.parametrize(
    ("text", "want"),
    [("0x" + "Ab" * 32, "0x" + "ab" * 32), ("  " + "c" * 64 + "\n", "0x" + "c" * 64)],
)
def test_a_head_hash_is_read_in_any_case_with_or_without_0x(text: str, want: str) -> None:
    assert parse_head(text) == want
