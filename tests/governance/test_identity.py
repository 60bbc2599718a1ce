"""Deterministic node accounts and the hashes the ledger commits."""

from __future__ import annotations

import pytest

from geofl.governance.ledger import Identities, as_bytes32, derive_private_key, hash_json


def test_accounts_derive_from_seed_and_node_id_only():
    a, b = Identities(1), Identities(1)
    assert a.address("client7") == b.address("client7")
    assert a.address("client7") != a.address("client8")
    assert a.address("client7") != Identities(2).address("client7")
    assert Identities("1").address("client7") != a.address("client7")  # "1" is not 1
    assert derive_private_key(1, "client7") == bytes(a.account("client7").key)
    assert a.node_of(a.address("client7").lower()) == "client7"
    assert a.node_of("0x" + "00" * 20) is None
    with pytest.raises(ValueError, match="node id"):
        derive_private_key(1, "")


def test_hashes_are_canonical_and_checked():
    assert hash_json({"a": 1, "b": [1, 2]}) == hash_json({"b": [1, 2], "a": 1})
    assert hash_json({"a": 1}) != hash_json({"a": 2})
    h = hash_json("x")
    assert as_bytes32(h) == as_bytes32(h[2:]) == as_bytes32(bytes.fromhex(h[2:]))
    with pytest.raises(ValueError, match="rule hash: expected 32 bytes, got 3"):
        as_bytes32(b"abc", what="rule hash")
    with pytest.raises(ValueError, match="not hex"):
        as_bytes32("0xzz")
    with pytest.raises(ValueError, match="not JSON compliant"):
        hash_json({"x": float("nan")})
