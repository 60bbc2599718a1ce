"""Issue 36: the hierarchy's vectorised per-round bookkeeping equals the per-upload
reference.

* The uploads that land at one instant travel as one :class:`TractorArrivals` event; a
  run whose queue splits every such event back into one :class:`TractorArrival` per upload
  (the reference, as before issue 36) gives the same round records bit for bit — with the
  ground uplink's per-tractor latencies (many instants), driver failures (an in-flight
  update of a tractor that went down is lost), the batched client step, and one tractor.
* An ideal network needs no generator per upload (:attr:`IdealNetwork.always_delivers`),
  and a NaN update is still refused as malformed without one.
* :func:`collections_paused` restores the collector's state, also after an error.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.client.batched import collections_paused
from geofl.engine.hierarchy.events import EventQueue, TractorArrival, TractorArrivals
from geofl.engine.run import FederatedRun
from geofl.network.links import NETWORK_MODELS, IdealNetwork
from geofl.records import RejectionReason
from geofl.registry import NoParams
from geofl.update import ClientUpdate, UpdateMeta

UPLINK: dict[str, Any] = {}


def _one_by_one(queue: EventQueue) -> None:
    """Make ``queue`` schedule every upload of a :class:`TractorArrivals` as its own
    :class:`TractorArrival` at the same instant, in the same order (the reference)."""
    push = queue.push

    def split(time_s: float, event: Any) -> None:
        if isinstance(event, TractorArrivals):
            for c, u in zip(event.clusters, event.updates, strict=True):
                push(time_s, TractorArrival(c, u))
        else:
            push(time_s, event)

    queue.push = split  # type: ignore[method-assign]


def _rounds(run: FederatedRun, rounds: int) -> list[dict[str, Any]]:
    params, out = run.init_params, []
    for r in range(1, rounds + 1):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = res.params
        rec = res.record.to_json() if hasattr(res.record, "to_json") else vars(res.record)
        rec = {k: v for k, v in rec.items() if k != "time_s"}
        out.append(json.loads(json.dumps(rec, default=str)))
    return out


CASES = {
    "uplink_latencies": ({"leo": {"contacts": "ideal"}}, {"uplink": UPLINK}, {}),
    "driver_failures": (
        {"leo": {"contacts": "ideal"}, "p_driver_fail": 0.5, "driver_deadline_s": 0.0},
        {"uplink": UPLINK},
        {},
    ),
    "batched_step": ({"leo": {"contacts": "ideal"}}, {}, {"batch_clients": "auto"}),
    # lr 1e-45: every step rounds back to w in float32, so every Δw is exactly zero
    "zero_updates": ({"leo": {"contacts": "ideal"}}, {}, {"lr": 1e-45}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_arrivals_per_instant_equal_one_event_per_upload(tmp_path: Path, name: str) -> None:
    hier, method, fed = CASES[name]
    raw = agri_raw(hier, rounds=3, **method)
    if "lr" in fed:
        raw["train"]["lr"] = fed["lr"]
    elif fed:
        raw["federation"].update(fed)
    cfg = config(tmp_path, raw)
    grouped, single = make_run(cfg, tmp_path / "a"), make_run(cfg, tmp_path / "b")
    _one_by_one(single.scheduler.queue)  # type: ignore[attr-defined]
    pushed: list[int] = []
    push = grouped.scheduler.queue.push  # type: ignore[attr-defined]

    def count(time_s: float, event: Any) -> None:
        if isinstance(event, TractorArrivals):
            pushed.append(len(event.updates))
        push(time_s, event)

    grouped.scheduler.queue.push = count  # type: ignore[attr-defined]
    assert _rounds(grouped, 3) == _rounds(single, 3)
    assert pushed  # over the uplink each upload has its own latency: one per instant
    if "uplink" not in method:
        assert max(pushed) > 1  # without it, a round's uploads land together


def test_a_single_tractor_cohort_equals_the_reference(tmp_path: Path) -> None:
    raw = agri_raw({"leo": {"contacts": "ideal"}}, rounds=2, uplink=UPLINK)
    raw["federation"].update({"participation": 1 / 12})
    cfg = config(tmp_path, raw)
    grouped, single = make_run(cfg, tmp_path / "a"), make_run(cfg, tmp_path / "b")
    _one_by_one(single.scheduler.queue)  # type: ignore[attr-defined]
    assert _rounds(grouped, 2) == _rounds(single, 2)


def test_an_ideal_network_derives_no_generator_and_nan_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = NETWORK_MODELS.build("ideal", NoParams())
    assert isinstance(net, IdealNetwork) and net.always_delivers
    run = make_run(config(tmp_path, agri_raw(None, rounds=1)), tmp_path / "flat")
    sched = run.scheduler

    def no_generator(*keys: Any) -> Any:
        raise AssertionError(f"a generator was derived for an ideal network: {keys}")

    monkeypatch.setattr("geofl.engine.scheduler.numpy_generator", no_generator)
    dim = sched.dim  # type: ignore[attr-defined]
    meta = UpdateMeta(client_id=3, num_samples=4, round=1)
    good = ClientUpdate(torch.zeros(dim), meta)  # a zero update is a valid one
    assert sched._admit(good, 3, 1) is None  # type: ignore[attr-defined]
    bad = ClientUpdate(torch.full((dim,), float("nan")), meta)
    refused = sched._admit(bad, 3, 1)  # type: ignore[attr-defined]
    assert refused is not None and refused.reason is RejectionReason.MALFORMED
    assert "non-finite" in (refused.detail or "")


def test_collections_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with collections_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collections_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with collections_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()
