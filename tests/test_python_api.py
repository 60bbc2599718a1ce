"""The Python API (:mod:`geofl.api`, issue 34 item 4): load a config from a preset, a path or
a dict with ``--set``-style overrides; run it with callbacks; read a typed result back; use a
user-registered aggregator and algorithm by name; and the guide page runs end to end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field

import geofl
from geofl import api
from geofl.plugins import load_all
from geofl.server.aggregators import weighted_mean
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy
from geofl.tasks.base import SplitMetrics
from tests.conftest import tiny_raw

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "python-api.md"

#: How often the user aggregator and algorithm below were used (proves they ran).
CALLS: dict[str, int] = {"aggregator": 0, "algorithm": 0}


class _ScaleParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scale: float = Field(1.0, gt=0)


def _scaled_mean(params: _ScaleParams) -> api.Aggregator:
    """Weighted mean times a factor (a user aggregator for the test)."""

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> api.Aggregate:
        CALLS["aggregator"] += 1
        w = weights.to(torch.float64)
        delta = params.scale * weighted_mean(updates, weights.to(updates.dtype))
        return api.Aggregate(delta, w / w.sum())

    return aggregate


def _damped(params: _ScaleParams, *, ctx: api.AlgorithmContext) -> api.Algorithm:
    """FedAvg with a scaled server step (a user algorithm for the test)."""
    CALLS["algorithm"] += 1
    return api.Algorithm(
        ComposedStrategy(ctx.tier, PlainServerOptimizer(params.scale * ctx.server_lr))
    )


@pytest.fixture(autouse=True)
def _scratch_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plug-ins registered here (and by the guide) live for one test: each registry gets a
    copy of its entries, restored afterwards, so no other test sees them. The built-ins are
    registered first (their modules register once per process)."""
    load_all()
    for registry in (api.AGGREGATORS, api.ALGORITHMS, *_OTHER_REGISTRIES):
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    api.AGGREGATORS.register("test_api_scaled_mean", params=_ScaleParams)(_scaled_mean)
    api.ALGORITHMS.register("test_api_damped", params=_ScaleParams)(_damped)


_OTHER_REGISTRIES = (
    api.ATTACKS,
    api.DATASETS,
    api.DEFENSES,
    api.LOCAL_TRAINERS,
    api.MODELS,
    api.PARTITIONERS,
    api.RELEASE_STEPS,
    api.SAMPLERS,
    api.SUBSCRIBERS,
    api.TASKS,
    api.WEIGHTINGS,
)


def _tiny(**over: Any) -> dict[str, Any]:
    """Two rounds, three clients, 200 samples: a couple of seconds per method."""
    raw = tiny_raw(federation={"num_clients": 3, "rounds": 2}, **over)
    raw["data"]["params"]["num_samples"] = 200
    return raw


class _Counter:
    """A full subscriber: counts starts, rounds and ends per method."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_run_start(self, info: api.RunInfo) -> None:
        self.events.append(("start", info.method))

    def on_round_end(self, info: api.RunInfo, record: api.RoundRecord) -> None:
        assert isinstance(record, api.RoundRecord)
        self.events.append(("round", info.method))

    def on_run_end(self, info: api.RunInfo, final: dict[str, Any]) -> None:
        self.events.append(("end", info.method))


def test_run_with_callbacks_and_user_plugins_gives_a_typed_result(tmp_path: Path) -> None:
    """A dict config naming a user aggregator and a user algorithm runs; a function and a
    subscriber see every round; the result is typed and reads back from the directory."""
    raw = _tiny(
        methods=[
            {"name": "scaled", "aggregator": {"name": "test_api_scaled_mean", "scale": 0.5}},
            {"name": "damped", "algorithm": {"name": "test_api_damped", "scale": 0.5}},
        ]
    )
    rounds: list[tuple[str, int]] = []
    counter = _Counter()
    before = dict(CALLS)
    result = geofl.run(
        raw,
        tmp_path / "run",
        callbacks=[lambda info, rec: rounds.append((info.method, rec.round)), counter],
    )
    assert rounds == [("scaled", 1), ("scaled", 2), ("damped", 1), ("damped", 2)]
    assert counter.events.count(("round", "damped")) == 2
    assert counter.events[0] == ("start", "scaled") and counter.events[-1] == ("end", "damped")
    assert CALLS["aggregator"] - before["aggregator"] == 2  # one aggregation per round
    assert CALLS["algorithm"] > before["algorithm"]
    assert isinstance(result, api.RunResult) and result.run_dir == tmp_path / "run"
    assert result.methods == ["scaled", "damped"] and result.task.primary_metric == "accuracy"
    run = result.get("damped", 3)
    assert run.dir == tmp_path / "run" / "methods" / "damped" / "seed-3"
    assert [r.round for r in run.rounds] == [1, 2]
    assert all(isinstance(r, api.RoundRecord) for r in run.rounds)
    assert run.final is not None and isinstance(run.final.test, SplitMetrics)
    assert run.final.test.values["accuracy"] == run.rounds[-1].test.values["accuracy"]  # type: ignore[union-attr]
    assert run.final.rounds == 2 and run.final.raw["rounds"] == 2
    assert [r for r, _ in run.series("accuracy")] == [1, 2]
    assert set(result.summary["methods"]) == {"scaled", "damped"}
    assert api.RunResult.load(tmp_path / "run") == result
    assert raw["methods"][0]["aggregator"] == {"name": "test_api_scaled_mean", "scale": 0.5}


def test_load_takes_a_preset_a_path_a_dict_and_overrides(tmp_path: Path) -> None:
    """The three sources and the CLI's override syntax give the same validated config."""
    over = ["federation.rounds=2", "model.params={width: 8, blocks: 2}"]
    demo = api.load("demo", over, seeds=[5])
    assert demo.federation.rounds == 2 and demo.seeds == [5] and demo.name == "demo"
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(_tiny()))
    from_path = api.load(path, ["train.lr=0.05"])
    raw = _tiny()
    from_dict = api.load(raw, ["train.lr=0.05"])
    assert from_path == from_dict and from_dict.train.lr == 0.05
    assert raw == _tiny()  # the caller's dict is not changed
    assert api.load(from_dict) is from_dict
    assert api.load(from_dict, seeds=[7]).seeds == [7]


@pytest.mark.parametrize(
    ("source", "overrides", "needle"),
    [
        ("no-such-preset", [], "no-such-preset"),
        ("demo", ["federation.num_clients=0"], "federation.num_clients"),
        ("demo", ["nope"], "nope"),
        (_tiny(methods=[{"name": "m", "aggregator": {"name": "no_such_agg"}}]), [], "aggregator"),
        (
            _tiny(
                methods=[{"name": "m", "aggregator": {"name": "test_api_scaled_mean", "scale": -1}}]
            ),
            [],
            "scale",
        ),
        (42, [], "source"),
    ],
)
def test_bad_input_is_a_one_line_config_error(
    source: Any, overrides: list[str], needle: str
) -> None:
    with pytest.raises(api.ConfigError) as err:
        api.load(source, overrides)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_bad_callback_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(api.ConfigError, match=r"callbacks\.0"):
        api.run(_tiny(), tmp_path / "run", callbacks=[object()])  # type: ignore[list-item]
    assert not (tmp_path / "run").exists()


def test_loading_what_is_not_a_run_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(api.RunDirError, match=r"run\.json: missing") as err:
        api.RunResult.load(tmp_path)
    assert "\n" not in str(err.value)


def test_import_geofl_stays_light() -> None:
    """``import geofl`` loads neither the engine nor torch; ``geofl.run`` is the API's."""
    code = "import sys, geofl; print('torch' in sys.modules, 'geofl.api' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]
    assert geofl.run is api.run and geofl.RunResult is api.RunResult and geofl.api is api


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_the_guide_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``python`` block of docs/guides/python-api.md, in order, in one namespace."""
    blocks = _python_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "python_api_guide"}
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), namespace)
    assert (tmp_path / "runs" / "mine" / "summary.json").is_file()
    assert namespace["mine"].methods == ["fedavg", "capped", "damped"]
    assert namespace["counter"].rounds == {"fedavg": 2}
    assert "capped_mean" in api.AGGREGATORS  # the fixture removes it after the test


def test_registrations_do_not_leak_between_tests() -> None:
    """The guide's plug-ins (registered in the test above) are gone again."""
    assert "capped_mean" not in api.AGGREGATORS and "damped_fedavg" not in api.ALGORITHMS
