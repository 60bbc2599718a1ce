"""DP methods fit no statistic on the clients' pooled training records (issue 33, item 2):
input standardisation and ``pos_weight: auto`` come from the held-out val split; non-DP
methods keep the train statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.data.splitting.split import Split, make_split
from geofl.engine.components import build_program
from geofl.engine.experiment import (
    load_dataset,
    method_stats_split,
    prepare_split,
    run_experiment,
    split_labels,
)
from geofl.engine.records.export import model_spec
from geofl.errors import ConfigError
from geofl.tasks.common import auto_pos_weight

DP_SGD = {"name": "dp_sgd", "noise_multiplier": 1.0, "micro_batch": 32}


def _cfg(tmp_path: Path, raw: dict[str, Any]) -> ExperimentConfig:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def _methods() -> list[dict[str, Any]]:
    iid = {"name": "iid"}
    return [
        {"name": "fedavg", "partition": iid},
        {"name": "clip-only", "partition": iid, "release": [{"name": "l2_clip", "bound": 1.0}]},
        {"name": "dpsgd", "partition": iid, "trainer": DP_SGD},
        {
            "name": "gauss",
            "partition": iid,
            "release": [{"name": "gaussian", "clip": 1.0, "sigma": 0.5}],
        },
        {
            "name": "ftrl",
            "partition": iid,
            "algorithm": {"name": "dp_ftrl", "clip": 1.0, "noise_multiplier": 1.0},
        },
    ]


def _gn_raw(**over: Any) -> dict[str, Any]:
    raw = tiny_raw(**over)
    raw["model"]["params"]["norm"] = "group"  # DP-SGD refuses BatchNorm
    return raw


def test_dp_methods_take_their_statistics_from_val(tmp_path: Path) -> None:
    raw = _gn_raw()
    raw["methods"] = _methods()
    cfg = _cfg(tmp_path, raw)
    got = {m.name: method_stats_split(m) for m in cfg.methods}
    assert got == {
        "fedavg": "train",
        "clip-only": "train",
        "dpsgd": "val",
        "gauss": "val",
        "ftrl": "val",
    }


def _split(cfg: ExperimentConfig) -> tuple[Any, Split]:
    ds = load_dataset(cfg)
    return ds, make_split(split_labels(ds), cfg.data.split, 3, ds.metadata)


def _without_first_train_record(split: Split) -> Split:
    return Split(split.train[1:], split.val, split.test)


def test_val_statistics_do_not_move_with_a_training_record(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, tiny_raw())
    ds, split = _split(cfg)
    raw_val = ds.subset(split.val).inputs
    val = prepare_split(ds, cfg, 3, split, stats_from="val")
    assert val.stats_from == "val"
    mean = raw_val.mean(dim=(0, 2, 3), keepdim=True)
    assert torch.allclose(val.mean, mean)  # type: ignore[arg-type]
    neighbour = _without_first_train_record(split)
    v2 = prepare_split(ds, cfg, 3, neighbour, stats_from="val")
    assert torch.equal(val.mean, v2.mean) and torch.equal(val.std, v2.std)  # type: ignore[arg-type]
    # Train statistics (the non-DP default) do move: that is the pooled release.
    t1 = prepare_split(ds, cfg, 3, split)
    t2 = prepare_split(ds, cfg, 3, neighbour)
    assert t1.stats_from == "train" and not torch.equal(t1.mean, t2.mean)  # type: ignore[arg-type]


def test_a_dp_method_without_val_records_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, tiny_raw(data={**tiny_raw()["data"], "split": {"val": 0.0}}))
    ds, split = _split(cfg)
    prepare_split(ds, cfg, 3, split)  # train statistics: fine
    with pytest.raises(ConfigError, match=r"^data\.split\.val: is empty, but a DP method"):
        prepare_split(ds, cfg, 3, split, stats_from="val")


def _binary_raw() -> dict[str, Any]:
    return {
        "name": "bin",
        "seeds": [3],
        "task": {"name": "binary", "pos_weight": "auto"},
        "data": {"dataset": "synthetic_tabular_binary", "params": {"num_samples": 600}},
        "model": {"name": "mlp", "params": {"hidden": [8]}},
        "train": {"batch_size": 32, "local_epochs": 1},
        "federation": {"num_clients": 3, "rounds": 1},
        "methods": [
            {"name": "fedavg", "partition": {"name": "iid"}},
            {"name": "dpsgd", "partition": {"name": "iid"}, "trainer": DP_SGD},
        ],
    }


def test_pos_weight_auto_of_a_dp_method_comes_from_the_val_labels(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, _binary_raw())
    ds, split = _split(cfg)
    y = ds.targets
    for method, part in zip(cfg.methods, (split.train, split.val), strict=True):
        data = prepare_split(ds, cfg, 3, split, stats_from=method_stats_split(method))
        task = build_program(cfg, method, 3, data).task
        t = y[torch.as_tensor(part)]
        want = auto_pos_weight((t != 0).sum().reshape(1), t.shape[0], 100.0)
        assert torch.equal(task.pos_weight, want), method.name  # type: ignore[attr-defined]
    tr, va = y[torch.as_tensor(split.train)], y[torch.as_tensor(split.val)]
    assert float((tr != 0).float().mean()) != float((va != 0).float().mean())


@pytest.mark.slow
def test_the_run_records_which_statistics_each_method_used(tmp_path: Path) -> None:
    raw = _binary_raw()
    cfg = _cfg(tmp_path, raw)
    out = run_experiment(cfg, tmp_path / "run")
    for name, want in (("fedavg", "train"), ("dpsgd", "val")):
        part = json.loads((out / "methods" / name / "seed-3" / "partition.json").read_text())
        assert part["data_statistics"] == want


def test_regression_target_statistics_of_a_dp_method_come_from_val(tmp_path: Path) -> None:
    """The regression task's target mean/std (recorded in model.json) are pooled training
    statistics too: a DP method fits them on the val split, in the run and in the spec."""
    raw = _binary_raw()
    raw["task"] = {"name": "regression"}
    raw["data"] = {"dataset": "synthetic_yield", "params": {"num_samples": 600}}
    cfg = _cfg(tmp_path, raw)
    ds, split = _split(cfg)
    for method, part in zip(cfg.methods, (split.train, split.val), strict=True):
        data = prepare_split(ds, cfg, 3, split, stats_from=method_stats_split(method))
        task = build_program(cfg, method, 3, data).task
        want = ds.targets[torch.as_tensor(part)].double().mean(dim=0).reshape(-1)
        assert torch.allclose(task.mean, want), method.name  # type: ignore[attr-defined]
        state = model_spec(cfg, method, 3, data, ds.bands).task.state
        assert state["target_mean"] == task.mean.tolist()  # type: ignore[attr-defined]
