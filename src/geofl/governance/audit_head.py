"""A governed run's chain head, and the check against a head anchored elsewhere (000 §3.5.1).

An embedded chain lives in the run directory it vouches for, and its node keys derive
from the run seed: whoever holds the directory can drop its last rounds or rebuild it
whole, and the result replays as well as the original. The hash of the chain's last
block (its *head*) commits to every block before it (each block names its parent's
hash), so a head published where the directory's holder cannot rewrite it (another
node, a notary, a signed message) pins the chain: ``geofl ledger verify --expect-head``
then requires that this chain ends at exactly that block.

The head of an embedded ledger is its latest block (``ledger/head.json``, checked by the
replay); on a JSON-RPC node, whose blocks other contracts share, it is the block of the
contract's latest event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from web3.exceptions import BlockNotFound

from geofl.errors import GovernanceError
from geofl.governance.audit_chain import Finding
from geofl.governance.audit_read import _short
from geofl.governance.ledger import EmbeddedLedger, Ledger, Web3Ledger
from geofl.governance.ledger.hashing import to_hex
from geofl.governance.subscriber import LEDGER_DIR

__all__ = ["ChainHead", "chain_head", "check_head", "parse_head"]

_HASH = re.compile(r"(?:0[xX])?([0-9a-fA-F]{64})")


@dataclass(frozen=True)
class ChainHead:
    """The last block of a governed run's chain: what to anchor elsewhere.

    Attributes:
        block_number: Its number.
        block_hash: Its hash, ``0x`` and 64 lower-case hex digits.
    """

    block_number: int
    block_hash: str

    def __str__(self) -> str:
        return f"block {self.block_number} {self.block_hash}"


def parse_head(text: str, option: str = "--expect-head") -> str:
    """A block hash as given by a user (``0x`` optional, any case), in the chain's form.

    Raises:
        GovernanceError: naming ``option`` if ``text`` is not 64 hex digits.
    """
    match = _HASH.fullmatch(text.strip())
    if match is None:
        raise GovernanceError(
            f"{option}: {text!r} is not a block hash; give the 0x and 64 hex digits that "
            "`geofl ledger verify` printed after 'head:'"
        )
    return "0x" + match.group(1).lower()


def chain_head(ledger: Ledger) -> ChainHead | None:
    """The head of ``ledger``'s chain; ``None`` for a backend without blocks or events."""
    if not isinstance(ledger, Web3Ledger):
        return None
    if isinstance(ledger, EmbeddedLedger):
        block = ledger.w3.eth.get_block("latest")
    else:
        numbers = [n for blocks in ledger.event_blocks().values() for n in blocks]
        if not numbers:
            return None
        block = ledger.w3.eth.get_block(max(numbers))
    return ChainHead(int(block["number"]), to_hex(block["hash"]))


def _block_number(ledger: Ledger, block_hash: str) -> int | None:
    """The number of the block with ``block_hash`` on ``ledger``'s chain, if there is one."""
    if not isinstance(ledger, Web3Ledger):
        return None
    try:
        return int(ledger.w3.eth.get_block(block_hash)["number"])  # type: ignore[arg-type]
    except BlockNotFound:
        return None


def check_head(ledger: Ledger, head: ChainHead | None, expected: str) -> list[Finding]:
    """The chain must end at the block ``expected`` (a hash from :func:`parse_head`).

    A chain that goes on past it had blocks added after the anchor was taken; a chain
    without it was rolled back or rewritten (or the anchor is another run's).
    """
    if head is not None and head.block_hash == expected:
        return []
    if head is None:
        return [Finding(LEDGER_DIR, f"holds no block; the anchored head is {_short(expected)}")]
    anchored = _block_number(ledger, expected)
    if anchored is None or anchored > head.block_number:
        what = (
            f"the anchored head {_short(expected)} is not on this chain, which ends at "
            f"block {head.block_number} {_short(head.block_hash)}: rolled back or rewritten "
            "(or the anchor is another run's)"
        )
    else:
        what = (
            f"the chain goes on past the anchored head (block {anchored}) to block "
            f"{head.block_number} {_short(head.block_hash)}: blocks {anchored + 1}–"
            f"{head.block_number} were added after the anchor was taken and are not covered "
            "by the anchor"
        )
    return [Finding(LEDGER_DIR, what)]
