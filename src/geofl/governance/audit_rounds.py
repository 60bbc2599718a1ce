"""Audit of ``rounds.jsonl`` against the chain's aggregation commitments (000 §3.5.1, §4.7).

Every round committed on chain has exactly one record, in the chain's order, and every
record a commitment; each record's model and update-set hashes are the committed ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from geofl.governance.audit_chain import ChainRecords, Finding
from geofl.governance.audit_read import ROUNDS_FILE, _align, _hex, _Lines, _read_rounds, _short
from geofl.governance.ledger import AggregationCommitted
from geofl.records import RoundRecord


def _check_hashes(where: str, rec: RoundRecord, agg: AggregationCommitted) -> Iterator[Finding]:
    """A record's model and update-set hashes against its round's commitment."""
    r = rec.round
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


def _check_unaccounted(
    parsed: _Lines, seen: dict[int, int], order: Sequence[int], chain: ChainRecords
) -> Iterator[Finding]:
    """Damaged lines (with the committed round each stands in for) and missing rounds."""
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


def _check_rounds(data: bytes | None, chain: ChainRecords) -> Iterator[Finding]:
    """``rounds.jsonl`` (its bytes, ``None`` if missing) against the chain's commitments."""
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
        yield from _check_hashes(where, rec, agg)
    yield from _check_unaccounted(parsed, seen, order, chain)
