"""Fixtures of the governance-ledger tests: a ganache node and ledgers on both backends.

The ganache node is real: installed from the npm registry into the cache directory on
first use (about 10 s), started on a free loopback port for the test session (each
pytest-xdist worker starts its own) and stopped afterwards. Tests that need it skip,
with the reason, only where ``node`` or ``npm`` are missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from geofl.governance.ledger import EmbeddedLedger, RpcLedger, Web3Ledger
from geofl.governance.ledger.ganache import GanacheNode, ganache_cache_dir, missing_tools

#: Resolved at import, before the suite's autouse fixture points GEOFL_CACHE at a
#: temporary directory, so that ganache is installed once per machine, not per session.
GANACHE_PREFIX = ganache_cache_dir()

MakeLedger = Callable[..., Web3Ledger]


@pytest.fixture(scope="session")
def ganache_url() -> Iterator[str]:
    """URL of a ganache 7 node on 127.0.0.1 for the whole session."""
    reason = missing_tools()
    if reason:
        pytest.skip(f"ganache (the JSON-RPC backend's test node) cannot run: {reason}")
    with GanacheNode(prefix=GANACHE_PREFIX) as node:
        yield node.url


@pytest.fixture(params=["embedded", "rpc"])
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeLedger]:
    """Factory of fresh ledgers (a new contract each) on the parametrised backend."""
    made: list[Web3Ledger] = []

    def make(seed: int | str = 1, coordinator: str = "coordinator") -> Web3Ledger:
        ledger: Web3Ledger
        if request.param == "embedded":
            path = tmp_path / f"ledger-{len(made)}"
            ledger = EmbeddedLedger.create(path, seed=seed, coordinator=coordinator)
        else:
            url = request.getfixturevalue("ganache_url")
            ledger = RpcLedger.create(url, seed=seed, coordinator=coordinator)
        made.append(ledger)
        return ledger

    yield make
    for ledger in made:
        ledger.close()
