"""``benchmarks/diag_preset_parity.py``: what it runs and compares, without running geofl.

Issue 32's and 34's "done when" (every preset gives the same metrics and model hashes as
before) is read off this diagnostic, so its bookkeeping is pinned here: ``--config-from old``
hands BOTH trees the old tree's YAML (a preset whose definition changed on purpose is then
compared on one definition), rows are keyed ``NAME@old-yaml``, each run gets its own data
cache, ``--reuse`` keeps only finished sides, and the first seed comes from the YAML without
a Python start. ``run_preset``'s ``geofl run`` is replaced by a stub that writes a run
directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "diag_preset_parity.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("diag_preset_parity", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, body: str) -> str:
    """A source tree that ships one preset, ``p``, with ``body`` as its YAML."""
    presets = root / "src" / "geofl" / "config" / "presets"
    presets.mkdir(parents=True)
    (presets / "p.yaml").write_text(body, encoding="utf-8")
    return str(root / "src")


def _write_run(out: Path, loss: float) -> None:
    seed = out / "methods" / "fedavg" / "seed-1"
    seed.mkdir(parents=True)
    record = {"status": "ok", "train_loss": loss, "model_sha256": "ab", "round": 1}
    (seed / "rounds.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    (seed / "final.json").write_text(json.dumps({"final": {"test": {"acc": 0.5}}}), "utf-8")


def _args(
    tmp_path: Path, old: str, new: str, config_from: str, reuse: bool = False
) -> argparse.Namespace:
    out = tmp_path / "out"
    return argparse.Namespace(
        old=old,
        new=new,
        out=out,
        rounds=2,
        timeout=5.0,
        config_from=config_from,
        reuse=reuse,
        overrides=[],
    )


def test_config_from_old_runs_the_old_yaml_on_both_trees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _tool()
    old = _tree(tmp_path / "old", "seeds: [7]\nfederation: {rounds: 50}\n")
    new = _tree(tmp_path / "new", "seeds: [9]\nfederation: {rounds: 80}\n")
    calls: list[tuple[str, str, Path]] = []

    def fake(src: str, preset: str, out: Path, rounds: int, timeout: float, sets: Any) -> None:
        calls.append((src, preset, out))
        _write_run(out, 0.25)

    monkeypatch.setattr(tool, "run_preset", fake)
    row = tool.compare(_args(tmp_path, old, new, "old"), "p")
    assert row["preset"] == "p@old-yaml" and row["verdict"] == "same"
    assert [src for src, _, _ in calls] == [old, new]
    sources = {preset for _, preset, _ in calls}
    assert len(sources) == 1  # one file, the old tree's, for both trees
    assert Path(sources.pop()).read_text(encoding="utf-8").startswith("seeds: [7]")
    assert [out.name for _, _, out in calls] == ["old", "new"]


def test_each_tree_runs_its_own_preset_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _tool()
    old = _tree(tmp_path / "old", "seeds: [7]\n")
    new = _tree(tmp_path / "new", "seeds: [9]\n")
    losses = iter([0.25, 0.5])
    calls: list[str] = []

    def fake(src: str, preset: str, out: Path, rounds: int, timeout: float, sets: Any) -> None:
        calls.append(preset)
        _write_run(out, next(losses))

    monkeypatch.setattr(tool, "run_preset", fake)
    row = tool.compare(_args(tmp_path, old, new, "preset"), "p")
    assert calls == ["p", "p"] and row["preset"] == "p"
    assert row["verdict"] == "DIFFERENT"
    assert row["differences"] == [".fedavg/seed-1.rounds[0].train_loss"]


def test_config_from_old_reports_a_preset_the_old_tree_lacks(tmp_path: Path) -> None:
    tool = _tool()
    old = _tree(tmp_path / "old", "seeds: [7]\n")
    row = tool.compare(_args(tmp_path, old, old, "old"), "absent")
    assert row["verdict"] == "not compared"
    assert row["old_error"] == row["new_error"] == "no such preset in the old tree"


def test_first_seed_is_read_from_the_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _tool()
    src = _tree(tmp_path / "t", "seeds: [2024, 2025]\n")

    def no_python(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a Python start was not needed")

    monkeypatch.setattr(tool.subprocess, "run", no_python)
    assert tool._first_seed(src, "p", {}) == 2024
    yaml_path = Path(src) / "geofl" / "config" / "presets" / "p.yaml"
    assert tool._first_seed(src, str(yaml_path), {}) == 2024
    assert tool._first_seed(src, "absent", {}) is None


def test_each_run_gets_its_own_data_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _tool()
    src = _tree(tmp_path / "t", "seeds: [1]\n")
    seen: list[str] = []

    class Done:
        returncode = 0
        stdout = stderr = ""

    def fake_run(cmd: list[str], env: dict[str, str], **kwargs: Any) -> Done:
        seen.append(env["GEOFL_CACHE"])
        return Done()

    monkeypatch.setattr(tool.subprocess, "run", fake_run)
    for side in ("old", "new"):
        assert tool.run_preset(src, "p", tmp_path / "out" / "p" / side, 2, 5.0, []) is None
    assert seen == [str(tmp_path / "out" / "p" / f"{s}-cache") for s in ("old", "new")]


def test_reuse_keeps_a_finished_side_and_reruns_a_cut_off_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _tool()
    src = _tree(tmp_path / "t", "seeds: [1]\n")
    finished, cut_off = tmp_path / "out" / "p" / "old", tmp_path / "out" / "p" / "new"
    _write_run(finished, 0.25)
    (finished / "summary.json").write_text("{}", encoding="utf-8")
    (cut_off / "methods").mkdir(parents=True)  # a run stopped by --timeout: no summary
    calls: list[Path] = []

    def fake(src: str, preset: str, out: Path, rounds: int, timeout: float, sets: Any) -> None:
        assert not out.exists(), "the cut-off run directory is removed first"
        calls.append(out)
        _write_run(out, 0.25)

    monkeypatch.setattr(tool, "run_preset", fake)
    row = tool.compare(_args(tmp_path, src, src, "preset", reuse=True), "p")
    assert calls == [cut_off] and row["verdict"] == "same"


def test_new_side_waits_for_a_finished_old_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _tool()
    src = _tree(tmp_path / "t", "seeds: [1]\n")
    calls: list[Path] = []

    def fake(src: str, preset: str, out: Path, rounds: int, timeout: float, sets: Any) -> str:
        calls.append(out)
        return "timed out after 5 s"

    monkeypatch.setattr(tool, "run_preset", fake)
    row = tool.compare(_args(tmp_path, src, src, "preset"), "p")
    assert [out.name for out in calls] == ["old"] and row["verdict"] == "not compared"
    assert row["new_error"] == "not run: the old tree's run did not finish"


def test_set_overrides_go_to_both_trees_after_rounds_and_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preset too slow at --rounds is shrunk identically on both trees, and the row says so."""
    tool = _tool()
    src = _tree(tmp_path / "t", "seeds: [3]\n")
    cmds: list[list[str]] = []

    class Done:
        returncode = 0
        stdout = stderr = ""

    def fake_run(cmd: list[str], env: dict[str, str], **kwargs: Any) -> Done:
        cmds.append(cmd)
        _write_run(Path(cmd[cmd.index("--out") + 1]), 0.25)
        return Done()

    monkeypatch.setattr(tool.subprocess, "run", fake_run)
    sets = ["federation.num_clients=4", "data.params.num_samples=600"]
    argv = ["diag", "--old", src, "--new", src, "--out", str(tmp_path / "out"), "p"]
    monkeypatch.setattr(sys, "argv", argv[:-1] + [f"--set={s}" for s in sets] + ["p"])
    tool.main()
    assert len(cmds) == 2
    for cmd in cmds:
        tail = cmd[cmd.index("--no-progress") + 1 :]
        assert tail[:4] == ["--set", "federation.rounds=2", "--set", "seeds=[3]"]
        assert tail[4:] == ["--set", sets[0], "--set", sets[1]]  # after: they win
    row = json.loads((tmp_path / "out" / "parity.jsonl").read_text(encoding="utf-8"))
    assert row["overrides"] == sets and row["verdict"] == "same"
