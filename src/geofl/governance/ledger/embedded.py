"""The default ledger backend: an in-process EVM chain (web3 over eth-tester / py-evm).

Blocks depend only on their transactions: the genesis is fixed (timestamp, one funded
coordinator account), block ``n`` has timestamp ``genesis + n`` and a ``prevrandao`` derived
from ``n``, and every transaction is mined alone in its block. A ledger stored in a run
directory (:mod:`geofl.governance.ledger.store`) is therefore reopened by replaying its
signed transactions into a fresh chain, and every stored transaction hash, block hash,
gas figure and status must come out again: an edited byte anywhere is an
:class:`~geofl.errors.LedgerIntegrityError` naming the record.

Example:
    >>> from geofl.governance.ledger import EmbeddedLedger, Role
    >>> ledger = EmbeddedLedger.create(None, seed=1)
    >>> ledger.grant_role("client1", Role.VALIDATION).status
    1
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eth_hash.auto import keccak
from eth_tester import EthereumTester, PyEVMBackend
from eth_tester.exceptions import TransactionFailed
from eth_utils.address import to_canonical_address, to_checksum_address
from web3 import EthereumTesterProvider, Web3

from geofl.errors import LedgerError, LedgerIntegrityError
from geofl.governance.ledger.base import Web3Ledger
from geofl.governance.ledger.hashing import to_hex
from geofl.governance.ledger.identity import Identities
from geofl.governance.ledger.records import Receipt
from geofl.governance.ledger.store import LOG, META, LedgerStore, TxRecord

__all__ = ["GENESIS_TIMESTAMP", "EmbeddedLedger"]

#: Timestamp of block 0 (2023-11-14T22:13:20Z); block n is stamped GENESIS_TIMESTAMP + n.
GENESIS_TIMESTAMP = 1_700_000_000
#: Genesis balance of the coordinator account, which funds every other node.
COORDINATOR_WEI = 10**24
#: Fee cap of every transaction (10 gwei; the base fee never exceeds 1 gwei here).
MAX_FEE_WEI = 10 * 10**9


class _DeterministicBackend(PyEVMBackend):  # type: ignore[misc]
    """py-evm backend whose block hashes depend only on genesis and transactions."""

    def __init__(self, genesis_timestamp: int, coordinator_account: str) -> None:
        self.genesis_timestamp = genesis_timestamp
        params = PyEVMBackend.generate_genesis_params(overrides={"timestamp": genesis_timestamp})
        state = {
            to_canonical_address(coordinator_account): {
                "balance": COORDINATOR_WEI,
                "nonce": 0,
                "code": b"",
                "storage": {},
            }
        }
        super().__init__(genesis_parameters=params, genesis_state=state)
        self._stamp_pending()

    def _stamp_pending(self) -> None:
        header = self.chain.header
        self.chain.header = header.copy(timestamp=self.genesis_timestamp + header.block_number)

    def mine_blocks(self, num_blocks: int = 1, coinbase: Any = None) -> tuple[bytes, ...]:
        hashes = []
        for _ in range(num_blocks):
            number = self.chain.header.block_number
            block = self.chain.mine_block(
                coinbase=coinbase if coinbase is not None else b"\0" * 20,
                mix_hash=keccak(b"geofl-ledger/prevrandao" + number.to_bytes(32, "big")),
            )
            self._stamp_pending()
            hashes.append(block.hash)
        return tuple(hashes)


def _chain(genesis_timestamp: int, coordinator_account: str) -> Web3:
    backend = _DeterministicBackend(genesis_timestamp, coordinator_account)
    return Web3(EthereumTesterProvider(EthereumTester(backend)), middleware=[])


class EmbeddedLedger(Web3Ledger):
    """Governance ledger on an in-process chain, optionally stored in a directory.

    Use :meth:`create` for a new ledger and :meth:`open` to reopen a stored one.
    """

    revert_errors = (TransactionFailed,)

    def __init__(
        self,
        w3: Web3,
        address: str,
        identities: Identities,
        coordinator: str,
        store: LedgerStore | None,
        *,
        read_only: bool = False,
    ) -> None:
        super().__init__(w3, address, identities, coordinator)
        self.store = store
        self.read_only = read_only

    @property
    def path(self) -> Path | None:
        """The ledger directory, or ``None`` for an in-memory ledger."""
        return self.store.path if self.store else None

    @classmethod
    def create(
        cls, path: Path | None, *, seed: int | str, coordinator: str = "coordinator"
    ) -> EmbeddedLedger:
        """A new chain with the contract deployed by ``coordinator``.

        Args:
            path: Directory to store it in (created; must not hold a ledger), or ``None``
                to keep it in memory only.
            seed: Run seed the node accounts derive from.
            coordinator: Node id of the coordinator.

        Raises:
            LedgerError: if ``path`` already holds a ledger.
        """
        identities = Identities(seed)
        account = identities.address(coordinator)
        w3 = _chain(GENESIS_TIMESTAMP, account)
        address = cls.deployment_address(w3, identities, coordinator)
        store = LedgerStore(Path(path)) if path is not None else None
        if store is not None:
            store.create(
                {
                    "chain_id": int(w3.eth.chain_id),
                    "genesis_timestamp": GENESIS_TIMESTAMP,
                    "genesis_hash": to_hex(w3.eth.get_block(0)["hash"]),
                    "seed": seed,
                    "coordinator": coordinator,
                    "coordinator_account": account,
                    "contract_address": address,
                }
            )
        ledger = cls(w3, address, identities, coordinator, store)
        ledger._deploy()
        return ledger

    @classmethod
    def open(
        cls, path: Path, *, seed: int | str | None = None, read_only: bool = False
    ) -> EmbeddedLedger:
        """Reopen a stored ledger by replaying and verifying every transaction.

        Args:
            path: The ledger directory.
            seed: Expected run seed (checked against the stored one), or ``None``.
            read_only: Do not take the write lock; writes raise.

        Raises:
            LedgerIntegrityError: if a file was edited or does not replay, naming the
                file and the record.
            LedgerError: if another process has the ledger open for writing.
        """
        store = LedgerStore(Path(path))
        meta, records = store.load()
        meta_file = str(store.path / META)
        try:
            timestamp, account = int(meta["genesis_timestamp"]), str(meta["coordinator_account"])
            stored_seed, coordinator = meta["seed"], str(meta["coordinator"])
            w3 = _chain(timestamp, account)
        except (KeyError, TypeError, ValueError) as err:
            raise LedgerIntegrityError(meta_file, -1, f"bad chain parameters: {err}") from None
        identities = Identities(stored_seed)
        checks: dict[str, Any] = {
            "genesis_hash": to_hex(w3.eth.get_block(0)["hash"]),
            "chain_id": int(w3.eth.chain_id),
            "coordinator_account": identities.address(coordinator),
            "contract_address": cls.deployment_address(w3, identities, coordinator),
        }
        for key, value in checks.items():
            if meta.get(key) != value:
                raise LedgerIntegrityError(meta_file, -1, f"{key} does not match the chain")
        if seed is not None and seed != stored_seed:
            raise LedgerError(f"{path} was created with seed {stored_seed!r}, not {seed!r}")
        if not records or records[0].method != "deploy":
            raise LedgerIntegrityError(str(store.path / LOG), 0, "no deployment record")
        ledger = cls(w3, str(checks["contract_address"]), identities, coordinator, None)
        for record in records:
            ledger._replay(record, str(store.path / LOG))
        store.check_head()
        if not read_only:
            store.lock()
            store.repair()
        ledger.store = store
        ledger.read_only = read_only
        return ledger

    @classmethod
    def verify(cls, path: Path) -> int:
        """Replay a stored ledger without locking it; the number of transactions.

        Raises:
            LedgerIntegrityError: as :meth:`open`.
        """
        ledger = cls.open(path, read_only=True)
        try:
            return ledger.store.count if ledger.store else 0
        finally:
            ledger.close()

    def close(self) -> None:
        """Release the directory's write lock."""
        if self.store is not None:
            self.store.unlock()

    def _replay(self, record: TxRecord, log_file: str) -> None:
        try:
            raw = bytes.fromhex(record.raw.removeprefix("0x"))
        except ValueError as err:
            raise LedgerIntegrityError(log_file, record.index, f"raw is not hex: {err}") from None
        if to_hex(raw) != record.raw:
            raise LedgerIntegrityError(log_file, record.index, "raw is not lowercase hex")
        try:
            rc = self._submit_raw(raw)
            sender = str(rc["from"])
            created = rc.get("contractAddress")
            seen = {
                "tx_hash": to_hex(rc["transactionHash"]),
                "block_number": int(rc["blockNumber"]),
                "block_hash": to_hex(rc["blockHash"]),
                "gas_used": int(rc["gasUsed"]),
                "status": int(rc["status"]),
            }
            method = self._method_of(record, rc, created)
            expected_sender = self.identities.address(record.sender)
        except Exception as err:
            raise LedgerIntegrityError(log_file, record.index, f"does not replay: {err}") from None
        for key, value in seen.items():
            if getattr(record, key) != value:
                raise LedgerIntegrityError(
                    log_file, record.index, f"{key} {getattr(record, key)} stored, {value} replayed"
                )
        if to_checksum_address(sender) != expected_sender:
            raise LedgerIntegrityError(log_file, record.index, f"not signed by {record.sender!r}")
        if method != record.method:
            raise LedgerIntegrityError(
                log_file, record.index, f"method {record.method!r} stored, {method!r} replayed"
            )
        self.decoder.decode_logs(rc["logs"])  # learn the node-id bindings
        self._index_logs(rc["logs"])

    def _method_of(self, record: TxRecord, rc: dict[str, Any], created: Any) -> str:
        if created:
            return "deploy"
        tx = self.w3.eth.get_transaction(rc["transactionHash"])
        data = bytes(tx["input"])
        if not data:
            return "transfer"
        func, _ = self.contract.decode_function_input(data)
        return str(func.fn_name)

    def _max_fee_per_gas(self) -> int:
        # Blocks hold one transaction each, far below the gas target, so the base fee
        # only falls from its genesis value (1 gwei): a fixed cap saves a block query.
        return MAX_FEE_WEI

    def _before_send(self) -> None:
        if self.read_only:
            raise LedgerError(f"{self.path} is open read-only")

    def _record(self, raw: bytes, receipt: Receipt) -> None:
        if self.store is None:
            return
        self.store.append(
            TxRecord(
                index=self.store.count,
                method=receipt.method,
                sender=receipt.sender,
                raw=to_hex(raw),
                tx_hash=receipt.tx_hash,
                block_number=receipt.block_number,
                block_hash=receipt.block_hash,
                gas_used=receipt.gas_used,
                status=receipt.status,
            )
        )
