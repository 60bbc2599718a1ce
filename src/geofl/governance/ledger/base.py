"""Transactions of the governance ledger over any web3 connection.

:class:`Web3Ledger` signs every transaction locally with the sending node's derived key,
checks it first with ``eth_call`` (a call the contract would reject raises
:class:`~geofl.errors.LedgerRevertError` with its reason and leaves the chain untouched),
sends the raw transaction and waits for the confirmed receipt. Backends supply the web3
connection and may persist what was sent (:meth:`Web3Ledger._record`). Queries of state
are contract calls; event queries read the receipts of the transactions an index lists
per event type (:mod:`geofl.governance.ledger.index`), never a log scan of the chain.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_utils.address import to_checksum_address
from web3 import Web3
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3RPCError
from web3.utils import get_create_address

from geofl.errors import LedgerError, LedgerRevertError
from geofl.governance.ledger.artifact import load_artifact
from geofl.governance.ledger.decode import EventDecoder
from geofl.governance.ledger.hashing import Hash32, as_bytes32, to_hex
from geofl.governance.ledger.identity import Identities
from geofl.governance.ledger.index import EventIndex
from geofl.governance.ledger.records import PermissionProposed, Receipt

__all__ = ["Web3Ledger"]

#: Gas limit per contract function (unused gas is refunded; one transaction per block).
GAS_LIMITS = {"deploy": 4_000_000, "recordCommittee": 3_000_000, "transfer": 21_000}
DEFAULT_GAS = 1_000_000
PRIORITY_FEE_WEI = 10**9
#: A node account is topped up to this balance when it falls below a tenth of it.
FUND_WEI = 10**17
#: Re-check a node's balance after this many of its transactions.
FUND_CHECK_EVERY = 256
MAX_LENGTHS = {"node id": 64, "label": 128, "reason": 256}
MAX_COMMITTEE = 32


_REVERT_PREFIXES = (
    "execution reverted:",
    "VM Exception while processing transaction: revert",
)
#: Selector of Solidity/Vyper ``Error(string)`` revert data.
_ERROR_SELECTOR = "0x08c379a0"


def revert_reason(err: Exception, always: tuple[type[Exception], ...] = ()) -> str | None:
    """The contract's revert message carried by ``err``, or ``None`` if it is no revert.

    Args:
        err: What the node (or eth-tester) raised for a call.
        always: Exception types that always mean a revert (e.g. eth-tester's).
    """
    message = str(getattr(err, "message", None) or err).strip()
    if isinstance(err, Web3RPCError) and not isinstance(err, ContractLogicError):
        error: Any = (err.rpc_response or {}).get("error") or {}
        data = error.get("data") if isinstance(error, dict) else None
        if isinstance(data, str) and data.startswith(_ERROR_SELECTOR):
            return str(abi_decode(["string"], bytes.fromhex(data[10:]))[0])
        if not any(p in message for p in _REVERT_PREFIXES):
            return None
    elif not isinstance(err, (ContractLogicError, *always)):
        return None
    for prefix in _REVERT_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :].strip()
    return message


def check_text(what: str, value: str) -> str:
    """``value`` if its UTF-8 length fits the contract's ``String[N]`` for ``what``."""
    size = len(value.encode("utf-8"))
    if size > MAX_LENGTHS[what] or (what == "node id" and size == 0):
        raise LedgerError(f"{what} {value!r}: {size} bytes; 1..{MAX_LENGTHS[what]} allowed")
    return value


class Web3Ledger(EventIndex):
    """The governance ledger's write path and event index over a web3 connection.

    Args:
        w3: Connected web3 instance.
        address: Address of the deployed contract (or where it will be deployed).
        identities: Node accounts of this run.
        coordinator: Node id of the coordinator (the deployer).
        receipt_timeout_s: How long to wait for a transaction to be mined.
    """

    #: Exception types by which the backend reports a reverted call (besides web3's).
    revert_errors: tuple[type[Exception], ...] = ()
    #: Whether nonces may be counted locally (only this object writes with these keys).
    cache_nonces = True

    def __init__(
        self,
        w3: Web3,
        address: str,
        identities: Identities,
        coordinator: str,
        *,
        receipt_timeout_s: float = 60.0,
    ) -> None:
        self.w3 = w3
        self.identities = identities
        self.coordinator = check_text("node id", coordinator)
        checksummed = to_checksum_address(address)
        self.contract_address: str = str(checksummed)
        contract = w3.eth.contract(address=checksummed, abi=load_artifact().abi)
        decoder = EventDecoder(contract, identities.node_of)
        super().__init__(w3, contract, decoder, identities, identities.address(coordinator))
        self.receipt_timeout_s = receipt_timeout_s
        self.chain_id = int(w3.eth.chain_id)
        self._nonces: dict[str, int] = {}
        self._since_funded: dict[str, int] = {}

    @staticmethod
    def deployment_address(w3: Web3, identities: Identities, coordinator: str) -> str:
        """Address the coordinator's next transaction would deploy the contract at."""
        sender = identities.address(coordinator)
        nonce = w3.eth.get_transaction_count(to_checksum_address(sender))
        return str(get_create_address(sender, nonce))  # type: ignore[arg-type]

    # -- writes ------------------------------------------------------------------------

    def _deploy(self) -> Receipt:
        """Deploy the contract at :attr:`contract_address` with the coordinator's key."""
        data = load_artifact().bytecode + abi_encode(["string"], [self.coordinator])
        receipt = self._send(self.coordinator, "deploy", to=None, data=data, preflight=False)
        if (receipt.contract_address or "").lower() != self.contract_address.lower():
            raise LedgerError(
                f"contract deployed at {receipt.contract_address}, expected {self.contract_address}"
            )
        return receipt

    def grant_role(self, node_id: str, role: int) -> Receipt:
        """Bind ``node_id``'s account to it and give it ``role`` (coordinator only)."""
        check_text("node id", node_id)
        return self.transact(
            self.coordinator, "grantRole", self.identities.address(node_id), int(role), node_id
        )

    def revoke_role(self, node_id: str, role: int) -> Receipt:
        """Clear ``role`` from ``node_id`` (coordinator only)."""
        return self.transact(
            self.coordinator, "revokeRole", self.identities.address(node_id), int(role)
        )

    def commit_rule(self, rule_hash: Hash32, label: str) -> Receipt:
        """Commit the hash of a resolved config plus governance rules under ``label``."""
        check_text("label", label)
        return self.transact(
            self.coordinator, "commitRule", as_bytes32(rule_hash, what="rule hash"), label
        )

    def commit_aggregation(
        self, round_id: int, model_hash: Hash32, update_set_hash: Hash32
    ) -> Receipt:
        """Commit round ``round_id``'s aggregated model hash and update-set hash."""
        return self.transact(
            self.coordinator,
            "commitAggregation",
            int(round_id),
            as_bytes32(model_hash, what="model hash"),
            as_bytes32(update_set_hash, what="update-set hash"),
        )

    def record_committee(
        self, election_id: int, round_id: int, members: Sequence[str], seed_hash: Hash32
    ) -> Receipt:
        """Record election ``election_id``'s committee (node ids in draw order)."""
        if not 0 < len(members) <= MAX_COMMITTEE:
            raise LedgerError(f"committee of {len(members)}: 1..{MAX_COMMITTEE} members allowed")
        return self.transact(
            self.coordinator,
            "recordCommittee",
            int(election_id),
            int(round_id),
            [self.identities.address(m) for m in members],
            as_bytes32(seed_hash, what="seed hash"),
        )

    def propose_permission(
        self,
        node_id: str,
        old: int,
        new: int,
        reason: str,
        round_id: int,
        *,
        proposer: str | None = None,
    ) -> tuple[int, Receipt]:
        """Propose ⟨node, old, new, reason, round_id⟩ (Eq. 24) to the current committee.

        Returns:
            The proposal id and the receipt.
        """
        check_text("reason", reason)
        args = (self.identities.address(node_id), int(old), int(new), reason, int(round_id))
        receipt = self.transact(proposer or self.coordinator, "propose", *args)
        pid = next(e.proposal_id for e in receipt.events if isinstance(e, PermissionProposed))
        return pid, receipt

    def approve(self, proposal_id: int, member: str) -> Receipt:
        """Approve proposal ``proposal_id`` as committee member ``member``."""
        return self.transact(member, "approve", int(proposal_id))

    def cancel(self, proposal_id: int, by: str | None = None) -> Receipt:
        """Withdraw a pending proposal (its proposer or the coordinator)."""
        return self.transact(by or self.coordinator, "cancel", int(proposal_id))

    def fund(self, node_id: str) -> Receipt | None:
        """Top ``node_id``'s account up from the coordinator if it runs low; the receipt."""
        if node_id == self.coordinator:
            return None
        self._since_funded[node_id] = 0
        address = self.identities.address(node_id)
        balance = self.w3.eth.get_balance(to_checksum_address(address))
        if balance >= FUND_WEI // 10:
            return None
        return self._send(
            self.coordinator,
            "transfer",
            to=address,
            data=b"",
            value=FUND_WEI - balance,
            preflight=False,
        )

    def close(self) -> None:
        """Release what the backend holds (nothing here)."""

    def transact(self, sender: str, method: str, *args: Any) -> Receipt:
        """Call contract function ``method`` with ``args`` in a transaction signed by ``sender``.

        The typed methods above use it; it also lets any node attempt any call (the
        contract decides: an unauthorised one raises :class:`LedgerRevertError`). A node
        other than the coordinator is funded first if its balance runs low.
        """
        if sender != self.coordinator:
            count = self._since_funded.get(sender)
            if count is None or count >= FUND_CHECK_EVERY:
                self.fund(sender)
            self._since_funded[sender] = self._since_funded.get(sender, 0) + 1
        data = bytes.fromhex(self.contract.encode_abi(method, args=list(args))[2:])
        return self._send(sender, method, to=self.contract_address, data=data)

    # -- internals ---------------------------------------------------------------------

    def _send(
        self,
        sender: str,
        method: str,
        *,
        to: str | None,
        data: bytes,
        value: int = 0,
        preflight: bool = True,
    ) -> Receipt:
        t0 = time.perf_counter()
        self._before_send()
        account = self.identities.account(sender)
        gas = GAS_LIMITS.get(method, DEFAULT_GAS)
        call: dict[str, Any] = {"from": account.address, "data": data, "value": value, "gas": gas}
        if to is not None:
            call["to"] = to
        if preflight:
            try:
                self.w3.eth.call(cast(Any, call))
            except Exception as err:
                reason = revert_reason(err, self.revert_errors)
                if reason is None:
                    raise LedgerError(f"{method} by {sender}: the call failed: {err}") from err
                raise LedgerRevertError(method, sender, reason) from None
        nonce = self._nonces.get(account.address) if self.cache_nonces else None
        if nonce is None:
            nonce = self.w3.eth.get_transaction_count(account.address, "pending")
        tx = dict(
            call,
            chainId=self.chain_id,
            nonce=nonce,
            maxFeePerGas=self._max_fee_per_gas(),
            maxPriorityFeePerGas=PRIORITY_FEE_WEI,
        )
        del tx["from"]
        raw = bytes(account.sign_transaction(tx).raw_transaction)
        try:
            rc = self._submit_raw(raw)
        except Exception:
            self._nonces.pop(account.address, None)  # re-read from the chain next time
            raise
        self._nonces[account.address] = nonce + 1
        receipt = self._receipt(method, sender, rc, time.perf_counter() - t0)
        self._record(raw, receipt)
        if receipt.status != 1:
            raise LedgerRevertError(method, sender, f"mined with status 0 in {receipt.tx_hash}")
        return receipt

    def _submit_raw(self, raw: bytes) -> dict[str, Any]:
        """Send a signed transaction and return its receipt once mined."""
        try:
            tx_hash = self.w3.eth.send_raw_transaction(raw)
        except Exception as err:
            raise LedgerError(f"the node refused the transaction: {err}") from err
        deadline = time.monotonic() + self.receipt_timeout_s
        delay = 0.001
        while True:
            try:
                return cast(dict[str, Any], self.w3.eth.get_transaction_receipt(tx_hash))
            except TransactionNotFound:
                if time.monotonic() > deadline:
                    raise LedgerError(
                        f"transaction {to_hex(tx_hash)} not mined within "
                        f"{self.receipt_timeout_s:.0f}s"
                    ) from None
                time.sleep(delay)
                delay = min(2 * delay, 0.05)

    def _receipt(self, method: str, sender: str, rc: dict[str, Any], latency: float) -> Receipt:
        events = self.decoder.decode_logs(rc["logs"])
        self._index_logs(rc["logs"])
        created = rc.get("contractAddress")
        return Receipt(
            method=method,
            sender=sender,
            tx_hash=to_hex(rc["transactionHash"]),
            block_number=int(rc["blockNumber"]),
            block_hash=to_hex(rc["blockHash"]),
            gas_used=int(rc["gasUsed"]),
            status=int(rc["status"]),
            latency_s=latency,
            events=events,
            contract_address=str(created) if created else None,
        )

    def _max_fee_per_gas(self) -> int:
        """Fee cap of the next transaction: twice the latest base fee plus the tip."""
        base_fee = int(self.w3.eth.get_block("latest")["baseFeePerGas"])
        return 2 * base_fee + PRIORITY_FEE_WEI

    def _before_send(self) -> None:
        """Hook: refuse to write (a read-only backend raises)."""

    def _record(self, raw: bytes, receipt: Receipt) -> None:
        """Hook: persist a mined transaction (the embedded backend's log)."""
