"""Event queries of the governance ledger through an index of transactions per event type.

A log scan (``eth_getLogs``) over a whole chain is quadratic on py-evm, so the ledger keeps,
for every event type, the (block number, transaction hash) pairs that emitted it, filled
from the receipts it sees; a query reads only the receipts of the listed transactions.
Backends whose chain other writers extend add their transactions in :meth:`_sync_index`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, TypeVar, cast, overload

from web3 import Web3
from web3.contract import Contract

from geofl.governance.ledger.decode import EVENT_TYPES, EventDecoder
from geofl.governance.ledger.hashing import to_hex
from geofl.governance.ledger.identity import Identities
from geofl.governance.ledger.records import LedgerEvent
from geofl.governance.ledger.views import LedgerViews

__all__ = ["EventIndex"]

E = TypeVar("E", bound=LedgerEvent)


class EventIndex(LedgerViews):
    """State queries plus indexed event queries of one contract.

    Args:
        w3: Connected web3 instance.
        contract: The web3 contract.
        decoder: Event decoder of the contract.
        identities: Node accounts of the run.
        caller: Account the state queries are made from.
    """

    def __init__(
        self,
        w3: Web3,
        contract: Contract,
        decoder: EventDecoder,
        identities: Identities,
        caller: str,
    ) -> None:
        super().__init__(contract, decoder, identities, caller)
        self.w3 = w3
        self._index: dict[str, set[tuple[int, str]]] = {name: set() for name in EVENT_TYPES}

    @overload
    def events(
        self, kind: type[E], *, from_block: int = 0, to_block: int | None = None
    ) -> list[E]: ...

    @overload
    def events(
        self, kind: None = None, *, from_block: int = 0, to_block: int | None = None
    ) -> list[LedgerEvent]: ...

    def events(
        self,
        kind: type[LedgerEvent] | None = None,
        *,
        from_block: int = 0,
        to_block: int | None = None,
    ) -> list[Any]:
        """Contract events of type ``kind`` (all if ``None``) in blocks [from, to], in order.

        Reads only the receipts of the transactions the index lists for those types.
        """
        self._sync_index()
        last = to_block if to_block is not None else 1 << 62
        names = [n for n, t in EVENT_TYPES.items() if kind is None or issubclass(t, kind)]
        txs: set[tuple[int, str]] = set()
        for name in names:
            entries = sorted(self._index[name])
            lo = bisect.bisect_left(entries, (from_block, ""))
            hi = bisect.bisect_right(entries, (last, "\uffff"))
            txs.update(entries[lo:hi])
        out: list[LedgerEvent] = []
        for _, tx_hash in sorted(txs):
            out.extend(
                e for e in self.receipt_events(tx_hash) if kind is None or isinstance(e, kind)
            )
        return out

    def receipt_events(self, tx_hash: str) -> tuple[LedgerEvent, ...]:
        """The contract events of one mined transaction, decoded."""
        receipt = self.w3.eth.get_transaction_receipt(tx_hash)  # type: ignore[arg-type]
        return self.decoder.decode_logs(cast(Any, receipt)["logs"])

    def event_blocks(self) -> dict[str, list[int]]:
        """Block numbers holding each event type (the index the event queries use)."""
        self._sync_index()
        return {name: sorted({b for b, _ in v}) for name, v in self._index.items()}

    def _index_logs(self, logs: Sequence[Any]) -> None:
        for log in logs:
            name = self.decoder.event_name(log)
            if name is not None:
                tx_hash = to_hex(log["transactionHash"])
                self._index[name].add((int(log["blockNumber"]), tx_hash))

    def _sync_index(self) -> None:
        """Hook: add transactions other writers mined since the last query."""
