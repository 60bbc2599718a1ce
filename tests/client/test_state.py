"""ClientStateStore: per-client state in RAM or memory-mapped, staged until the checkpoint.

The run's protocol is: clients stage their new state during a round → the checkpoint takes
``state_dict()`` (carrying the staged rows) → ``commit()``. A kill anywhere is recovered by
rebuilding the store and loading the checkpoint's state dict.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from geofl.client.state import ClientState, ClientStateStore, StateSpec
from geofl.errors import RunDirError

K, D = 4, 3
SPECS = {"control": StateSpec((D,)), "bias": StateSpec((2,), fill=1.5)}
EVENT = {"mechanism": "gaussian", "noise_multiplier": 1.1}


def _store(kind: str, tmp_path: Path) -> ClientStateStore:
    return ClientStateStore(K, SPECS, path=None if kind == "ram" else tmp_path / "state")


def _state(v: float, events: tuple[dict[str, Any], ...] = ()) -> ClientState:
    return ClientState({"control": torch.full((D,), v), "bias": torch.full((2,), -v)}, events)


def _checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """What torch.save/torch.load of a checkpoint does to the state dict."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    out: dict[str, Any] = torch.load(buf, weights_only=False)
    return out


def _rows(store: ClientStateStore, name: str) -> torch.Tensor:
    return torch.stack([store.get(k).tensors[name] for k in range(K)])


KINDS = pytest.mark.parametrize("kind", ["ram", "mmap"])


@KINDS
def test_initial_state_uses_each_specs_fill(kind: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path)
    assert torch.equal(_rows(store, "control"), torch.zeros(K, D))
    assert torch.equal(_rows(store, "bias"), torch.full((K, 2), 1.5))
    assert store.get(0).dp_events == () and store.events(3) == ()
    assert store.get(2).tensors["control"].dtype == torch.float32


@KINDS
def test_staged_rows_are_invisible_until_commit(kind: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path)
    store.stage(1, _state(2.0, (EVENT,)))
    store.stage(3, _state(5.0))
    store.stage(3, _state(7.0))  # restaged in the same round: the last one wins
    assert torch.equal(store.get(1).tensors["control"], torch.zeros(D))
    assert store.events(1) == ()
    store.commit()
    assert torch.equal(store.get(1).tensors["control"], torch.full((D,), 2.0))
    assert torch.equal(store.get(1).tensors["bias"], torch.full((2,), -2.0))
    assert torch.equal(store.get(3).tensors["control"], torch.full((D,), 7.0))
    assert torch.equal(store.get(0).tensors["bias"], torch.full((2,), 1.5))  # untouched
    assert store.events(1) == (EVENT,) and store.get(1).dp_events == (EVENT,)
    store.commit()  # nothing staged: a no-op
    assert torch.equal(store.get(3).tensors["control"], torch.full((D,), 7.0))


@KINDS
def test_stage_refuses_a_state_missing_a_tensor(kind: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path)
    with pytest.raises(ValueError, match="bias"):
        store.stage(0, ClientState({"control": torch.ones(D)}))


@KINDS
def test_committed_state_is_not_changed_by_the_staged_tensors_later(
    kind: str, tmp_path: Path
) -> None:
    store = _store(kind, tmp_path)
    new = _state(1.0)
    store.stage(0, new)
    store.commit()
    new.tensors["control"].fill_(99.0)  # the store copied the values at commit
    assert torch.equal(store.get(0).tensors["control"], torch.ones(D))


@KINDS
def test_state_dict_round_trip(kind: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path / "a")
    store.stage(0, _state(1.0, (EVENT,)))
    store.commit()
    store.stage(2, _state(3.0, (EVENT, EVENT)))
    state = _checkpoint(store.state_dict())
    store.commit()
    other = ClientStateStore(K, SPECS, path=None if kind == "ram" else tmp_path / "a" / "state")
    other.load_state_dict(state)
    for name in SPECS:
        assert torch.equal(_rows(other, name), _rows(store, name)), name
    assert [other.events(k) for k in range(K)] == [store.events(k) for k in range(K)]
    assert other.events(2) == (EVENT, EVENT)


def test_ram_state_dict_serialised_before_commit_keeps_the_pre_commit_arrays() -> None:
    # state_dict() hands out views (no K x D copy per checkpoint); the run serialises it
    # before commit() writes the arrays, so the checkpoint holds the pre-commit state.
    store = ClientStateStore(K, SPECS)
    store.stage(0, _state(4.0))
    buf = io.BytesIO()
    torch.save(store.state_dict(), buf)
    store.commit()
    buf.seek(0)
    state = torch.load(buf, weights_only=False)
    assert torch.equal(state["arrays"]["control"], torch.zeros(K, D))
    assert torch.equal(state["staged"][0]["control"], _state(4.0).tensors["control"])


def test_mmap_reopens_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "state"
    first = ClientStateStore(K, SPECS, path=path)
    first.stage(2, _state(6.0))
    first.commit()
    assert sorted(p.name for p in path.iterdir()) == ["bias.npy", "control.npy"]
    assert np.load(path / "control.npy")[2].tolist() == [6.0] * D  # flushed to disk
    again = ClientStateStore(K, SPECS, path=path)
    assert torch.equal(again.get(2).tensors["control"], torch.full((D,), 6.0))
    assert torch.equal(again.get(2).tensors["bias"], torch.full((2,), -6.0))
    assert torch.equal(again.get(0).tensors["bias"], torch.full((2,), 1.5))  # not refilled


@KINDS
def test_crash_between_checkpoint_and_commit_recovers_the_staged_rows(
    kind: str, tmp_path: Path
) -> None:
    path = None if kind == "ram" else tmp_path / "state"
    store = ClientStateStore(K, SPECS, path=path)
    store.stage(0, _state(1.0, (EVENT,)))  # round 1
    ckpt1 = _checkpoint(store.state_dict())
    store.commit()
    store.stage(1, _state(2.0, (EVENT,)))  # round 2: staged, checkpointed, then the kill
    store.stage(0, _state(3.0, (EVENT, EVENT)))
    ckpt2 = _checkpoint(store.state_dict())
    del store  # no commit
    rebuilt = ClientStateStore(K, SPECS, path=path)
    rebuilt.load_state_dict(ckpt2)
    assert torch.equal(rebuilt.get(0).tensors["control"], torch.full((D,), 3.0))
    assert torch.equal(rebuilt.get(1).tensors["control"], torch.full((D,), 2.0))
    assert torch.equal(rebuilt.get(1).tensors["bias"], torch.full((2,), -2.0))
    assert torch.equal(rebuilt.get(2).tensors["bias"], torch.full((2,), 1.5))
    assert rebuilt.events(0) == (EVENT, EVENT) and rebuilt.events(1) == (EVENT,)
    assert rebuilt.events(2) == ()
    # the recovered rows are on disk (mmap): a later reopen sees them without the checkpoint
    if path is not None:
        reopened = ClientStateStore(K, SPECS, path=path)
        assert torch.equal(reopened.get(1).tensors["control"], torch.full((D,), 2.0))
    # a kill right after commit (store ahead of nothing): reloading round 1's checkpoint
    # into a fresh RAM store gives round 1's state
    if path is None:
        fresh = ClientStateStore(K, SPECS)
        fresh.load_state_dict(ckpt1)
        assert torch.equal(fresh.get(0).tensors["control"], torch.ones(D))
        assert torch.equal(fresh.get(1).tensors["control"], torch.zeros(D))


@pytest.mark.parametrize(
    ("shape", "dtype"), [((K + 1, D), np.float32), ((K, D + 1), np.float32), ((K, D), np.float64)]
)
def test_mmap_refuses_an_existing_file_of_the_wrong_layout(
    tmp_path: Path, shape: tuple[int, ...], dtype: type
) -> None:
    path = tmp_path / "state"
    path.mkdir()
    np.save(path / "control.npy", np.zeros(shape, dtype=dtype))
    with pytest.raises(RunDirError, match=r"control\.npy: client state has shape"):
        ClientStateStore(K, SPECS, path=path)


def test_store_without_tensors_keeps_ledgers(tmp_path: Path) -> None:
    # FedAvg with a noise release: no algorithm state, only the privacy ledgers.
    for path in (None, tmp_path / "state"):
        store = ClientStateStore(K, {}, path=path)
        store.stage(1, ClientState({}, (EVENT,)))
        state = _checkpoint(store.state_dict())
        store.commit()
        store.stage(1, ClientState({}, (EVENT, EVENT)))
        store.commit()
        assert store.events(1) == (EVENT, EVENT) and store.get(1).tensors == {}
        other = ClientStateStore(K, {}, path=path)
        other.load_state_dict(state)
        assert other.events(1) == (EVENT,) and other.events(0) == ()
