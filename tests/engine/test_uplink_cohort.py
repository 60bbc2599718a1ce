"""The cohort uplink (issue 36): :meth:`Uplink.transmit_cohort` against the per-client
reference :meth:`Uplink.transmit`, round after round, on adversarial updates.

Two uplinks built alike see the same link states; one carries each round's updates one
client at a time, the other as one cohort. Everything must agree bit for bit — the
transmissions (status, pipeline, route, bytes, timings, decoded values), every tractor's
buffer, error-feedback residual, checkpointer reference and s_dot, the envelopes' counters
and the last sealed bytes of every hop — because the cohort path runs the same
element-wise float32 operations on rows of a batch (no reduction reorders: chunk min/max
are exact; top-k keeps the per-client partition order at ties; the checkpointer's row
reductions are the same per-row kernel, and rows of ≥ 32,768 values go one at a time). So
the tolerance is zero, ±0 included (compared as bits).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from geofl.config.load import load_config
from geofl.config.uplink import UplinkConfig
from geofl.engine.experiment import _plan, load_dataset, prepare_split
from geofl.engine.run import FederatedRun
from geofl.engine.uplink.ground import Transmission, TransmitStatus, Uplink
from geofl.network.payload import decode_payload, encode_sparse, encode_sparse_rows
from geofl.network.rural import LinkStates
from geofl.network.sparse import topk_indices, topk_rows
from geofl.security.envelope import derive_epoch_key, open_sealed

# float32's extremes overflow the quantiser on purpose (the payload is then refused)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

D = 40  # k = ⌈0.1 · 40⌉ = 4 kept by the compressed pipeline
F32_MAX = float(np.finfo(np.float32).max)
# Global normalisation: NQI = 0.35·S̃ + 0.45·B̃ − 0.20·L̃ over S [-112, -75], B [0.2, 60],
# L [20, 500]: one link per pipeline band and one below τ_NQI = 0.35.
FALLBACK = [-75.0, 60.0, 20.0]  # 0.80
CHUNKED = [-75.0, 30.1, 20.0]  # 0.575
COMPRESSED = [-75.0, 12.16, 20.0]  # 0.44
BAD = [-112.0, 0.2, 500.0]  # −0.2: skipped
BANDS = [FALLBACK, CHUNKED, COMPRESSED, BAD]


def _uplink(k: int, **over: Any) -> Uplink:
    raw: dict[str, Any] = {
        "nqi": {"normalisation": "global"},
        "network": {"deadline_s": 1e6, "max_retries": 2},
        "checkpoint": {"tau_cos": 0.05},
        "neighbour_group": 2,
    }
    for key, value in over.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return Uplink(UplinkConfig.model_validate(raw), num_clients=k, seed=3)


def _adversarial(k: int, d: int, round_idx: int) -> torch.Tensor:
    """``[k, d]`` rows that stress each step: ties at the top-k boundary, zeros, ±0,
    float32's extremes, subnormals, a repeated row (the checkpointer holds it)."""
    g = torch.Generator().manual_seed(100 + round_idx)
    rows = torch.randn(k, d, generator=g)
    specials = [
        torch.zeros(d),  # a zero update
        torch.where(torch.arange(d) % 2 == 0, 0.0, -0.0),  # ±0 only
        torch.full((d,), 5.0) * torch.where(torch.arange(d) % 3 == 0, -1.0, 1.0),  # all tied
        torch.cat([torch.full((3,), 9.0), torch.full((d - 3,), 2.0)]),  # 3 above, ties at k
        torch.linspace(-F32_MAX, F32_MAX, d),  # float32's extremes (the 8-bit range overflows)
        torch.full((d,), 1e-45) * torch.arange(d).remainder(4),  # subnormal ties
        torch.ones(d) * 1e-38,  # tiny, all tied
        torch.full((d,), 1.0),  # the same every round: the checkpointer holds it
    ]
    chosen = specials[: k - 2] if k > 2 else [specials[(round_idx + 2) % len(specials)]]
    for i, special in enumerate(chosen[:k]):
        rows[i] = special
    return rows


def _links(k: int, round_idx: int) -> LinkStates:
    """Bands rotating by round; single outages (forwarded) and one whole group down."""
    values = [BANDS[(c + round_idx) % len(BANDS)] for c in range(k)]
    group_down = (round_idx + 1) % max(1, k // 2)
    outage = [(c + round_idx) % 5 == 0 or c // 2 == group_down for c in range(k)]
    return LinkStates(np.array(values), np.array(outage))


def _bits(t: torch.Tensor | None) -> list[int] | None:
    return None if t is None else t.contiguous().view(torch.int32).tolist()


def _tx_fields(tx: Transmission) -> tuple[Any, ...]:
    fields = {**vars(tx), "values": _bits(tx.values)}
    return tuple(sorted(fields.items()))


def _state(up: Uplink) -> list[Any]:
    tractors = [
        (
            _bits(t.residual),
            _bits(t.last_sent),
            _bits(t.pending),
            t.pending_age,
            float(t.dot_prev).hex(),
        )
        for t in up.tractors
    ]
    counters = sorted((key, s.counter, s.epoch) for key, s in up.sealers.items())
    return [
        tractors,
        counters,
        sorted(up.last_wire.items()),
        dict(up.envelope_rejections),
        up.replays_accepted,
    ]


def _compare(
    k: int, rounds: int, d: int = D, as_rows: bool = False, **over: Any
) -> list[list[Transmission]]:
    """Run both paths ``rounds`` rounds; assert every round agrees; the cohort's txs.
    ``as_rows``: the cohort gets a list of ``[D]`` rows instead of one ``[K, D]`` batch."""
    ref, coh = _uplink(k, **over), _uplink(k, **over)
    seen = []
    for r in range(1, rounds + 1):
        links = _links(k, r)
        ref.begin_round(r, links)
        coh.begin_round(r, copy.deepcopy(links))
        deltas = _adversarial(k, d, r)
        clients = list(range(k))[::-1]  # cohort order is not id order
        want = [ref.transmit(deltas[i].clone(), c) for i, c in enumerate(clients)]
        cohort = list(deltas.clone()) if as_rows else deltas.clone()
        got = coh.transmit_cohort(cohort, clients)
        assert [_tx_fields(t) for t in got] == [_tx_fields(t) for t in want], f"round {r}"
        assert _state(coh) == _state(ref), f"round {r}"
        seen.append(got)
    return seen


def test_cohort_equals_per_client_over_three_rounds_of_adversarial_updates() -> None:
    txs = _compare(12, 3)
    statuses = {tx.status for round_txs in txs for tx in round_txs}
    pipes = {tx.pipeline for round_txs in txs for tx in round_txs if tx.pipeline}
    # the cases the comparison must have covered: every pipeline, skips below τ_NQI,
    # checkpointer holds, outages, forwarding, a payload refused (float32 overflow)
    assert {TransmitStatus.DELIVERED, TransmitStatus.SKIPPED, TransmitStatus.HELD} <= statuses
    assert TransmitStatus.REJECTED in statuses and TransmitStatus.OUTAGE in statuses
    assert {"compressed", "chunked", "fallback"} <= {p.value for p in pipes}
    assert any(tx.via is not None for round_txs in txs for tx in round_txs)
    assert any(tx.buffered_rounds for round_txs in txs for tx in round_txs)  # coalesced


@pytest.mark.parametrize(
    "over",
    [
        {"fixed_pipeline": "paq", "pipelines": {"error_feedback": False}},
        {"compress": False},
        {"pipelines": {"frame_values": 16}},  # 3 frames a row, the last one short
        {"security": {"tamper_prob": 0.3, "replay_prob": 0.3}},
        {"network": {"deadline_s": 0.5}},  # 3G frames past ℓ_max
        {"aircomp": {}},
        {"pipelines": {"error_feedback": False}},
        {"checkpoint": {"tau_cos": 0.5, "tau_dot": 1.0}},
        {"fixed_pipeline": "compressed", "pipelines": {"k_frac": 0.5}},  # bitmap indices
        {"security": {"enabled": False}},
    ],
    ids=lambda o: "-".join(o),
)
def test_cohort_equals_per_client_in_every_mode(over: dict[str, Any]) -> None:
    _compare(10, 3, **over)


def test_single_client_cohort_and_long_rows() -> None:
    """K = 1, and rows long enough (≥ 32,768) that the checkpointer reduces them one at a
    time; residuals carried three rounds."""
    _compare(1, 3)
    _compare(3, 3, d=33_000, checkpoint={"tau_cos": 2.0})  # the checkpointer holds all


def test_a_list_of_rows_in_small_slices_equals_per_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler passes its clients' Δw as a list, stacked one slice at a time (a
    cohort of large models is never copied whole): slices of 3 rows change nothing."""
    monkeypatch.setattr("geofl.engine.uplink.ground._SLICE_VALUES", 3 * D)
    _compare(12, 3, as_rows=True)


def test_cohort_sealed_bytes_decrypt_to_the_reference_payloads() -> None:
    """Every hop's last envelope is the same bytes on both paths, and opens (under the
    hop's epoch key) to a payload that decodes to the delivered values."""
    k = 6
    ref, coh = _uplink(k, fixed_pipeline="compressed"), _uplink(k, fixed_pipeline="compressed")
    links = LinkStates(np.array([FALLBACK] * k), np.zeros(k, bool))
    ref.begin_round(1, links)
    coh.begin_round(1, links)
    deltas = _adversarial(k, D, 1)
    want = [ref.transmit(deltas[c].clone(), c) for c in range(k)]
    got = coh.transmit_cohort(deltas.clone(), list(range(k)))
    assert coh.last_wire == ref.last_wire and len(coh.last_wire) == k
    for (sender, receiver), wire in coh.last_wire.items():
        key = derive_epoch_key(coh.secrets[sender], sender, receiver, 0)
        payload = open_sealed(key, wire)
        assert payload is not None
        tx = got[sender]
        if tx.status is TransmitStatus.DELIVERED:
            assert tx.values is not None and want[sender].values is not None
            assert _bits(decode_payload(payload, D)) == _bits(tx.values)


@pytest.mark.parametrize("d", [8, 40, 1000, 15_105])
def test_topk_rows_keep_the_per_client_tie_rule(d: int) -> None:
    """The tie rule both paths share is :func:`topk_indices`' partition order: on rows
    full of ties at the k-th magnitude (values from a handful of levels, ±0 among them)
    every row of the cohort keeps exactly the set the row alone keeps, and that set is a
    top-k (nothing dropped is larger than anything kept)."""
    rng = np.random.default_rng(d)
    levels = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-45, F32_MAX], np.float32)
    rows = levels[rng.integers(0, levels.size, size=(16, d))]
    k = max(1, d // 10)
    got = topk_rows(np.abs(rows), k)
    for i in range(rows.shape[0]):
        one = topk_indices(torch.from_numpy(rows[i].copy()), k)
        assert got[i].tolist() == one.tolist()
        dropped = np.delete(np.abs(rows[i]), one)
        assert dropped.size == 0 or dropped.max() <= np.abs(rows[i][one]).min()


def test_sparse_rows_equal_sparse_per_row() -> None:
    deltas = _adversarial(10, 1000, 1)
    payloads, recon = encode_sparse_rows(deltas, 0.1, 4, 7)
    for i in range(10):
        one, one_recon = encode_sparse(deltas[i], 0.1, 4, 7)
        assert payloads[i] == one and _bits(recon[i]) == _bits(one_recon)


def test_cohort_refuses_a_malformed_call() -> None:
    up = _uplink(3)
    up.begin_round(1, _links(3, 1))
    with pytest.raises(ValueError, match="pass each one once"):
        up.transmit_cohort(torch.zeros(2, D), [1, 1])
    with pytest.raises(ValueError, match=r"pass \[K, D\]"):
        up.transmit_cohort(torch.zeros(2, D), [0, 1, 2])
    with pytest.raises(ValueError, match=r"pass \[K, D\]"):
        up.transmit_cohort([torch.zeros(D), torch.zeros(D + 1)], [0, 1])


def _rounds(
    tmp: Path, raw: dict[str, Any], cohort: bool, rounds: int
) -> tuple[list[dict[str, Any]], int]:
    """Round records of ``raw``'s first method with the uplink as one cohort or per client
    (``SyncScheduler.cohort_uplink``), wall-clock times dropped; and how many calls the
    per-client ``Uplink.transmit`` got."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    ds = load_dataset(cfg)
    splits, parts = _plan(cfg, ds)
    seed, method = cfg.seeds[0], cfg.methods[0]
    data = prepare_split(ds, cfg, seed, splits[seed])
    out = tmp / ("cohort" if cohort else "per-client")
    run = FederatedRun(cfg, method, seed, data, parts[seed][method.name], out)
    sync = getattr(run.scheduler, "sync", run.scheduler)
    sync.cohort_uplink = cohort
    uplink, calls = run.comps.uplink, [0]
    assert uplink is not None
    one = uplink.transmit

    def counted(delta: torch.Tensor, client: int) -> Transmission:
        calls[0] += 1
        return one(delta, client)

    uplink.transmit = counted  # type: ignore[method-assign]
    params, records = run.init_params, []
    for r in range(1, rounds + 1):
        got = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = got.params
        records.append({k: v for k, v in got.record.to_json().items() if k != "time_s"})
    return records, calls[0]


@pytest.mark.parametrize("hierarchy", [False, True], ids=["flat", "hierarchy"])
def test_scheduler_rounds_equal_with_the_cohort_uplink(tmp_path: Path, hierarchy: bool) -> None:
    """The call site: ``SyncScheduler.collect`` sending a round's uploads as one cohort
    gives the round records of one ``transmit`` per client — flat and in the hierarchy
    (tractor → driver, χ header), with tampering, replays and losses on the links."""
    method: dict[str, Any] = {
        "name": "m",
        "partition": {"name": "group", "key": "tractor"},
        "uplink": {
            "network": {"p_fail": 0.25},
            "security": {"tamper_prob": 0.2, "replay_prob": 0.3},
        },
    }
    if hierarchy:
        method["hierarchy"] = {"round_s": 3600.0, "driver_deadline_s": 600.0}
    raw = {
        "name": "cohort-uplink",
        "seeds": [1],
        "task": {"name": "binary"},
        "data": {
            "dataset": "synthetic_agri",
            "params": {"task": "stress", "seed": 0, "num_tractors": 40, "num_blocks": 80},
            "bands": "all",
            "split": {"val": 0.1, "test": 0.1},
        },
        "model": {"name": "mlp", "params": {"hidden": [4]}},
        "train": {"optimizer": "sgd", "lr": 0.05, "batch_size": 8, "local_steps": 2},
        "federation": {"num_clients": 40, "rounds": 3},
        "methods": [method],
    }
    want, per_client = _rounds(tmp_path / "a", raw, False, 3)
    got, none = _rounds(tmp_path / "b", raw, True, 3)
    assert got == want
    assert per_client > 0 and none == 0  # the cohort path never falls back per client
    assert sum(r["uplink"]["status"].get("delivered", 0) for r in got) > 0
