"""The memory-mapped decode cache (``data.cache: mmap``): store format, lazy rows, runs."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.data.base import ArrayDataset
from geofl.data.storage import lazy
from geofl.data.storage.lazy import StoredRows
from geofl.data.storage.store import StoreWriter, cached_store, open_store, store_path
from geofl.data.synthetic.landcover import SyntheticParams, build_synthetic
from geofl.data.synthetic.multilabel import MultiLabelParams, build_multilabel
from geofl.engine.components import build_task, client_datasets
from geofl.engine.experiment import build_partition, load_dataset, prepare_split, run_experiment
from geofl.errors import ConfigError, DataError
from geofl.events import RunInfo
from geofl.io import read_jsonl
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

PARAMS = SyntheticParams(num_samples=240, size=16, seed=5)


def _pair(tmp_path: Path) -> tuple[ArrayDataset, ArrayDataset]:
    mem = build_synthetic(PARAMS, cache_dir=tmp_path)
    stored = build_synthetic(PARAMS, cache_dir=tmp_path, cache_mode="mmap")
    return mem, stored


def test_store_round_trip_gives_identical_samples(tmp_path: Path) -> None:
    mem, stored = _pair(tmp_path)
    assert isinstance(stored.inputs, StoredRows) and isinstance(mem.inputs, torch.Tensor)
    assert stored.inputs.shape == mem.inputs.shape and len(stored) == len(mem)
    assert torch.equal(stored.targets, mem.targets)
    for key, arr in mem.metadata.items():
        np.testing.assert_array_equal(stored.metadata[key], arr)
    idx = torch.randperm(len(mem), generator=torch.Generator().manual_seed(0))[:64]
    assert torch.equal(stored.inputs[idx], mem.inputs[idx])  # random batch, unsorted
    assert torch.equal(stored.inputs[7:131], mem.inputs[7:131])  # slice (evaluation)
    assert torch.equal(stored.inputs.materialize(), mem.inputs)
    # views compose: bands, then a subset, then a batch of it
    rgb_m, rgb_s = mem.select_bands("rgb"), stored.select_bands("rgb")
    sub = torch.tensor([5, 3, 200, 4, 4])
    assert torch.equal(
        rgb_s.subset(sub).inputs[torch.tensor([4, 0, 2])], rgb_m.inputs[sub][[4, 0, 2]]
    )
    # a second open reuses the store
    again = build_synthetic(PARAMS, cache_dir=tmp_path, cache_mode="mmap")
    assert torch.equal(again.inputs[idx], mem.inputs[idx])


def test_standardised_split_and_clients_match_memory(tmp_path: Path) -> None:
    mem, stored = _pair(tmp_path)
    cfg = load_config(_write(tmp_path, tiny_raw()))
    pm, ps = prepare_split(mem, cfg, seed=3), prepare_split(stored, cfg, seed=3)
    for part_m, part_s in zip(
        (pm.train, pm.val, pm.test), (ps.train, ps.val, ps.test), strict=True
    ):
        assert isinstance(part_s.inputs, StoredRows)
        assert torch.equal(part_s.inputs[0 : len(part_s)], part_m.inputs)
    assert pm.mean is not None and ps.mean is not None  # model.json's statistics
    assert pm.std is not None and ps.std is not None
    assert torch.equal(ps.mean, pm.mean) and torch.equal(ps.std, pm.std)
    train_index = np.arange(len(pm.train))
    part = build_partition(cfg, cfg.methods[1], mem.subset(train_index), train_index, 3)
    task = build_task(cfg, pm.train.num_classes, pm.train.targets)
    clients = zip(client_datasets(pm, part, task), client_datasets(ps, part, task), strict=True)
    for cm, cs in clients:
        assert isinstance(cs.inputs, StoredRows)  # an index view, not a copy
        idx = torch.arange(len(cm)).flip(0)
        assert torch.equal(cs.inputs[idx], cm.inputs[idx])


def test_streamed_statistics_agree_with_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, stored = _pair(tmp_path)
    assert isinstance(stored.inputs, StoredRows)
    exact = stored.inputs.channel_mean_std()
    monkeypatch.setattr(lazy, "EXACT_STATS_BYTES", 0)
    monkeypatch.setattr(lazy, "CHUNK_ROWS", 50)
    streamed = stored.inputs.channel_mean_std()
    for e, s in zip(exact, streamed, strict=True):
        assert e.shape == s.shape == (1, 13, 1, 1)
        torch.testing.assert_close(s, e, rtol=1e-5, atol=1e-7)


def test_multilabel_store_matches_memory(tmp_path: Path) -> None:
    params = MultiLabelParams(num_samples=120, size=16, seed=2)
    mem = build_multilabel(params, cache_dir=tmp_path)
    stored = build_multilabel(params, cache_dir=tmp_path, cache_mode="mmap")
    assert isinstance(stored.inputs, StoredRows) and stored.target_kind == "multi_hot"
    assert torch.equal(stored.inputs.materialize(), mem.inputs)
    assert torch.equal(stored.targets, mem.targets)
    for key, arr in mem.metadata.items():
        np.testing.assert_array_equal(stored.metadata[key], arr)


def test_tabular_dataset_with_mmap_is_one_config_line(tmp_path: Path) -> None:
    raw = tiny_raw()
    raw["data"] = {"dataset": "synthetic_tabular_binary", "cache": "mmap"}
    raw["data"]["cache_dir"] = str(tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"^data\.cache: dataset 'synthetic_tabular_binary'"):
        load_dataset(load_config(_write(tmp_path, raw)))


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / f"cfg-{len(list(tmp_path.glob('cfg-*')))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _metrics(run: Path, method: str, seed: int) -> list[dict[str, Any]]:
    keep = ("val", "test", "train_loss", "train_accuracy", "model_sha256")
    recs = read_jsonl(seed_dir(run, method, seed) / "rounds.jsonl")
    return [{k: r[k] for k in keep if k in r} for r in recs]


def test_training_metrics_bit_identical_with_mmap(tmp_path: Path) -> None:
    runs = {}
    for mode in ("memory", "mmap"):
        raw = tiny_raw()
        raw["data"]["cache"] = mode
        raw["federation"]["rounds"] = 2
        runs[mode] = run_experiment(load_config(_write(tmp_path, raw)), tmp_path / mode)
    for method in ("central", "fedavg"):
        mem, mm = _metrics(runs["memory"], method, 3), _metrics(runs["mmap"], method, 3)
        assert len(mem) == 2 and mem == mm
        assert mem[0]["model_sha256"] and "accuracy" in mem[0]["test"]


class _StopAfterFirstRound:
    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if info.method == "fedavg" and record.round == 1:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def test_a_memory_run_resumes_with_mmap_identically(tmp_path: Path) -> None:
    cfgs = {}
    for mode in ("memory", "mmap"):
        raw = tiny_raw()
        raw["data"]["cache"] = mode
        raw["federation"]["rounds"] = 2
        cfgs[mode] = load_config(_write(tmp_path, raw))
    whole = run_experiment(cfgs["memory"], tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfgs["memory"], tmp_path / "cut", subscribers=[_StopAfterFirstRound()])
    cut = run_experiment(cfgs["mmap"], tmp_path / "cut", resume=True)  # data.cache may change
    assert _metrics(cut, "fedavg", 3) == _metrics(whole, "fedavg", 3)


def test_dataset_without_store_support_is_a_config_error(tmp_path: Path) -> None:
    from geofl.data.base import DATASETS
    from geofl.engine.experiment import load_dataset

    @DATASETS.register("memory_only_for_test")
    def _build(_: object, *, cache_dir: Path) -> ArrayDataset:  # pragma: no cover
        raise AssertionError("not called")

    try:
        raw = tiny_raw()
        raw["data"] = {"dataset": "memory_only_for_test", "cache": "mmap"}
        with pytest.raises(ConfigError, match=r"^data\.cache: dataset 'memory_only_for_test'"):
            load_dataset(load_config(_write(tmp_path, raw)))
    finally:
        DATASETS._entries.pop("memory_only_for_test")


def _small_store(path: Path) -> None:
    with StoreWriter(path, {"bands": ["a", "b"]}) as w:
        w.create("images", (10, 2, 3, 3), np.uint16)
        for lo in range(0, 10, 4):  # chunk-wise through the file, as a large build writes it
            rows = np.arange(lo, min(lo + 4, 10), dtype=np.uint16)[:, None, None, None]
            w.write_rows("images", lo, np.broadcast_to(rows, (len(rows), 2, 3, 3)))
        w.put("labels", np.arange(10) % 3)


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda p: (p / "images.npy").write_bytes((p / "images.npy").read_bytes()[:-7]), "has"),
        (lambda p: (p / "labels.npy").unlink(), "labels.npy is missing"),
        (lambda p: (p / "header.json").write_text("{trunc"), "header.json"),
        (lambda p: (p / "header.json").unlink(), "no header.json"),
        (
            lambda p: (p / "images.npy").write_bytes(b"\0" * (p / "images.npy").stat().st_size),
            "images.npy",
        ),
    ],
)
def test_damaged_store_is_named_in_one_line(tmp_path: Path, damage: Any, what: str) -> None:
    path = store_path(tmp_path, "k")
    _small_store(path)
    arrays, meta = open_store(path)
    assert meta == {"bands": ["a", "b"]} and arrays["images"][7, 1, 2, 2] == 7
    damage(path)
    with pytest.raises(DataError) as err:
        open_store(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and what in msg
    assert msg.endswith("delete it and run again to rebuild it")


def test_failed_build_publishes_nothing(tmp_path: Path) -> None:
    path = store_path(tmp_path, "k")

    def build(w: StoreWriter) -> None:
        w.create("images", (4, 1), np.float32)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        cached_store(tmp_path, "k", build)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def _writer_process(path: str, barrier: Any) -> None:
    with StoreWriter(Path(path)) as w:
        x = w.create("images", (2000, 64), np.float32)
        barrier.wait()  # both writers are mid-write before either publishes
        x[:] = np.arange(2000, dtype=np.float32)[:, None]


def test_two_concurrent_writers_do_not_corrupt(tmp_path: Path) -> None:
    path = store_path(tmp_path, "race")
    ctx = mp.get_context("fork")  # the writer is a function of this test module
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer_process, args=(str(path), barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    arrays, _ = open_store(path)
    np.testing.assert_array_equal(arrays["images"][:, 0], np.arange(2000, dtype=np.float32))
    assert sorted(q.name for q in tmp_path.iterdir()) == ["race.store"]  # no temp left
