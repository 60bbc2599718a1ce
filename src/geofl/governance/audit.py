"""Audit of a governed run directory against its chain (000 §3.5.1 audit node, §4.7).

Everything here reads. The stored ledger is replayed read-only (which already checks every
block and transaction hash); the chain's events are then the reference every file of the
run directory is compared with:

* ``rounds.jsonl``: every round committed on chain has exactly one record, in the chain's
  order, and every record a commitment; model and update-set hashes match it.
* ``governance.jsonl``: the rule entry, and per round the aggregation commitment, the
  committee election and the permission proposals (their approvers and whether they took
  effect) match the chain's events, transaction hashes included; every event on chain has
  its entry and every entry its event; the permission levels each round reports are the
  ones the chain's permission changes produce.
* ``governance.rule.json`` and ``config.yaml`` match the committed rule.
* ``checkpoint.pt`` exists and holds the model committed for the last round;
  ``best.pt`` exists and holds the model committed for the best-validation round
  (``final.json``); a file holding another round's committed model is reported as swapped
  or stale.

A difference is a :class:`Finding` naming the file (and line) and, where it concerns one,
the round. A file that exists but cannot be read at all (permissions, a directory in its
place) raises :class:`~geofl.errors.RunDirError` instead: that is no evidence either way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from geofl.errors import GovernanceError, LedgerError, RunDirError
from geofl.governance.ledger import (
    AggregationCommitted,
    CommitteeElected,
    EmbeddedLedger,
    Ledger,
    PermissionApproved,
    PermissionChanged,
    PermissionProposed,
    RpcLedger,
    RuleCommitted,
    hash_json,
)
from geofl.governance.permissions import PermissionLevel
from geofl.governance.subscriber import LEDGER_DIR, LOG_FILE, RULE_FILE
from geofl.hashing import params_sha256
from geofl.io import read_jsonl
from geofl.records import RoundRecord

__all__ = [
    "ChainRecords",
    "Finding",
    "LedgerRun",
    "audit_files",
    "audit_records",
    "find_ledgers",
    "governance_log",
    "open_readonly",
    "read_chain",
    "verify_run",
]

ROUNDS_FILE = "rounds.jsonl"
CHECKPOINT_FILE = "checkpoint.pt"
BEST_FILE = "best.pt"
FINAL_FILE = "final.json"
#: In the run directory (every other file is in the seed directory).
CONFIG_FILE = "config.yaml"


@dataclass(frozen=True)
class LedgerRun:
    """One governed (method, seed) run."""

    method: str
    seed: int
    seed_dir: Path

    @property
    def name(self) -> str:
        """``method/seed-N``."""
        return f"{self.method}/seed-{self.seed}"


@dataclass(frozen=True)
class Finding:
    """One difference between a run directory and its chain.

    Attributes:
        where: The file, relative to the seed directory (``config.yaml``: the run
            directory's), with ``:line`` when one line is at fault (``rounds.jsonl:4``).
        what: What differs.
        round: The round it concerns, if one (``geofl ledger show`` lists it there).
    """

    where: str
    what: str
    round: int | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass(frozen=True)
class ChainRecords:
    """The governance events of one chain, each kind in block order."""

    rules: tuple[RuleCommitted, ...]
    aggregations: tuple[AggregationCommitted, ...]
    committees: tuple[CommitteeElected, ...]
    proposals: tuple[PermissionProposed, ...]
    approvals: Mapping[int, tuple[PermissionApproved, ...]]
    changes: Mapping[int, PermissionChanged]
    by_round: Mapping[int, AggregationCommitted] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_round", {a.round_id: a for a in self.aggregations})

    @property
    def last_round(self) -> AggregationCommitted | None:
        """The commitment of the highest round committed, if any."""
        return max(self.aggregations, key=lambda a: a.round_id, default=None)

    def rounds(self) -> list[int]:
        """Every round some event concerns, ascending."""
        rs = {a.round_id for a in self.aggregations}
        rs |= {c.round_id for c in self.committees} | {p.round_id for p in self.proposals}
        return sorted(rs)


def read_chain(ledger: Ledger) -> ChainRecords:
    """The rule, aggregation, committee and permission events of ``ledger``."""
    approvals: dict[int, list[PermissionApproved]] = {}
    for ev in ledger.events(PermissionApproved):
        approvals.setdefault(ev.proposal_id, []).append(ev)
    return ChainRecords(
        rules=tuple(ledger.events(RuleCommitted)),
        aggregations=tuple(ledger.events(AggregationCommitted)),
        committees=tuple(ledger.events(CommitteeElected)),
        proposals=tuple(ledger.events(PermissionProposed)),
        approvals={k: tuple(v) for k, v in approvals.items()},
        changes={ev.proposal_id: ev for ev in ledger.events(PermissionChanged)},
    )


def find_ledgers(
    run_dir: Path, method: str | None = None, seed: int | None = None
) -> list[LedgerRun]:
    """The governed runs of ``run_dir`` (optionally one method and/or seed).

    Raises:
        GovernanceError: if nothing matches.
    """
    run_dir = Path(run_dir)
    out = []
    for led in sorted((run_dir / "methods").glob(f"*/seed-*/{LEDGER_DIR}")):
        sd = led.parent
        m, s = sd.parent.name, int(sd.name.removeprefix("seed-"))
        if (method is None or m == method) and (seed is None or s == seed):
            out.append(LedgerRun(m, s, sd))
    if not out:
        what = " ".join(x for x in (method and f"method {method}", seed and f"seed {seed}") if x)
        raise GovernanceError(
            f"{run_dir}: no governance ledger{' for ' + what if what else ''}; run with a "
            "governance section or build one with `geofl ledger build`"
        )
    return out


def open_readonly(run: LedgerRun) -> Ledger:
    """Reopen a run's ledger for reading (an embedded one is replayed and checked)."""
    path = run.seed_dir / LEDGER_DIR
    rpc = path / "rpc.json"
    if rpc.exists():
        info = json.loads(rpc.read_text())
        return RpcLedger.attach(info["url"], info["address"], seed=info["seed"])
    return EmbeddedLedger.open(path, read_only=True)


def governance_log(run: LedgerRun) -> list[dict[str, Any]]:
    """The round entries of ``governance.jsonl`` (the rule entry left out)."""
    return [e for e in read_jsonl(run.seed_dir / LOG_FILE) if "round" in e]


# ---------------------------------------------------------------------------- reading


def _read(path: Path) -> bytes | None:
    """The bytes of ``path``; ``None`` if it does not exist.

    Raises:
        RunDirError: if it exists but cannot be read.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RunDirError(f"{path}: cannot be read ({err.strerror or err})") from None


def _lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def _why(err: Exception) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text[:80] + '…' if len(text) > 80 else text}"


def _short(h: str) -> str:
    return h[:10] + "…" if len(h) > 12 else h


def _hex(h: Any) -> str:
    """A log's hash as the chain writes it (``0x``, lower case)."""
    s = str(h).lower()
    return s if s.startswith("0x") else "0x" + s


@dataclass
class _Lines:
    """The parsed lines of a JSONL file: good values by line, damaged lines."""

    good: list[tuple[int, Any]] = field(default_factory=list)
    damaged: dict[int, str] = field(default_factory=dict)


def _read_rounds(data: bytes) -> _Lines:
    out = _Lines()
    for i, raw in enumerate(_lines(data), start=1):
        try:
            out.good.append((i, RoundRecord.from_json(json.loads(raw.decode("utf-8")))))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            out.damaged[i] = _why(err)
    return out


def _read_log(data: bytes) -> _Lines:
    out = _Lines()
    for i, raw in enumerate(_lines(data), start=1):
        try:
            entry = json.loads(raw.decode("utf-8"))
        except ValueError as err:
            out.damaged[i] = _why(err)
            continue
        ok = isinstance(entry, dict) and (
            entry.get("event") == "rule"
            or (isinstance(entry.get("round"), int) and not isinstance(entry["round"], bool))
        )
        if ok:
            out.good.append((i, entry))
        else:
            out.damaged[i] = "neither a rule entry nor a round entry"
    return out


# ---------------------------------------------------------------------------- alignment


def _align(
    present: Mapping[int, int], order: Sequence[int], damaged: Sequence[int]
) -> tuple[dict[int, int], list[int]]:
    """Which damaged lines stand where the chain's rounds are missing.

    Args:
        present: Line of each round the file holds.
        order: The chain's rounds in chain order.
        damaged: Damaged line numbers.

    Returns:
        (round each explained damaged line stands in for, missing rounds no damaged line
        explains).
    """
    pos = {r: i for i, r in enumerate(order)}
    known = sorted((pos[r], line) for r, line in present.items() if r in pos)
    gaps: dict[tuple[int, float], list[int]] = {}
    for r in order:
        if r in present:
            continue
        before = max((ln for p, ln in known if p < pos[r]), default=0)
        after = min((ln for p, ln in known if p > pos[r]), default=math.inf)
        gaps.setdefault((before, after), []).append(r)
    explained: dict[int, int] = {}
    unexplained: list[int] = []
    for (before, after), rounds in gaps.items():
        lines = [d for d in sorted(damaged) if before < d < after]
        explained.update(zip(lines, rounds, strict=False))
        unexplained += rounds[len(lines) :]
    return explained, sorted(unexplained, key=lambda r: pos[r])


# ---------------------------------------------------------------------------- rounds.jsonl


def _check_rounds(data: bytes | None, chain: ChainRecords) -> Iterator[Finding]:
    order = [a.round_id for a in chain.aggregations]
    if data is None:
        if order:
            yield Finding(
                ROUNDS_FILE, f"missing; the chain commits {len(order)} rounds ({order[0]}…)"
            )
        return
    parsed = _read_rounds(data)
    pos = {r: i for i, r in enumerate(order)}
    seen: dict[int, int] = {}
    prev: tuple[int, int] | None = None  # (round, line) of the previous committed record
    for line, rec in parsed.good:
        where, r = f"{ROUNDS_FILE}:{line}", rec.round
        if r in seen:
            yield Finding(where, f"second record of round {r} (first at line {seen[r]})", r)
            continue
        seen[r] = line
        agg = chain.by_round.get(r)
        if agg is None:
            yield Finding(where, f"round {r} has no aggregation commitment on chain", r)
            continue
        if prev is not None and pos[r] < pos[prev[0]]:
            yield Finding(
                where,
                f"round {r} is out of order: after round {prev[0]} (line {prev[1]}), "
                f"which the chain committed later",
                r,
            )
        prev = (r, line)
        for label, mine, theirs in (
            ("model hash", rec.model_sha256, agg.model_hash),
            ("update-set hash", rec.update_set_sha256, agg.update_set_hash),
        ):
            if _hex(mine) != theirs:
                yield Finding(
                    where,
                    f"round {r}: {label} {_short(_hex(mine)) if mine else '(none)'} differs "
                    f"from the chain's {_short(theirs)} (agg_r{r})",
                    r,
                )
    explained, missing = _align(seen, order, list(parsed.damaged))
    for line, why in parsed.damaged.items():
        r_or_none = explained.get(line)
        note = f"; the chain commits round {r_or_none} here" if r_or_none is not None else ""
        yield Finding(f"{ROUNDS_FILE}:{line}", f"damaged round record ({why}){note}", r_or_none)
    for r in missing:
        agg = chain.by_round[r]
        yield Finding(
            ROUNDS_FILE,
            f"no record of round {r}, which the chain commits (agg_r{r} "
            f"{_short(agg.model_hash)}, block {agg.block_number})",
            r,
        )


# ---------------------------------------------------------------------------- governance.jsonl


def _node(n: Any) -> str:
    return f"client{int(n)}"


def _level(v: Any) -> str:
    try:
        return PermissionLevel(int(v)).name.lower()
    except (TypeError, ValueError):
        return repr(v)


def _perm_text(p: PermissionProposed) -> str:
    return f"#{p.proposal_id} ({p.node} {_level(p.old)}→{_level(p.new)}, round {p.round_id})"


def _diff(what: str, mine: Any, theirs: Any) -> str:
    return f"{what} {mine!r} differs from the chain's {theirs!r}"


def _check_rule_entries(entries: list[tuple[int, Any]], chain: ChainRecords) -> Iterator[Finding]:
    for i, rule in enumerate(chain.rules):
        if i >= len(entries):
            yield Finding(
                LOG_FILE,
                f"no entry for rule record {rule.index} ({rule.label}, tx "
                f"{_short(rule.tx_hash)}), which is on chain",
            )
            continue
        line, e = entries[i]
        where = f"{LOG_FILE}:{line}"
        for what, mine, theirs in (
            ("label", e.get("label"), rule.label),
            ("rule hash", _hex(e.get("rule_hash")), rule.rule_hash),
            ("tx", _hex(e.get("tx")), rule.tx_hash),
        ):
            if mine != theirs:
                yield Finding(where, f"rule record {rule.index}: {_diff(what, mine, theirs)}")
    for line, e in entries[len(chain.rules) :]:
        yield Finding(
            f"{LOG_FILE}:{line}", f"rule entry {e.get('label')!r} is not on chain (no such rule)"
        )


def _check_aggregation(
    where: str, r: int, e: dict[str, Any], chain: ChainRecords
) -> Iterator[Finding]:
    agg, mine = chain.by_round.get(r), e.get("aggregation")
    if agg is None and mine is None:
        return
    if agg is None:
        yield Finding(where, f"round {r}: aggregation commitment is not on chain", r)
    elif mine is None:
        yield Finding(
            where,
            f"round {r}: aggregation commitment (tx {_short(agg.tx_hash)}) is on chain but "
            "not in the log",
            r,
        )
    else:
        for what, m, t in (
            ("model hash", _hex(mine["model_hash"]), agg.model_hash),
            ("update-set hash", _hex(mine["update_set_hash"]), agg.update_set_hash),
            ("tx", _hex(mine["tx"]), agg.tx_hash),
        ):
            if m != t:
                yield Finding(where, f"round {r}: aggregation {_diff(what, m, t)}", r)


def _check_committee(
    where: str, r: int, com: dict[str, Any], by_eid: Mapping[int, CommitteeElected]
) -> Iterator[Finding]:
    eid = int(com["election_id"])
    ev = by_eid.get(eid)
    if ev is None:
        yield Finding(where, f"round {r}: committee election {eid} is not on chain", r)
        return
    for what, mine, theirs in (
        ("round", int(com.get("round_id", r)), ev.round_id),
        ("round", r, ev.round_id),
        ("members", [_node(m) for m in com["members"]], list(ev.members)),
        ("seed commitment", _hex(com["seed_commitment"]), ev.seed_hash),
        ("tx", _hex(com["tx"]), ev.tx_hash),
    ):
        if mine != theirs:
            yield Finding(
                where, f"round {r}: committee election {eid}: {_diff(what, mine, theirs)}", r
            )
            return


def _check_permission(
    where: str, r: int, p: dict[str, Any], ev: PermissionProposed, chain: ChainRecords
) -> Iterator[Finding]:
    pid = ev.proposal_id
    detail = p.get("detail")
    reason = f"{p['reason']}: {detail}" if detail else str(p["reason"])
    approvers = [a.member for a in chain.approvals.get(pid, ())]
    applied = pid in chain.changes
    for what, mine, theirs in (
        ("round", int(p.get("round_id", r)), ev.round_id),
        ("round", r, ev.round_id),
        ("node", _node(p["node"]), ev.node),
        ("old level", _level(p["old"]), _level(ev.old)),
        ("new level", _level(p["new"]), _level(ev.new)),
        ("reason", reason, ev.reason),
        ("tx", _hex(p["tx"]), ev.tx_hash),
        ("approvers", [_node(a) for a in p["approvers"]], approvers),
        ("applied", bool(p["applied"]), applied),
    ):
        if mine != theirs:
            yield Finding(where, f"permission proposal #{pid}: {_diff(what, mine, theirs)}", r)


def _levels_after(chain: ChainRecords, r: int) -> dict[str, PermissionLevel]:
    out: dict[str, PermissionLevel] = {}
    for ch in sorted(chain.changes.values(), key=lambda c: (c.block_number, c.log_index)):
        if ch.round_id <= r:
            out[ch.node] = ch.new
    return out


def _check_round_entry(
    where: str,
    r: int,
    e: dict[str, Any],
    chain: ChainRecords,
    by_eid: Mapping[int, CommitteeElected],
    by_pid: Mapping[int, PermissionProposed],
) -> Iterator[Finding]:
    yield from _check_aggregation(where, r, e, chain)
    com = e.get("committee")
    logged_eids: set[int] = set()
    if com is not None:
        logged_eids.add(int(com["election_id"]))
        yield from _check_committee(where, r, com, by_eid)
    for ev in (c for c in chain.committees if c.round_id == r):
        if ev.election_id not in logged_eids:
            yield Finding(
                where,
                f"round {r}: committee election {ev.election_id} "
                f"({', '.join(ev.members)}; tx {_short(ev.tx_hash)}) is on chain but not in "
                "the log",
                r,
            )
    logged_pids: set[int] = set()
    for p in e.get("permissions") or []:
        pid = int(p["proposal_id"])
        logged_pids.add(pid)
        ev_p = by_pid.get(pid)
        if ev_p is None:
            yield Finding(
                where,
                f"permission proposal #{pid} ({_node(p['node'])} {_level(p['old'])}→"
                f"{_level(p['new'])}) is not on chain",
                r,
            )
        else:
            yield from _check_permission(where, r, p, ev_p, chain)
    for ev_p in (p for p in chain.proposals if p.round_id == r):
        if ev_p.proposal_id not in logged_pids:
            state = "applied" if ev_p.proposal_id in chain.changes else "not applied"
            yield Finding(
                where,
                f"permission proposal {_perm_text(ev_p)}, {state} on chain, is missing from "
                "the log",
                r,
            )
    levels = e.get("levels")
    if isinstance(levels, dict):
        onchain = _levels_after(chain, r)
        for node, lvl in sorted(levels.items()):
            want = onchain.get(_node(node), PermissionLevel.ACTIVE)
            if _level(lvl) != _level(want):
                yield Finding(
                    where,
                    f"round {r}: level of {_node(node)} is {_level(lvl)} in the log, "
                    f"{_level(want)} by the chain's permission changes",
                    r,
                )


def _missing_round(r: int, chain: ChainRecords) -> str:
    parts = []
    agg = chain.by_round.get(r)
    if agg is not None:
        parts.append(f"aggregation commitment (tx {_short(agg.tx_hash)})")
    parts += [f"committee election {c.election_id}" for c in chain.committees if c.round_id == r]
    parts += [f"permission proposal {_perm_text(p)}" for p in chain.proposals if p.round_id == r]
    return f"no entry for round {r}, whose {', '.join(parts)} is on chain"


def _check_log(data: bytes | None, chain: ChainRecords) -> Iterator[Finding]:
    order = chain.rounds()
    if data is None:
        if order or chain.rules:
            yield Finding(
                LOG_FILE, f"missing; the chain holds governance records of {len(order)} rounds"
            )
        return
    parsed = _read_log(data)
    by_eid = {c.election_id: c for c in chain.committees}
    by_pid = {p.proposal_id: p for p in chain.proposals}
    rules = [(ln, e) for ln, e in parsed.good if "round" not in e]
    yield from _check_rule_entries(rules, chain)
    seen: dict[int, int] = {}
    prev: tuple[int, int] | None = None
    for line, e in parsed.good:
        if "round" not in e:
            continue
        where, r = f"{LOG_FILE}:{line}", int(e["round"])
        if r in seen:
            yield Finding(where, f"second entry for round {r} (first at line {seen[r]})", r)
            continue
        seen[r] = line
        if prev is not None and r < prev[0]:
            yield Finding(
                where, f"round {r} is out of order (after round {prev[0]}, line {prev[1]})", r
            )
        prev = (r, line)
        try:
            yield from _check_round_entry(where, r, e, chain, by_eid, by_pid)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            yield Finding(where, f"round {r}: malformed entry ({_why(err)})", r)
    explained, missing = _align(seen, order, list(parsed.damaged))
    for line, why in parsed.damaged.items():
        r_or_none = explained.get(line)
        note = f"; the chain has records of round {r_or_none} here" if r_or_none else ""
        yield Finding(f"{LOG_FILE}:{line}", f"damaged entry ({why}){note}", r_or_none)
    for r in missing:
        yield Finding(LOG_FILE, _missing_round(r, chain), r)


def audit_records(run: LedgerRun, chain: ChainRecords) -> list[Finding]:
    """``rounds.jsonl`` and ``governance.jsonl`` against the chain's events.

    Raises:
        RunDirError: if either file exists but cannot be read.
    """
    sd = run.seed_dir
    rounds, log = _read(sd / ROUNDS_FILE), _read(sd / LOG_FILE)
    return [*_check_rounds(rounds, chain), *_check_log(log, chain)]


# ---------------------------------------------------------------------------- files


def _strip(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k != "governance"}


def _check_rule(run: LedgerRun, chain: ChainRecords, run_dir: Path) -> Iterator[Finding]:
    if not chain.rules:
        yield Finding(LEDGER_DIR, "no rule record on chain")
        return
    rule = chain.rules[0]
    raw = _read(run.seed_dir / RULE_FILE)
    try:
        rule_doc = json.loads(raw if raw is not None else b"")
    except ValueError as err:
        state = "missing" if raw is None else f"damaged ({_why(err)})"
        yield Finding(RULE_FILE, f"{state}; rule {rule.label} unverifiable")
        return
    if hash_json(rule_doc) != rule.rule_hash:
        yield Finding(RULE_FILE, f"does not match rule record {rule.index} ({rule.label})")
    raw_cfg = _read(Path(run_dir) / CONFIG_FILE)
    if raw_cfg is None:
        yield Finding(CONFIG_FILE, f"missing; rule {rule.label} unverifiable")
        return
    try:
        config = yaml.safe_load(raw_cfg.decode("utf-8"))
    except (ValueError, yaml.YAMLError) as err:
        yield Finding(CONFIG_FILE, f"damaged ({_why(err)})")
        return
    doc_cfg = rule_doc.get("config") if isinstance(rule_doc, dict) else None
    if not isinstance(config, dict) or _strip(doc_cfg or {}) != _strip(config):
        yield Finding(CONFIG_FILE, f"differs from the committed rule ({rule.label})")


def _load_model(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A model file's content and the hash of its parameters, or ``None`` and why not.

    Loads with ``weights_only`` (plain containers and tensors), so a crafted pickle in an
    audited directory cannot run code.

    Raises:
        RunDirError: if it exists but cannot be read.
    """
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        digest = "0x" + params_sha256(ckpt["params"])
        ckpt["round"] = int(ckpt["round"])
        return ckpt, digest
    except FileNotFoundError:
        return None, "missing"
    except (PermissionError, IsADirectoryError) as err:
        raise RunDirError(f"{path}: cannot be read ({err.strerror or err})") from None
    except Exception as err:  # a flipped byte can break the archive or the pickle itself
        return None, f"cannot be read ({_why(err)})"


def _holds(digest: str, chain: ChainRecords) -> list[int]:
    return [a.round_id for a in chain.aggregations if a.model_hash == digest]


def _check_model_file(
    name: str,
    ckpt: dict[str, Any],
    digest: str,
    r: int,
    why: str,
    chain: ChainRecords,
    layout: str,
) -> Iterator[Finding]:
    """``name`` must hold round ``r``'s committed model; ``layout`` names a wrong layout."""
    want = chain.by_round[r]
    note = f"; it has {layout}'s layout" if layout else ""
    if digest == want.model_hash:
        if ckpt["round"] != r:
            what = f"says round {ckpt['round']}; it must hold round {r} ({why})"
            yield Finding(name, what, r)
        elif layout:
            yield Finding(name, f"holds round {r}'s committed model but has the layout of {layout}")
        return
    others = _holds(digest, chain)
    if others:
        rs = ", ".join(str(o) for o in others)
        yield Finding(
            name,
            f"holds the model committed for round {rs}, not round {r}'s ({why}{note}): "
            "swapped or stale",
            r,
        )
    else:
        yield Finding(
            name,
            f"model hash {_short(digest)} matches no committed round; round {r} ({why}{note}) "
            f"commits {_short(want.model_hash)}",
            r,
        )


def _best_round(run: LedgerRun, ckpt: dict[str, Any] | None) -> tuple[list[Finding], int | None]:
    """The best-validation round: from ``final.json``, else from the checkpoint's record."""
    raw = _read(run.seed_dir / FINAL_FILE)
    from_final: int | None = None
    if raw is not None:
        try:
            best = json.loads(raw)["best_val"]
            from_final = None if best is None else int(best["round"])
        except (ValueError, KeyError, TypeError) as err:
            return [Finding(FINAL_FILE, f"damaged ({_why(err)}); best.pt's round unknown")], None
    from_ckpt: int | None = None
    if ckpt is not None and isinstance(ckpt.get("best"), dict):
        try:
            from_ckpt = int(ckpt["best"]["round"])
        except (KeyError, TypeError, ValueError) as err:
            return [Finding(CHECKPOINT_FILE, f"damaged best-round record ({_why(err)})")], None
    if from_final is not None and from_ckpt is not None and from_final != from_ckpt:
        what = f"best-validation round {from_final} differs from {CHECKPOINT_FILE}'s {from_ckpt}"
        return [Finding(FINAL_FILE, what)], None
    return [], from_final if from_final is not None else from_ckpt


def audit_files(run: LedgerRun, chain: ChainRecords, run_dir: Path) -> list[Finding]:
    """The rule document, ``config.yaml`` and the model files against the chain.

    Raises:
        RunDirError: if one of them exists but cannot be read.
    """
    out = list(_check_rule(run, chain, run_dir))
    last = chain.last_round
    if last is None:
        return out
    sd = run.seed_dir
    ckpt, digest = _load_model(sd / CHECKPOINT_FILE)
    if ckpt is None:
        what = f"{digest}; it must hold round {last.round_id}'s committed model"
        out.append(Finding(CHECKPOINT_FILE, f"{what} {_short(last.model_hash)}", last.round_id))
    else:
        layout = "" if "format" in ckpt else BEST_FILE
        why = "the last committed round"
        out += _check_model_file(CHECKPOINT_FILE, ckpt, digest, last.round_id, why, chain, layout)
    trusted = ckpt is not None and digest == last.model_hash and "format" in ckpt
    found, best_r = _best_round(run, ckpt if trusted else None)
    out += found
    if best_r is not None and best_r not in chain.by_round:
        out.append(Finding(FINAL_FILE, f"best-validation round {best_r} is not committed on chain"))
        best_r = None
    best, best_digest = _load_model(sd / BEST_FILE)
    if best is None:
        if best_r is not None or best_digest != "missing":
            want = (
                f"round {best_r}'s committed model {_short(chain.by_round[best_r].model_hash)}"
                if best_r is not None
                else "a committed model"
            )
            out.append(Finding(BEST_FILE, f"{best_digest}; it must hold {want}", best_r))
    elif best_r is None:  # the best round is unknown: it must hold some committed model
        if not _holds(best_digest, chain):
            what = f"model hash {_short(best_digest)} matches no committed round"
            out.append(Finding(BEST_FILE, what))
    else:
        layout = CHECKPOINT_FILE if "format" in best else ""
        why = "the best-validation round"
        out += _check_model_file(BEST_FILE, best, best_digest, best_r, why, chain, layout)
    return out


# ---------------------------------------------------------------------------- verify


def verify_run(
    run_dir: Path, method: str | None = None, seed: int | None = None
) -> tuple[list[str], list[str]]:
    """Verify every governed run; returns (what was checked, problems found).

    Raises:
        GovernanceError: if ``run_dir`` holds no (matching) governed run.
        RunDirError: if a file exists but cannot be read.
    """
    checked: list[str] = []
    problems: list[str] = []
    for run in find_ledgers(run_dir, method, seed):
        try:
            ledger = open_readonly(run)
        except LedgerError as err:
            problems.append(f"{run.name}: {err}")
            continue
        try:
            chain = read_chain(ledger)
        finally:
            ledger.close()
        found = [*audit_records(run, chain), *audit_files(run, chain, Path(run_dir))]
        problems += [f"{run.name}: {f}" for f in found]
        if not found:
            checked.append(f"{run.name} ({len(chain.aggregations)} rounds)")
    return checked, problems
