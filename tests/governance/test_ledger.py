"""The embedded ledger's persistence: replay on reopen, tamper detection, crash recovery."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from geofl.errors import LedgerError, LedgerIntegrityError
from geofl.governance.ledger import (
    CommitteeElected,
    EmbeddedLedger,
    PermissionChanged,
    Role,
    hash_json,
)
from geofl.governance.ledger.store import HEAD, LOG, META
from geofl.governance.permissions import PermissionLevel

WATCHLIST = PermissionLevel.WATCHLIST


def scenario(ledger: EmbeddedLedger) -> None:
    """Roles, a rule, two rounds of commitments and committees, one permission change."""
    for node in ("c1", "c2", "c3"):
        ledger.grant_role(node, Role.TRAINING | Role.VALIDATION)
    ledger.commit_rule(hash_json({"rule": "A"}), "rule_A_seed1")
    for r in (1, 2):
        ledger.commit_aggregation(r, hash_json(["m", r]), hash_json(["u", r]))
        ledger.record_committee(r, r, ["c1", "c2"], hash_json(["draw", r]))
    pid, _ = ledger.propose_permission("c3", PermissionLevel.ACTIVE, WATCHLIST, "two failures", 2)
    ledger.approve(pid, "c1")
    ledger.approve(pid, "c2")


@pytest.fixture(scope="module")
def small_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stored ledger of five transactions (deploy, grant, funding, rule, aggregation)."""
    path = tmp_path_factory.mktemp("small") / "ledger"
    ledger = EmbeddedLedger.create(path, seed=7)
    ledger.grant_role("c1", Role.VALIDATION)
    ledger.fund("c1")  # a plain value transfer
    ledger.commit_rule(hash_json({"rule": 1}), "r1")
    ledger.commit_aggregation(1, hash_json("m"), hash_json("u"))
    ledger.close()
    return path


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ledger"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def flip(path: Path, offset: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def test_a_reopened_ledger_sees_every_record(tmp_path: Path):
    path = tmp_path / "ledger"
    ledger = EmbeddedLedger.create(path, seed=1)
    scenario(ledger)
    events = ledger.events()
    head = ledger.block_number()
    ledger.close()

    again = EmbeddedLedger.open(path, seed=1)
    assert again.block_number() == head
    assert again.events() == events
    assert again.permission("c3") == WATCHLIST
    assert again.committee(2).members == ("c1", "c2")
    assert again.rule().label == "rule_A_seed1"
    assert [again.aggregation(r).model_hash for r in (1, 2)] == [  # type: ignore[union-attr]
        hash_json(["m", 1]),
        hash_json(["m", 2]),
    ]
    assert [e.members for e in again.events(CommitteeElected)] == [("c1", "c2")] * 2
    assert again.event_blocks()["PermissionChanged"] == [events[-1].block_number]
    # It keeps writing where the first process stopped, and a third process sees that too.
    again.commit_aggregation(3, hash_json(["m", 3]), hash_json(["u", 3]))
    again.close()
    third = EmbeddedLedger.open(path)
    assert third.aggregation(3) is not None and len(third.events()) == len(events) + 1
    assert EmbeddedLedger.verify(path) == third.store.count  # type: ignore[union-attr]
    third.close()


def test_replay_is_deterministic(tmp_path: Path):
    a = EmbeddedLedger.create(tmp_path / "a", seed=3)
    b = EmbeddedLedger.create(tmp_path / "b", seed=3)
    for ledger in (a, b):
        scenario(ledger)
        ledger.close()
    assert (tmp_path / "a" / LOG).read_bytes() == (tmp_path / "b" / LOG).read_bytes()
    assert (tmp_path / "a" / HEAD).read_bytes() == (tmp_path / "b" / HEAD).read_bytes()


def test_events_never_scan_the_chain_with_get_logs(tmp_path: Path):
    ledger = EmbeddedLedger.create(None, seed=1)
    scenario(ledger)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("get_logs over the chain is quadratic on py-evm")

    ledger.w3.eth.get_logs = forbidden  # type: ignore[method-assign]
    (change,) = ledger.events(PermissionChanged)
    assert change.node == "c3" and ledger.path is None


@pytest.mark.parametrize("name", [META, HEAD])
def test_a_flipped_byte_in_meta_or_head_is_detected(small_ledger: Path, tmp_path: Path, name: str):
    size = (small_ledger / name).stat().st_size
    for offset in [*sorted(random.Random(name).sample(range(size), 6)), size - 1]:
        path = copy(small_ledger, tmp_path / f"{offset}")
        flip(path / name, offset)
        with pytest.raises(LedgerIntegrityError, match=name) as info:
            EmbeddedLedger.open(path)
        assert info.value.record == -1, (offset, str(info.value))


def test_a_flipped_byte_in_any_transaction_is_detected_and_named(
    small_ledger: Path, tmp_path: Path
):
    lines = (small_ledger / LOG).read_bytes().split(b"\n")[:-1]
    assert len(lines) == 5  # deploy, grant, funding transfer to c1, rule, aggregation
    start = 0
    cases = []
    rng = random.Random(0)
    for index, line in enumerate(lines):
        # the first byte, a byte of the raw transaction, one of the stored receipt, the
        # record's last byte and its newline; plus random ones
        raw_at = line.index(b'"raw":"0x') + 20
        hash_at = line.index(b'"block_hash":"0x') + 30
        picks = {0, raw_at, hash_at, len(line) - 1, len(line), *rng.sample(range(len(line)), 3)}
        cases += [(index, start + p) for p in sorted(picks)]
        start += len(line) + 1
    for index, offset in cases:
        path = copy(small_ledger, tmp_path / f"{offset}")
        flip(path / LOG, offset)
        with pytest.raises(LedgerIntegrityError) as info:
            EmbeddedLedger.open(path)
        err = info.value
        assert LOG in err.file and err.record == index, (offset, str(err))
        assert f"record {index}" in str(err)


def test_a_changed_hex_case_is_an_edit_too(small_ledger: Path, tmp_path: Path):
    path = copy(small_ledger, tmp_path)
    text = (path / LOG).read_text()
    at = text.index('"raw":"0x') + 9  # the same bytes whatever the case of the digits
    at = next(i for i in range(at, at + 64) if text[i] in "abcdef")
    (path / LOG).write_text(text[:at] + text[at].upper() + text[at + 1 :])
    with pytest.raises(LedgerIntegrityError, match="record 0: raw is not lowercase hex"):
        EmbeddedLedger.open(path)


def test_a_truncated_log_is_detected(small_ledger: Path, tmp_path: Path):
    path = copy(small_ledger, tmp_path)
    lines = (path / LOG).read_bytes().split(b"\n")
    (path / LOG).write_bytes(b"\n".join(lines[:-3]) + b"\n")  # drop the last two records
    with pytest.raises(LedgerIntegrityError, match=r"head\.json: counts 5 transactions"):
        EmbeddedLedger.open(path)


def test_an_interrupted_append_is_repaired_on_open(small_ledger: Path, tmp_path: Path):
    torn = copy(small_ledger, tmp_path / "torn")
    log = (torn / LOG).read_bytes()
    (torn / LOG).write_bytes(log + log.split(b"\n")[-2][:40])  # a half-written next record
    ledger = EmbeddedLedger.open(torn)
    assert (torn / LOG).read_bytes() == log
    ledger.commit_aggregation(2, hash_json("m2"), hash_json("u2"))
    ledger.close()
    assert EmbeddedLedger.verify(torn) == 6

    behind = copy(small_ledger, tmp_path / "behind")
    ledger = EmbeddedLedger.open(behind)
    old_head = (behind / HEAD).read_bytes()
    ledger.commit_aggregation(2, hash_json("m2"), hash_json("u2"))
    ledger.close()
    (behind / HEAD).write_bytes(old_head)  # crash before the head moved
    assert EmbeddedLedger.verify(behind) == 6
    EmbeddedLedger.open(behind).close()  # repairs the head
    assert (behind / HEAD).read_bytes() != old_head


def test_writers_are_exclusive_and_read_only_opens_refuse_writes(
    small_ledger: Path, tmp_path: Path
):
    path = copy(small_ledger, tmp_path)
    writer = EmbeddedLedger.open(path)
    with pytest.raises(LedgerError, match="open for writing in another process"):
        EmbeddedLedger.open(path)
    reader = EmbeddedLedger.open(path, read_only=True)
    with pytest.raises(LedgerError, match="read-only"):
        reader.commit_rule(hash_json(2), "r2")
    writer.close()
    EmbeddedLedger.open(path).close()
    with pytest.raises(LedgerError, match="already holds a ledger"):
        EmbeddedLedger.create(path, seed=7)
    with pytest.raises(LedgerError, match="created with seed 7, not 8"):
        EmbeddedLedger.open(path, seed=8)
