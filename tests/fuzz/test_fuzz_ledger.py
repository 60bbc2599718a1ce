"""Fuzzing the round-count audit and the anchored-head option with hostile inputs.

``final.json``, ``summary.json`` and ``config.yaml`` of a governed run are replaced by
hypothesis-made documents (the real keys with values of any JSON type and range, or bytes
that are no JSON at all), against chains committing any rounds. The contract: the audit
returns findings, each one line naming its file, and never raises; a file whose counts
agree with the chain gives none. ``--expect-head`` text of any shape is read as a block
hash or refused with one line naming the option.

Derandomized: the same examples every run, no dataset, well under 20 s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geofl.errors import GovernanceError
from geofl.governance.audit import ChainRecords, LedgerRun, audit_counts, parse_head
from geofl.governance.ledger import AggregationCommitted

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 12)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
counts = st.integers(-1, 12) | json_values


def _maybe(key: str, value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.just(key), value, max_size=1)


finals = st.builds(
    lambda a, b, c, d: {**a, **b, **c, **d},
    _maybe("rounds", counts),
    _maybe("communication", _maybe("rounds", counts) | json_values),
    _maybe("early_stopping", _maybe("stopped_at", counts) | json_values),
    _maybe("target", _maybe("round", counts) | json_values),
)
summaries = st.builds(
    lambda done, per_seed: {
        "methods": {"fedavg": {"seeds_done": done, "target": {"per_seed": per_seed}}}
    },
    st.lists(st.integers(0, 5), max_size=3) | json_values,
    st.dictionaries(st.sampled_from(["3", "4"]), counts),
) | json_values.map(lambda v: {"methods": v})
configs = (
    st.builds(
        lambda rounds, early: {"federation": {"rounds": rounds}, "eval": early},
        counts,
        _maybe("early_stopping", json_values),
    )
    | json_values
)
documents = st.one_of(st.none(), st.binary(max_size=20), finals.map(json.dumps))


def _chain(rounds: list[int]) -> ChainRecords:
    aggs = tuple(
        AggregationCommitted(
            block_number=i + 2,
            tx_hash=f"0x{i:064x}",
            log_index=0,
            round_id=r,
            model_hash=f"0x{r:064x}",
            update_set_hash="0x" + "0" * 64,
            rule_index=1,
        )
        for i, r in enumerate(rounds)
    )
    return ChainRecords((), aggs, (), (), {}, {})


def _write(path: Path, doc: Any) -> None:
    if doc is None:
        path.unlink(missing_ok=True)
    elif isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc)


@FUZZ
@given(
    final=documents,
    summary=st.one_of(st.none(), st.binary(max_size=20), summaries.map(json.dumps)),
    config=st.one_of(st.none(), st.binary(max_size=20), configs.map(yaml.safe_dump)),
    rounds=st.lists(st.integers(0, 12), max_size=12, unique=True),
)
def test_hostile_count_files_give_one_line_findings(
    tmp_path: Path, final: Any, summary: Any, config: Any, rounds: list[int]
) -> None:
    sd = tmp_path / "methods" / "fedavg" / "seed-3"
    sd.mkdir(parents=True, exist_ok=True)
    _write(sd / "final.json", final)
    _write(tmp_path / "summary.json", summary)
    _write(tmp_path / "config.yaml", config)
    for f in audit_counts(LedgerRun("fedavg", 3, sd), _chain(rounds), tmp_path):
        assert "\n" not in str(f)
        assert f.where in ("final.json", "summary.json", "config.yaml")


@FUZZ
@given(planned=st.integers(1, 12), stop=st.none() | st.integers(1, 12), early=st.booleans())
def test_counts_that_agree_with_the_chain_give_no_finding(
    tmp_path: Path, planned: int, stop: int | None, early: bool
) -> None:
    stop = None if stop is None or stop > planned or not early else stop
    ended = planned if stop is None else stop
    config = {"federation": {"rounds": planned}}
    if early:
        config["eval"] = {"early_stopping": {"patience": 1}}
    final = {"rounds": planned, "communication": {"rounds": ended}, "target": {"round": ended}}
    if early:
        final["early_stopping"] = {"stopped_at": stop}
    sd = tmp_path / "methods" / "fedavg" / "seed-3"
    sd.mkdir(parents=True, exist_ok=True)
    (sd / "final.json").write_text(json.dumps(final))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    chain = _chain(list(range(1, ended + 1)))
    assert audit_counts(LedgerRun("fedavg", 3, sd), chain, tmp_path) == []


@FUZZ
@given(text=st.text(max_size=70) | st.from_regex(r"(0[xX])?[0-9a-fA-F]{60,68}", fullmatch=True))
def test_any_expected_head_is_a_hash_or_a_one_line_refusal(text: str) -> None:
    stripped = text.strip()
    digits = stripped[2:] if stripped[:2] in ("0x", "0X") else stripped
    if len(digits) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        with pytest.raises(GovernanceError) as err:
            parse_head(text)
        assert str(err.value).startswith("--expect-head: ") and "\n" not in str(err.value)
        return
    assert parse_head(text) == "0x" + digits.lower()
