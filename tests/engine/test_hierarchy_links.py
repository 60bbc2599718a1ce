"""The space hops on the wire (003 §2.2.8, Table 4): a driver's encoded update by hand (top-k
+ 4-bit, tagged frame, envelope), error feedback kept per cluster, the envelope round trip,
tampered and replayed space-hop envelopes refused with a logged reason, energy by hand, and
a run whose space hops are all tampered goes on without them."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.config.load import load_config
from geofl.engine.hierarchy.events import SpacePacket, TierModel
from geofl.engine.hierarchy.links import SpaceLinks, driver_compresses, pack_meta
from geofl.network.spacelink import SpaceLinkParams
from geofl.records import RoundStatus

D = 1000
UPLINK = {"network": {"p_fail": 0.0}, "checkpoint": {"tau_cos": 0.0}}


def _model(values: torch.Tensor, rounds: int = 3) -> TierModel:
    return TierModel(
        model=values,
        delta=torch.zeros(0),
        produced_round=rounds,
        num_samples=10,
        clients=(0, 1),
        farms=frozenset({0}),
        bins=(0, 0),
        attempts=2,
        nqi_lost=0,
        clusters=(0,),
        created_s=5.0,
        tractor_weights=(0.5, 0.5),
        client_rounds=(rounds, rounds),
        client_created=(5.0, 5.0),
    )


def _links(**cfg: object) -> SpaceLinks:
    params = SpaceLinkParams.model_validate(cfg)
    compress = params.compress is not False
    return SpaceLinks(params, compress=compress, dim=D, n_tractors=4, n_leo=2, seed=3)


def _update() -> torch.Tensor:
    """Every 10th entry large (1.0 … 2.0), the rest 0.001: top-10 % keeps exactly those."""
    u = torch.full((D,), 0.001)
    u[::10] = torch.linspace(1.0, 2.0, 100)
    return u


def test_a_driver_update_encoded_by_hand() -> None:
    links, base = _links(), torch.full((D,), 0.5)
    p = links.driver_send(0, 2, _model(base + _update()), base, 4, sat=1, now_s=600.0)
    # sparse header 20 + varint indices 100 (gap 0, then 99 gaps of 9: one byte each)
    # + one quantisation chunk lo, scale 8 + 100 4-bit codes 50 = 178 B payload,
    # + 32 B frame tag + 40 B envelope (24 header/nonce + 16 Poly1305 tag) = 250 B, after
    # the sealed bookkeeping: 40 B head + 2 tractors × 28 + 1 farm × 4 + 1 cluster × 4
    # = 104 B + 40 B envelope = 144 B
    assert [len(w) for w in p.wires] == [144, 250] and p.nbytes == 394
    assert (p.sender, p.receiver, p.base_version) == (2, 2**31 + 1, 4)
    assert p.meta.model.numel() == 0  # the tensors do not travel beside the payload
    # E = P·8·bytes/rate = 2 W · 3152 bit / 1 Mbps
    assert (p.airtime_s, p.energy) == pytest.approx((0.003152, 0.006304))
    got = links.leo_receive(p, base)
    assert got is not None and got.produced_round == 3  # t' from the frame's staleness tag
    kept = torch.zeros(D, dtype=torch.bool)
    kept[::10] = True
    u_hat = got.model - base
    assert torch.equal(got.delta[~kept], torch.zeros(900))
    assert (got.delta[kept] - _update()[kept]).abs().max() <= (1.0 / 15) / 2 + 1e-6  # scale/2
    assert torch.allclose(u_hat, got.delta, atol=1e-6)
    # error feedback: the driver keeps u − û for its cluster and adds it next time
    u = (base + _update()) - base  # what the driver encodes: w̄_c − w^{v_c}
    assert torch.equal(links.residual[0], u - got.delta)


def test_raw_driver_update_and_frames_by_hand() -> None:
    links, base = _links(compress=False, frame_bytes=1000), torch.zeros(D)
    p = links.driver_send(0, 2, _model(_update()), base, 0, sat=0, now_s=0.0)
    # raw payload 8 + 4·1000 = 4008 B in 5 frames (4 × 1000 + 8), each + 32 tag + 40 envelope,
    # after the sealed bookkeeping (104 B + 40 envelope)
    assert p.nbytes == 4008 + 5 * (32 + 40) + 104 + 40
    got = links.leo_receive(p, base)
    assert got is not None and torch.equal(got.model, _update()) and not links.residual


def test_compression_follows_the_tractors_unless_set() -> None:
    t14 = {m.name: m for m in load_config("paper003-table14-hier").methods}
    for name, want in (("full", True), ("no-compression", False), ("no-fairness", True)):
        m = t14[name]
        assert m.hierarchy is not None
        assert driver_compresses(m.hierarchy.links, m.uplink) is want, name
    no_nqi = {m.name: m for m in load_config("paper003-hierarchical").methods}["hier-no-nqi"]
    assert no_nqi.hierarchy is not None  # periodic float32 uploads: the driver sends raw too
    assert driver_compresses(no_nqi.hierarchy.links, no_nqi.uplink) is False
    assert driver_compresses(SpaceLinkParams(compress=False), None) is False
    assert driver_compresses(SpaceLinkParams(), None) is True


def test_envelope_round_trip_and_tampered_or_replayed_space_hops_are_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    links, base = _links(), torch.zeros(D)
    regional = replace(_model(_update()), delta=_update())
    p = links.leo_send(1, regional)
    assert p.nbytes == 104 + 40 + 8 + 4 * D + 40  # bookkeeping, raw regional model, sealed
    got = links.geo_receive(p)
    assert got is not None and torch.equal(got.model, regional.model)  # bit-exact
    # the same envelope again: a replay, refused before decryption
    with caplog.at_level(logging.WARNING, logger="geofl"):
        assert links.geo_receive(p) is None
        d = links.driver_send(0, 2, _model(_update()), base, 0, sat=0, now_s=0.0)
        bad = bytearray(d.wires[0])
        bad[100] ^= 0x04  # one bit of the ciphertext
        assert links.leo_receive(replace(d, wires=(bytes(bad),)), base) is None
        assert links.leo_receive(d, base) is not None  # the genuine one still opens
    assert links.take_rejections() == {"driver_leo": {"auth_failed": 1}, "leo_geo": {"replayed": 1}}
    assert links.take_rejections() == {}
    assert "driver_leo envelope from 2 to 2147483648 refused (auth_failed)" in caplog.text
    # another hop's key does not open it: a driver → LEO 0 envelope shown to LEO 1
    other = links.driver_send(0, 2, _model(_update()), base, 0, sat=0, now_s=0.0)
    assert links.leo_receive(replace(other, receiver=2**31 + 1), base) is None
    assert links.take_rejections() == {"driver_leo": {"auth_failed": 1}}


def test_the_downlink_is_sealed_end_to_end_for_the_driver() -> None:
    links, params = _links(), _update()
    assert links.downlink(3, params) and links.downlink(3, params)  # fresh counters
    assert links.sealers[(2**32 - 2, 3)].counter == 2
    tampered = _links(security={"tamper_prob": 1.0})
    assert not tampered.downlink(3, params)
    assert list(tampered.take_rejections()) == ["geo_driver"]
    assert _links(security={"enabled": False, "tamper_prob": 1.0}).downlink(3, params)


def test_a_run_with_every_space_hop_tampered_goes_on_without_them(tmp_path: Path) -> None:
    hier = {"mode": "sync", "links": {"security": {"tamper_prob": 1.0}}}
    run = make_run(config(tmp_path, agri_raw(hier, rounds=2, uplink=UPLINK)), tmp_path / "t")
    params = run.init_params
    for r in (1, 2):
        out = run.scheduler.round(params, r)
        run.comps.store.commit()
        h = out.record.hierarchy
        assert h is not None and out.record.status is RoundStatus.NO_UPDATES
        assert torch.equal(out.params, params)  # nothing reached the GEO
        sent = h["sent"]["driver_leo"]
        assert sent > 0 and h["delivered"].get("driver_leo", 0) == 0
        refused = h["envelope_rejections"]
        assert list(refused) == ["driver_leo"]  # a flipped header bit: bad_header etc.
        assert sum(refused["driver_leo"].values()) == sent
        assert h["bytes_by_hop"]["driver_leo"] > 0 and "leo_geo" not in h["bytes_by_hop"]


def _keep(sent: dict[str, list[SpacePacket]], p: SpacePacket) -> SpacePacket:
    sent[p.hop].append(p)
    return p


def test_space_hop_bytes_and_energy_in_the_round_record(tmp_path: Path) -> None:
    """Raw driver uploads by hand: every driver → LEO packet is its sealed bookkeeping, then
    8 + 4D B of payload in one tagged frame and one envelope; every LEO → GEO packet its
    bookkeeping and 8 + 4D B, each sealed; energies by hand."""
    hier = {"mode": "sync", "links": {"compress": False}}
    run = make_run(config(tmp_path, agri_raw(hier, rounds=1, uplink=UPLINK)), tmp_path / "r")
    dim = run.workspace.spec.numel
    links = run.scheduler.links  # type: ignore[union-attr]
    sent: dict[str, list[SpacePacket]] = {"driver_leo": [], "leo_geo": []}
    for name in ("driver_send", "leo_send"):
        send = getattr(links, name)
        setattr(links, name, lambda *a, _s=send, **k: _keep(sent, _s(*a, **k)))
    h = run.scheduler.round(run.init_params, 1).record.hierarchy
    assert h is not None
    n_d, n_l = h["sent"]["driver_leo"], h["sent"]["leo_geo"]
    assert (len(sent["driver_leo"]), len(sent["leo_geo"])) == (n_d, n_l)
    meta = {hop: sum(len(pack_meta(p.meta)) + 40 for p in ps) for hop, ps in sent.items()}
    assert h["bytes_by_hop"]["driver_leo"] == n_d * (8 + 4 * dim + 32 + 40) + meta["driver_leo"]
    assert h["bytes_by_hop"]["leo_geo"] == n_l * (8 + 4 * dim + 40) + meta["leo_geo"]
    e = h["energy_by_hop"]
    assert e["driver_leo"] == pytest.approx(2.0 * 8 * h["bytes_by_hop"]["driver_leo"] / 1e6)
    assert e["leo_geo"] == pytest.approx(5.0 * 8 * h["bytes_by_hop"]["leo_geo"] / 1e6)
    assert e["tractor_driver"] > 0.0  # the ground uplink's own proxy, next to them
    assert h["bytes_by_hop"]["geo_leo"] == n_l * (8 + 4 * dim + 40)


def test_replayed_space_hop_envelopes_are_refused_and_change_nothing(tmp_path: Path) -> None:
    """The adversary replays each sender's previous envelope before every transmission:
    every replay is refused (none accepted) and the model is the clean run's, bit for bit."""
    out = []
    for name, adversary in (("clean", {}), ("replay", {"replay_prob": 1.0})):
        hier = {"mode": "sync", "links": {"security": adversary}}
        run = make_run(
            config(tmp_path, agri_raw(hier, rounds=2, uplink=UPLINK), name), tmp_path / name
        )
        params, refused = run.init_params, {}
        for r in (1, 2):
            res = run.scheduler.round(params, r)
            run.comps.store.commit()
            params = res.params
            assert res.record.hierarchy is not None
            refused = res.record.hierarchy["envelope_rejections"]
        out.append((params, refused, run.scheduler.links.replays_accepted))  # type: ignore[union-attr]
    (clean, none, _), (replayed, refused, accepted) = out
    assert torch.equal(clean, replayed) and none == {} and accepted == 0
    # round 2: every hop that already carried an envelope in round 1 sees one replay
    assert refused and all(set(r) == {"replayed"} for r in refused.values())
