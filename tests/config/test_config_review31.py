"""Issue 31 (review defects) items 4, 5, 11, 14, 15, 17: what ``config validate`` refuses.

Every refusal ``geofl run`` makes from the config alone is made by ``config validate`` too,
with the same one line (exit 2); config names are names, not paths; special and oversize
files, duplicate YAML keys and sizes that cannot fit in memory are refused with one line.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl import plugins
from geofl.cli import app
from geofl.config.load import list_presets, load_config, load_raw, preset_path
from geofl.config.validate import clients_per_round
from geofl.engine.hierarchy.build import _check_method
from geofl.errors import ConfigError
from geofl.rng import torch_generator

#: The memory limit's environment variable (geofl.config.memory.ENV_LIMIT; imported in
#: the tests that need the module, so that the others run without it).
ENV_LIMIT = "GEOFL_MEMORY_LIMIT"
HIER = "paper003-hierarchical-example"  # methods.1 and methods.2 run the hierarchy


def _write(tmp_path: Path, raw: dict[str, Any], name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def _one_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1, output
    return lines[0]


# --- item 4: FLAME averages uniformly -------------------------------------------------


@pytest.mark.parametrize("weighting", [None, "data_size", "consistency"])
def test_flame_refuses_a_weighting_other_than_uniform(
    tmp_path: Path, weighting: str | None
) -> None:
    raw = tiny_raw()
    raw["methods"][1]["algorithm"] = {"name": "flame"}
    if weighting is not None:
        raw["methods"][1]["weighting"] = {"name": weighting}
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, raw))
    line = str(err.value)
    assert line.startswith("methods.1.weighting.name: ") and "\n" not in line
    assert "Nguyen et al. 2022" in line and "uniform" in line


def test_flame_with_uniform_weighting_loads(tmp_path: Path) -> None:
    raw = tiny_raw()
    raw["methods"][1].update(algorithm={"name": "flame"}, weighting={"name": "uniform"})
    assert load_config(_write(tmp_path, raw)).methods[1].algorithm.name == "flame"


# --- item 5: validate refuses what run refuses ----------------------------------------

FLAME, SHIELD = "methods.1.algorithm={name: flame}", "methods.1.algorithm={name: dual_shield}"

#: (preset, --set overrides, the refused field): combinations ``geofl run`` refuses from
#: the config alone; ``config validate`` must refuse each with the same line.
REFUSED = [
    # issue 32: server sides with no meaning at the GEO (the rest run there)
    (HIER, ["methods.2.algorithm={name: scaffold}"], "methods.2.algorithm"),
    (HIER, ["methods.1.algorithm={name: feddyn}"], "methods.1.algorithm"),
    (HIER, ["methods.1.algorithm={name: fednova}"], "methods.1.algorithm"),
    (
        HIER,
        ["methods.1.aggregator={name: median}", "methods.1.weighting={name: consistency}"],
        "methods.1.weighting",
    ),
    (HIER, ["methods.2.aggregator={name: krum, num_byzantine: 3}"], "methods.2.aggregator"),
    (
        HIER,
        [
            SHIELD.replace("1.", "2."),
            "methods.2.hierarchy.leo.n=64",
            "methods.2.hierarchy.leo.planes=8",
        ],
        "methods.2.hierarchy.leo.n",
    ),
    (
        HIER,
        ["methods.1.hierarchy.driver_aggregator={name: krum}"],
        "methods.1.hierarchy.driver_aggregator.name",
    ),
    (HIER, ["data.cache=mmap"], "data.cache"),
    # registries' documented refusals (checked at load by both since before)
    ("demo", [FLAME], "methods.1.weighting.name"),
    ("demo", [FLAME, "methods.1.aggregator={name: median}"], "methods.1.aggregator.name"),
    ("demo", [SHIELD, "methods.1.weighting={name: consistency}"], "methods.1.weighting.name"),
]


@pytest.mark.parametrize(("source", "sets", "field"), REFUSED)
def test_validate_refuses_what_run_refuses_with_the_same_line(
    tmp_path: Path, source: str, sets: list[str], field: str
) -> None:
    opts = [x for s in sets for x in ("--set", s)]
    code, out = _cli("config", "validate", source, *opts)
    assert code == 2, out
    line = _one_line(out)
    assert line.startswith(f"error: {field}"), line
    run_dir = tmp_path / "run"
    code, out = _cli("run", source, *opts, "--out", str(run_dir), "--no-report", "--no-progress")
    assert code == 2, out
    assert _one_line(out) == line
    assert not run_dir.exists()


#: Server sides that run at the GEO since issue 32: ``config validate`` passes them and so
#: does the run's own check, before round 1.
GEO_ALLOWED = [
    ["methods.1.algorithm={name: dual_shield}", "methods.1.weighting={name: uniform}"],
    ["methods.2.aggregator={name: median}"],
    [
        "methods.2.hierarchy.driver_aggregator={name: median}",
        "methods.1.hierarchy.leo_aggregator={name: trimmed_mean, trim_fraction: 0.2}",
    ],
    ["methods.2.aggregator={name: trimmed_mean}", "methods.2.defenses=[{name: norm_bound}]"],
    ["methods.1.algorithm={name: fedadam}"],
    ["methods.1.algorithm={name: flame}", "methods.1.weighting={name: uniform}"],
    ["methods.2.algorithm={name: fedavgm}", "methods.2.aggregator={name: krum}"],
]


@pytest.mark.parametrize("sets", GEO_ALLOWED)
def test_validate_and_run_accept_every_server_side_the_geo_runs(sets: list[str]) -> None:
    opts = [x for s in sets for x in ("--set", s)]
    code, out = _cli("config", "validate", HIER, *opts)
    assert code == 0, out
    cfg = load_config(HIER, overrides=sets)
    for method in cfg.methods:
        if method.hierarchy is not None:
            _check_method(cfg, method, None)


#: Shipped presets with a hierarchy method: the ones whose run reaches the scheduler's
#: own config checks (:func:`geofl.engine.hierarchy.build.build_scheduler`).
HIERARCHY_PRESETS = [
    n for n in sorted(list_presets()) if "hierarchy:" in preset_path(n).read_text("utf-8")
]


@pytest.mark.parametrize("preset", HIERARCHY_PRESETS)
def test_every_hierarchy_preset_method_passes_validate_and_the_runs_checks(preset: str) -> None:
    """Each shipped hierarchy method passes validation and the scheduler's refusal point
    (what ``geofl run`` calls before round 1), so the two agree on every shipped method
    (every other method's run makes no config-only check beyond validation's)."""
    cfg = load_config(preset)
    hier = [m for m in cfg.methods if m.hierarchy is not None]
    assert hier
    for method in hier:
        _check_method(cfg, method, None)


def test_validate_prints_ok_for_every_shipped_preset() -> None:
    for preset in list_presets():
        code, out = _cli("config", "validate", preset)
        assert code == 0, (preset, out)
        assert out.splitlines()[-1].startswith(f"ok: {preset} "), out


# --- item 11: a name is not a path ----------------------------------------------------


@pytest.mark.parametrize("name", ["../../../x", "/abs/x", "a/b", "..", ".", "a\\b", "x y"])
def test_validate_refuses_a_name_that_is_a_path(name: str) -> None:
    code, out = _cli("config", "validate", "demo", "--set", f"name={name}")
    assert code == 2, out
    assert _one_line(out).startswith("error: name: "), out


def test_run_without_out_refuses_a_name_that_escapes_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "a" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    cfg = _write(tmp_path, tiny_raw(), "tiny.yaml")
    fast = ["--set", "federation.rounds=1", "--no-report", "--no-progress"]
    for name in ("../../escaped", str(tmp_path / "absolute")):
        code, out = _cli("run", str(cfg), "--set", f"name={name}", *fast)
        assert code == 2, out
        assert _one_line(out).startswith("error: name: "), out
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "tiny.yaml", "work"]


# --- item 14: special and oversize files ----------------------------------------------


@pytest.mark.parametrize("command", ["show", "validate"])
def test_dev_zero_is_refused_with_one_line(command: str) -> None:
    code, out = _cli("config", command, "/dev/zero")
    assert code == 2, out
    assert "not a regular file" in _one_line(out)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    got: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(got, fifo), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader (EOF) before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_raw blocked on a FIFO")
    assert len(got) == 1 and isinstance(got[0], ConfigError), got
    assert "not a regular file" in str(got[0])


def _capture(got: list[BaseException], path: Path) -> None:
    try:
        load_raw(path)
    except BaseException as err:  # handed to the test thread
        got.append(err)


def test_an_oversize_config_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    text = yaml.safe_dump(tiny_raw())
    path.write_text(text + "#" + "x" * (2**20 - len(text)) + "\n")  # a valid config, 1 MiB + 1
    with pytest.raises(ConfigError, match=r"^config: .*big\.yaml is over 1 MiB"):
        load_raw(path)


# --- item 17: duplicate YAML keys ------------------------------------------------------

DUPLICATED = """\
name: dup
seeds: [1]
methods:
  - name: a
    partition: {name: iid}
    algorithm: {name: fedavg}
    partition: {name: pooled}
"""


def test_a_duplicate_key_is_refused_naming_it_and_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(DUPLICATED)
    with pytest.raises(ConfigError) as err:
        load_raw(path)
    msg = str(err.value)
    assert "line 7, column 5: duplicate key 'partition' (first on line 5)" in msg, msg
    path.write_text("name: a\nseeds: [1]\nname: b\n")
    with pytest.raises(ConfigError, match=r"line 3, column 1: duplicate key 'name'"):
        load_raw(path)


def test_a_merge_key_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {a: 1, b: 2}\nover: {<<: *b, a: 3}\n")
    assert load_raw(path)["over"] == {"a": 3, "b": 2}


# --- item 15: sizes that cannot fit ----------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("data.params.size=100000", "data.params"),
        ("data.params.num_samples=1e9", "data.params"),
        ("model.params.width=100000", "model.params"),
    ],
)
def test_sizes_that_cannot_fit_are_refused_with_the_estimate(
    monkeypatch: pytest.MonkeyPatch, override: str, field: str
) -> None:
    monkeypatch.setenv(ENV_LIMIT, "16G")
    code, out = _cli("config", "validate", "demo", "--set", override)
    assert code == 2, out
    line = _one_line(out)
    assert line.startswith(f"error: {field}: ") and "GiB" in line and ENV_LIMIT in line, line
    monkeypatch.setenv(ENV_LIMIT, "none")  # the override turns the check off
    assert _cli("config", "validate", "demo", "--set", "model.params.width=100000")[0] == 0


def test_the_estimate_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """400 patches of 13 bands at 16 × 16 in float32; P parameters (counted on a real
    CPU model) × 4 B × (4 model-sized copies + K stacked updates)."""
    from geofl.config.memory import estimate_memory

    monkeypatch.setenv(ENV_LIMIT, "none")
    cfg = load_config(_write(tmp_path, tiny_raw()))
    est = estimate_memory(cfg)
    assert est.data == 400 * 13 * 16 * 16 * 4
    plugins.load_all()
    model = plugins.MODELS.build(
        "small_cnn",
        {"width": 8, "blocks": 2},
        in_channels=13,
        num_classes=10,
        generator=torch_generator(0, "model_init"),
    )
    p = sum(x.numel() for x in model.parameters() if isinstance(x, torch.Tensor))
    k = clients_per_round(cfg) or cfg.federation.num_clients
    assert (est.parameters, est.updates) == (p, k)
    assert est.model == p * 4 * (4 + k)


@pytest.mark.parametrize(
    ("text", "limit"),
    [("64G", 64 * 2**30), ("512M", 512 * 2**20), ("1000", 1000), ("1.5GiB", 3 * 2**29)],
)
def test_the_limit_override_is_read(monkeypatch: pytest.MonkeyPatch, text: str, limit: int) -> None:
    from geofl.config.memory import memory_limit

    monkeypatch.setenv(ENV_LIMIT, text)
    assert memory_limit() == limit


def test_a_bad_limit_override_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from geofl.config.memory import memory_limit

    monkeypatch.setenv(ENV_LIMIT, "lots")
    with pytest.raises(ConfigError, match=rf"^{ENV_LIMIT}: 'lots' is not a size"):
        memory_limit()
