"""Deterministic node identities: one Ethereum account per (run seed, node id).

The private key of node ``u`` is keccak-256 of the canonical JSON
``["geofl-ledger-key/v1", seed, u]`` (re-hashed in the negligible case that it is not a
valid secp256k1 key). The same seed and node id give the same account in every process
and on every backend, so a reopened ledger signs as the same nodes and an auditor can map
accounts back to node ids. The keys simulate a consortium's members; anyone who knows
the seed can sign as any node, so they are not a security boundary.
"""

from __future__ import annotations

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_hash.auto import keccak

from geofl.governance.ledger.hashing import canonical_json

__all__ = ["Identities", "derive_private_key"]

#: Order of the secp256k1 group; a private key must lie in [1, N - 1].
_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_DOMAIN = "geofl-ledger-key/v1"


def derive_private_key(seed: int | str, node_id: str) -> bytes:
    """The 32-byte private key of ``node_id`` under run seed ``seed``.

    Raises:
        ValueError: if ``node_id`` is empty.
    """
    if not node_id:
        raise ValueError("node id must not be empty")
    key = keccak(canonical_json([_DOMAIN, seed, node_id]))
    while not 0 < int.from_bytes(key, "big") < _SECP256K1_N:
        key = keccak(key)
    return key


class Identities:
    """Accounts of the nodes of one run, derived on demand and cached.

    Args:
        seed: Run seed (an int or a string) the keys derive from.
    """

    def __init__(self, seed: int | str) -> None:
        self.seed = seed
        self._accounts: dict[str, LocalAccount] = {}
        self._nodes: dict[str, str] = {}

    def account(self, node_id: str) -> LocalAccount:
        """The signing account of ``node_id``."""
        acct = self._accounts.get(node_id)
        if acct is None:
            acct = Account.from_key(derive_private_key(self.seed, node_id))
            self._accounts[node_id] = acct
            self._nodes[acct.address.lower()] = node_id
        return acct

    def address(self, node_id: str) -> str:
        """Checksummed address of ``node_id``."""
        return str(self.account(node_id).address)

    def node_of(self, address: str) -> str | None:
        """Node id of an address derived so far, or ``None``."""
        return self._nodes.get(address.lower())
