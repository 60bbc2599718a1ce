"""``geofl merge``: run directories of one experiment merged equal one run of every seed and
method; runs of different experiments, overlaps, a taken --out and a live run are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.engine.merge import first_difference
from geofl.rundir import lock_run_dir

runner = CliRunner()

#: The compared part of summary.json: every statistic of the final metrics and the tests.
SKIP_KEYS = {"paper"}


def _run(root: Path, name: str, **over: Any) -> Path:
    """``geofl run`` of the tiny config (2 rounds; paired tests vs fedavg when it runs it)
    into root/name."""
    raw = tiny_raw(federation={"num_clients": 4, "rounds": 2}, **over)
    if any(m["name"] == "fedavg" for m in raw["methods"]):
        raw["compare_to"] = "fedavg"
    src = root / f"{name}.yaml"
    src.write_text(yaml.safe_dump(raw))
    out = root / name
    result = runner.invoke(
        app, ["run", str(src), "--out", str(out), "--no-progress", "--no-report"]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One run of both methods × seeds 1, 2, and the same experiment cut into pieces."""
    root = tmp_path_factory.mktemp("merge")
    methods = tiny_raw()["methods"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOFL_CACHE", str(root / "cache"))
        yield {
            "full": _run(root, "full", seeds=[1, 2]),
            "seed1": _run(root, "seed1", seeds=[1]),
            "seed2": _run(root, "seed2", seeds=[2]),
            "central": _run(root, "central", seeds=[1, 2], methods=methods[:1]),
            "fedavg": _run(root, "fedavg", seeds=[1, 2], methods=methods[1:]),
        }


def _summary(run: Path) -> dict[str, Any]:
    s = json.loads((run / "summary.json").read_text())
    methods = {
        m: {k: v for k, v in d.items() if k not in SKIP_KEYS} for m, d in s["methods"].items()
    }
    return {"methods": methods, "paired": s.get("paired"), "seeds": s["seeds"]}


def _merge(*args: str | Path) -> Any:
    return runner.invoke(app, ["merge", *map(str, args)])


def test_first_difference_names_the_dotted_path() -> None:
    a = {"train": {"lr": 0.1, "batch_size": 8}, "methods": [{"name": "x", "k": 1}]}
    assert first_difference(a, a) is None
    assert first_difference(a, {**a, "train": {"lr": 0.2, "batch_size": 8}}) == "train.lr"
    assert first_difference(a, {**a, "methods": [{"name": "x", "k": 2}]}) == "methods[0].k"
    assert first_difference(a, {"train": a["train"]}) == "methods"  # a key on one side only
    assert first_difference([1, 2], [1, 2, 3]) == "(top level)"


def test_merged_seeds_equal_one_run_of_both(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "merged"
    result = _merge(runs["seed1"], runs["seed2"], "--out", out)
    assert result.exit_code == 0, result.output
    assert "2 methods × 2 seeds (1, 2)" in result.output
    assert _summary(out) == _summary(runs["full"])
    assert _summary(out)["paired"]["baseline"] == "fedavg"
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["seeds"] == [1, 2] and cfg["compare_to"] == "fedavg"
    info = json.loads((out / "run.json").read_text())
    assert [Path(m["run_dir"]).name for m in info["merged_from"]] == ["seed1", "seed2"]
    first = json.loads((runs["seed1"] / "run.json").read_text())
    assert info["merged_from"][0]["provenance"] == first["provenance"]
    assert info["merged_from"][0]["created"] == first["created"]
    assert info["seeds"] == [1, 2] and info["methods"] == ["central", "fedavg"]
    html = (out / "report" / "index.html").read_text()
    assert "merged from (2)" in html
    for method in ("central", "fedavg"):  # every seed directory, byte for byte
        for seed in (1, 2):
            rel = Path("methods", method, f"seed-{seed}", "rounds.jsonl")
            src = runs[f"seed{seed}"] / rel
            assert (out / rel).read_bytes() == src.read_bytes()


def test_merged_methods_equal_one_run_of_both(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "merged"
    assert _merge(runs["central"], runs["fedavg"], "--out", out, "--no-report").exit_code == 0
    assert _summary(out) == _summary(runs["full"])
    assert not (out / "report").exists()


def test_resume_runs_what_no_input_ran(runs: dict[str, Path], tmp_path: Path) -> None:
    """Merging seed 1 of both methods with central's seeds 1–2 would overlap; with seed 2
    of central only, the merged config lists fedavg seed 2, which --resume then runs."""
    root = tmp_path / "r"
    root.mkdir()
    central2 = _run(root, "central2", seeds=[2], methods=tiny_raw()["methods"][:1])
    out = tmp_path / "merged"
    assert _merge(runs["seed1"], central2, "--out", out, "--no-report").exit_code == 0
    assert not (out / "methods" / "fedavg" / "seed-2").exists()
    args = ["run", str(out / "config.yaml"), "--out", str(out), "--resume", "--no-progress"]
    result = runner.invoke(app, [*args, "--no-report"])
    assert result.exit_code == 0, result.output
    assert _summary(out) == _summary(runs["full"])


def _error(result: Any) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return str(lines[0])


def test_refusals_name_the_problem_and_leave_nothing(runs: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other-lr"
    other.mkdir()
    for name in ("config.yaml", "run.json"):
        (other / name).write_text((runs["seed2"] / name).read_text())
    cfg = yaml.safe_load((other / "config.yaml").read_text())
    cfg["train"]["lr"] *= 2
    (other / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    assert "train.lr" in _error(_merge(runs["seed1"], other, "--out", out))
    assert "central seed 1 is in both" in _error(_merge(runs["full"], runs["seed1"], "--out", out))
    assert "given twice" in _error(_merge(runs["seed1"], runs["seed1"], "--out", out))
    assert "two or more" in _error(_merge(runs["seed1"], "--out", out))
    assert "not a run directory" in _error(_merge(runs["seed1"], tmp_path, "--out", out))
    with lock_run_dir(runs["seed2"]):
        assert "still being written" in _error(_merge(runs["seed1"], runs["seed2"], "--out", out))
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("")
    assert "already exists" in _error(_merge(runs["seed1"], runs["seed2"], "--out", taken))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-lr", "taken"]
