"""Ledger backend for any Ethereum node reached by JSON-RPC over HTTP.

Transactions are signed locally with the nodes' derived keys and sent raw, so the node
needs no unlocked accounts of ours. The coordinator account is funded once, from the
node's first unlocked (dev) account or from a given funded key; it funds the other nodes.
Event queries index the contract's logs incrementally with ``eth_getLogs`` restricted to
the contract and to blocks not yet indexed (cheap on a real node).

Example (against a local dev node)::

    ledger = RpcLedger.create("http://127.0.0.1:8545", seed=1)
    again = RpcLedger.attach("http://127.0.0.1:8545", ledger.contract_address, seed=1)
"""

from __future__ import annotations

import time
from typing import Any, cast

from eth_account import Account
from eth_utils.address import to_checksum_address
from web3 import HTTPProvider, Web3
from web3.exceptions import TransactionNotFound
from web3.types import Wei

from geofl.errors import LedgerError
from geofl.governance.ledger.base import PRIORITY_FEE_WEI, Web3Ledger
from geofl.governance.ledger.identity import Identities
from geofl.governance.ledger.records import Role

__all__ = ["COORDINATOR_FUND_WEI", "RpcLedger", "connect"]

#: What the coordinator account is topped up to before it deploys (100 ether).
COORDINATOR_FUND_WEI = 100 * 10**18


def connect(url: str, *, timeout_s: float = 30.0) -> Web3:
    """A web3 connection to ``url``.

    Raises:
        LedgerError: if no Ethereum node answers there.
    """
    w3 = Web3(HTTPProvider(url, request_kwargs={"timeout": timeout_s}), middleware=[])
    try:
        w3.eth.chain_id  # noqa: B018 - the first request checks the connection
    except Exception as err:
        raise LedgerError(f"no Ethereum node answers at {url}: {err}") from None
    return w3


def _wait(w3: Web3, tx_hash: Any, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return cast(dict[str, Any], w3.eth.get_transaction_receipt(tx_hash))
        except TransactionNotFound:
            if time.monotonic() > deadline:
                raise LedgerError(f"funding transaction not mined in {timeout_s:.0f}s") from None
            time.sleep(0.01)


def fund_account(
    w3: Web3, to: str, amount_wei: int, *, funder_key: str | bytes | None, timeout_s: float = 60.0
) -> None:
    """Transfer ``amount_wei`` to ``to`` from ``funder_key`` or the node's first account.

    Raises:
        LedgerError: if there is no funder or the transfer fails.
    """
    to = to_checksum_address(to)
    if funder_key is not None:
        funder = Account.from_key(funder_key)
        base_fee = int(w3.eth.get_block("latest")["baseFeePerGas"])
        tx = {
            "chainId": int(w3.eth.chain_id),
            "nonce": w3.eth.get_transaction_count(funder.address),
            "to": to,
            "value": amount_wei,
            "gas": 21_000,
            "maxFeePerGas": 2 * base_fee + PRIORITY_FEE_WEI,
            "maxPriorityFeePerGas": PRIORITY_FEE_WEI,
        }
        tx_hash = w3.eth.send_raw_transaction(funder.sign_transaction(tx).raw_transaction)
    else:
        accounts = w3.eth.accounts
        if not accounts:
            raise LedgerError("the node has no unlocked account to fund from; pass funder_key")
        tx_hash = w3.eth.send_transaction({"from": accounts[0], "to": to, "value": Wei(amount_wei)})
    if int(_wait(w3, tx_hash, timeout_s)["status"]) != 1:
        raise LedgerError(f"funding {to} failed")


class RpcLedger(Web3Ledger):
    """Governance ledger on an Ethereum node reached at a JSON-RPC URL.

    Use :meth:`create` for a new contract and :meth:`attach` for an existing one.
    """

    cache_nonces = False  # other writers may use the same keys: ask the node each time

    def __init__(
        self, w3: Web3, address: str, identities: Identities, coordinator: str, from_block: int
    ) -> None:
        super().__init__(w3, address, identities, coordinator)
        self._synced = from_block - 1

    @classmethod
    def create(
        cls,
        url: str,
        *,
        seed: int | str,
        coordinator: str = "coordinator",
        funder_key: str | bytes | None = None,
        timeout_s: float = 30.0,
    ) -> RpcLedger:
        """Fund the coordinator if needed and deploy a new contract with its key.

        Args:
            url: JSON-RPC endpoint (``http://host:port``).
            seed: Run seed the node accounts derive from.
            coordinator: Node id of the coordinator.
            funder_key: Private key of a funded account; ``None`` uses the node's first
                unlocked account (dev nodes such as ganache or anvil).
            timeout_s: HTTP and mining timeout.

        Raises:
            LedgerError: if the node is unreachable or nothing can fund the coordinator.
        """
        w3 = connect(url, timeout_s=timeout_s)
        identities = Identities(seed)
        account = identities.address(coordinator)
        balance = w3.eth.get_balance(to_checksum_address(account))
        if balance < COORDINATOR_FUND_WEI // 2:
            fund_account(
                w3,
                account,
                COORDINATOR_FUND_WEI - balance,
                funder_key=funder_key,
                timeout_s=timeout_s,
            )
        address = cls.deployment_address(w3, identities, coordinator)
        ledger = cls(w3, address, identities, coordinator, from_block=w3.eth.block_number + 1)
        ledger.receipt_timeout_s = timeout_s
        ledger._deploy()
        return ledger

    @classmethod
    def attach(
        cls,
        url: str,
        address: str,
        *,
        seed: int | str,
        coordinator: str = "coordinator",
        from_block: int = 0,
        timeout_s: float = 30.0,
    ) -> RpcLedger:
        """Open the contract deployed at ``address``.

        Args:
            url: JSON-RPC endpoint.
            address: Contract address.
            seed: Run seed the node accounts derive from.
            coordinator: Node id of the coordinator.
            from_block: First block to index events from (the deployment block).
            timeout_s: HTTP and mining timeout.

        Raises:
            LedgerError: if there is no contract at ``address`` or ``coordinator``'s
                account does not hold the coordinator role there.
        """
        w3 = connect(url, timeout_s=timeout_s)
        if not w3.eth.get_code(to_checksum_address(address)):
            raise LedgerError(f"no contract at {address} on {url}")
        ledger = cls(w3, address, Identities(seed), coordinator, from_block=from_block)
        ledger.receipt_timeout_s = timeout_s
        if not ledger.roles(coordinator) & Role.COORDINATOR:
            raise LedgerError(
                f"{coordinator!r} (seed {seed!r}) holds no coordinator role at {address}"
            )
        return ledger

    def _sync_index(self) -> None:
        latest = int(self.w3.eth.block_number)
        if latest <= self._synced:
            return
        logs = self.w3.eth.get_logs(
            {
                "address": to_checksum_address(self.contract_address),
                "fromBlock": self._synced + 1,
                "toBlock": latest,
            }
        )
        self.decoder.decode_logs(logs)  # learn node-id bindings
        self._index_logs(logs)
        self._synced = latest
