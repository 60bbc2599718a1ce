"""Audit of ``governance.jsonl`` against the chain's governance events (000 §3.5.1, §4.7).

The rule entry, and per round the aggregation commitment, the committee election and the
permission proposals (their approvers and whether they took effect) match the chain's
events, transaction hashes included; every event on chain has its entry and every entry its
event; the permission levels each round reports are the ones the chain's permission changes
produce.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from geofl.governance.audit_chain import ChainRecords, Finding
from geofl.governance.audit_read import _align, _hex, _Lines, _read_log, _short, _why
from geofl.governance.ledger import CommitteeElected, PermissionProposed
from geofl.governance.permissions import PermissionLevel
from geofl.governance.subscriber import LOG_FILE


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


def _check_committees(
    where: str,
    r: int,
    e: dict[str, Any],
    chain: ChainRecords,
    by_eid: Mapping[int, CommitteeElected],
) -> Iterator[Finding]:
    """A round entry's committee election, and the round's elections the log leaves out."""
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


def _check_permissions(
    where: str,
    r: int,
    e: dict[str, Any],
    chain: ChainRecords,
    by_pid: Mapping[int, PermissionProposed],
) -> Iterator[Finding]:
    """A round entry's permission proposals, and the round's proposals the log leaves out."""
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


def _levels_after(chain: ChainRecords, r: int) -> dict[str, PermissionLevel]:
    out: dict[str, PermissionLevel] = {}
    for ch in sorted(chain.changes.values(), key=lambda c: (c.block_number, c.log_index)):
        if ch.round_id <= r:
            out[ch.node] = ch.new
    return out


def _check_levels(where: str, r: int, e: dict[str, Any], chain: ChainRecords) -> Iterator[Finding]:
    """The levels a round entry reports against those the chain's changes produce by ``r``."""
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


def _check_round_entry(
    where: str,
    r: int,
    e: dict[str, Any],
    chain: ChainRecords,
    by_eid: Mapping[int, CommitteeElected],
    by_pid: Mapping[int, PermissionProposed],
) -> Iterator[Finding]:
    yield from _check_aggregation(where, r, e, chain)
    yield from _check_committees(where, r, e, chain, by_eid)
    yield from _check_permissions(where, r, e, chain, by_pid)
    yield from _check_levels(where, r, e, chain)


def _missing_round(r: int, chain: ChainRecords) -> str:
    parts = []
    agg = chain.by_round.get(r)
    if agg is not None:
        parts.append(f"aggregation commitment (tx {_short(agg.tx_hash)})")
    parts += [f"committee election {c.election_id}" for c in chain.committees if c.round_id == r]
    parts += [f"permission proposal {_perm_text(p)}" for p in chain.proposals if p.round_id == r]
    return f"no entry for round {r}, whose {', '.join(parts)} is on chain"


def _check_unlogged(
    parsed: _Lines, seen: dict[int, int], order: Sequence[int], chain: ChainRecords
) -> Iterator[Finding]:
    """Damaged lines (with the round each stands in for) and rounds with no entry."""
    explained, missing = _align(seen, order, list(parsed.damaged))
    for line, why in parsed.damaged.items():
        r_or_none = explained.get(line)
        note = f"; the chain has records of round {r_or_none} here" if r_or_none else ""
        yield Finding(f"{LOG_FILE}:{line}", f"damaged entry ({why}){note}", r_or_none)
    for r in missing:
        yield Finding(LOG_FILE, _missing_round(r, chain), r)


def _check_log(data: bytes | None, chain: ChainRecords) -> Iterator[Finding]:
    """``governance.jsonl`` (its bytes, ``None`` if missing) against the chain's events."""
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
    yield from _check_unlogged(parsed, seen, order, chain)
