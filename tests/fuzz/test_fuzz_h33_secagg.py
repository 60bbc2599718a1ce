"""Hostile input for secure aggregation and the site's key check (< 20 s): whatever a
broken or hostile site puts in its per-client records, the server turns it into a lost
upload, a refusal or a result — never an exception; merged request keys of any shape
split without raising; any SuperNode argument list gets an answer; bad encodings are
refused at load."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from geofl.client.step import ClientResult
from geofl.config.training import SecureAggregationConfig
from geofl.deploy.secagg import SecureSum, client_record, secure_outcome, split_requests
from geofl.deploy.warmsite import node_key_problem
from geofl.engine.scheduler import LostUpload
from geofl.errors import BudgetExhaustedError

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_KEYS = st.sampled_from(["error", "declined", "epsilon", "target", "dp_events", "x"])
_RECORDS = st.dictionaries(_KEYS, _JSON, max_size=4).map(json.dumps) | st.text(max_size=20)


@settings(max_examples=150, deadline=None)
@given(text=_RECORDS | st.none(), node=st.integers(0, 2))
def test_any_record_becomes_an_outcome(text: str | None, node: int) -> None:
    sums = SecureSum([])
    sums.mean, sums.answered = np.array([0.25, -1.0, 0.5]), {1}
    sums.records = {1: {} if text is None else {0: text}}
    out = secure_outcome(0, node, 3, sums)
    assert isinstance(out, ClientResult | BudgetExhaustedError | LostUpload)
    if isinstance(out, ClientResult):
        assert out.update.delta.tolist() == [0.25, -1.0] and node == 1
        assert out.epsilon is None or isinstance(out.epsilon, float)
    rec = client_record(text)
    assert rec is None or set(rec) <= {"error", "declined", "epsilon", "target", "dp_events"}


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.text(max_size=12), max_size=6))
def test_split_requests_never_raises(keys: list[str]) -> None:
    content = RecordDict({k: ConfigRecord({"v": 1}) for k in keys if k})
    out = split_requests(content)
    assert all(isinstance(k, int) and k >= 0 for k in out)


_ARGS = ["--insecure", "--auth-supernode-private-key", "/no/key", "--root-certificates", "x"]


@settings(max_examples=100, deadline=None)
@given(argv=st.lists(st.sampled_from(_ARGS), max_size=5), no_auth=st.booleans())
def test_every_supernode_argument_list_gets_an_answer(argv: list[str], no_auth: bool) -> None:
    why = node_key_problem(argv, no_auth)
    assert why is None or ("\n" not in why and why)


@pytest.mark.parametrize(
    "settings_",
    [
        {"clipping_range": 0.0},
        {"clipping_range": float("nan")},
        {"quantization_range": 1},
        {"modulus_range": 3 * 2**20},
        {"modulus_range": 2**33},
        {"max_weight": -1.0},
        {"quantization_range": 2**22, "modulus_range": 2**21},
    ],
)
def test_bad_encodings_are_refused(settings_: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="validation error"):
        SecureAggregationConfig(**settings_)
