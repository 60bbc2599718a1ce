"""On-disk form of an embedded ledger: every signed transaction, in order.

::

    RUN_DIR/ledger/
      meta.json            chain parameters: genesis, seed, coordinator, contract address
      transactions.jsonl   one record per mined transaction: the signed raw transaction
                           and the receipt seen (tx hash, block number and hash, gas, status)
      head.json            number of records and the last block hash (detects truncation)
      .lock                held by the process that writes the ledger

Every file is canonical JSON (sorted keys, lowercase hex), and loading insists on the
exact bytes it would write, so any edited byte is an error naming the file and record.
Whether the records are *true* is checked by replaying them into a fresh chain
(:mod:`geofl.governance.ledger.embedded`). ``meta.json`` and ``head.json`` are replaced
atomically; a record is appended with one ``write`` and flushed to disk (``fsync``)
before the head moves past it, so a crash leaves at most an incomplete last record or a
head one record behind, which :meth:`LedgerStore.repair` undoes.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from geofl.errors import LedgerError, LedgerIntegrityError
from geofl.governance.ledger.hashing import canonical_json
from geofl.io import atomic_write

__all__ = ["FORMAT", "LedgerStore", "TxRecord"]

FORMAT = "geofl-ledger/1"
META, LOG, HEAD, LOCK = "meta.json", "transactions.jsonl", "head.json", ".lock"


@dataclass(frozen=True)
class TxRecord:
    """One mined transaction as stored.

    Attributes:
        index: 0-based position in the log.
        method: Contract function, ``"deploy"`` or ``"transfer"``.
        sender: Node id that signed it.
        raw: The signed raw transaction, ``0x`` hex.
        tx_hash: Its hash.
        block_number: Block that included it.
        block_hash: Hash of that block.
        gas_used: Gas it used.
        status: 1 if it succeeded, 0 if it reverted.
    """

    index: int
    method: str
    sender: str
    raw: str
    tx_hash: str
    block_number: int
    block_hash: str
    gas_used: int
    status: int


_FIELDS = set(TxRecord.__dataclass_fields__)


def _meta_text(meta: dict[str, Any]) -> str:
    return json.dumps(meta, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _write_atomic(path: Path, text: str, *, sync: bool = True) -> None:
    data = text.encode("utf-8")
    atomic_write(path, lambda fh: fh.write(data), sync=sync)


class LedgerStore:
    """The files of one embedded ledger directory.

    Args:
        path: The ledger directory (``RUN_DIR/ledger``).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.count = 0
        self._lock_fd: int | None = None
        self._valid_bytes = 0
        self._head_behind = False
        self._head: dict[str, Any] = {}
        self._records: list[TxRecord] = []

    def _file(self, name: str) -> str:
        return str(self.path / name)

    # -- writing -----------------------------------------------------------------------

    def lock(self) -> None:
        """Take the directory's write lock.

        Raises:
            LedgerError: if another process holds it.
        """
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LedgerError(f"{self.path} is open for writing in another process") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the write lock (no-op if not held)."""
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def create(self, meta: dict[str, Any]) -> None:
        """Start a new ledger directory with ``meta`` and an empty log.

        Raises:
            LedgerError: if the directory already holds a ledger.
        """
        if (self.path / META).exists() or (self.path / LOG).exists():
            raise LedgerError(f"{self.path} already holds a ledger; open it instead")
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock()
        (self.path / LOG).touch()
        _write_atomic(self.path / META, _meta_text(dict(meta, format=FORMAT)))
        self._write_head(None)

    def append(self, record: TxRecord) -> None:
        """Append ``record`` (its index must be the next one), then move the head."""
        if record.index != self.count:
            raise LedgerError(f"record index {record.index}, expected {self.count}")
        line = canonical_json(asdict(record)) + b"\n"
        fd = os.open(self.path / LOG, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.count += 1
        self._write_head(record)

    def _write_head(self, last: TxRecord | None) -> None:
        head = {
            "transactions": self.count,
            "block_number": last.block_number if last else 0,
            "block_hash": last.block_hash if last else "",
        }
        # Not fsynced: the log is, and a head left behind by a crash is repaired on open.
        _write_atomic(self.path / HEAD, _meta_text(head), sync=False)

    # -- reading -----------------------------------------------------------------------

    def _read_json(self, name: str) -> dict[str, Any]:
        try:
            text = (self.path / name).read_text(encoding="utf-8")
            data = json.loads(text)
        except FileNotFoundError:
            raise LedgerIntegrityError(self._file(name), -1, "missing") from None
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise LedgerIntegrityError(self._file(name), -1, f"unreadable: {err}") from None
        if not isinstance(data, dict) or _meta_text(data) != text:
            raise LedgerIntegrityError(self._file(name), -1, "not in canonical form (edited?)")
        return data

    def load_meta(self) -> dict[str, Any]:
        """``meta.json``, checked for canonical form and format."""
        meta = self._read_json(META)
        if meta.get("format") != FORMAT:
            raise LedgerIntegrityError(
                self._file(META), -1, f"format {meta.get('format')!r}, expected {FORMAT!r}"
            )
        return meta

    def load(self) -> tuple[dict[str, Any], list[TxRecord]]:
        """Meta and every record, checked for form and order (the head: :meth:`check_head`).

        Two states an interrupted writer leaves are accepted (they cannot come from a
        single edited byte): an incomplete record after the last one the head counts
        (dropped; see :meth:`repair`), and one complete record beyond the head when the
        head still matches the record before it (the head is moved when repaired).

        Raises:
            LedgerIntegrityError: naming the file and record at fault.
        """
        meta = self.load_meta()
        try:
            data = (self.path / LOG).read_bytes()
        except OSError as err:
            raise LedgerIntegrityError(self._file(LOG), -1, f"unreadable: {err}") from None
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" unless the last record is incomplete
        records = [self._parse(i, line) for i, line in enumerate(lines)]
        head = self._read_json(HEAD)
        count = head.get("transactions")
        if torn and len(records) != count:
            raise LedgerIntegrityError(self._file(LOG), len(records), "incomplete record")
        self._head, self._records = head, records
        self.count = len(records)
        self._valid_bytes = len(data) - len(torn)
        return meta, records

    def check_head(self) -> None:
        """Check the head against the records :meth:`load` read (after replaying them).

        Raises:
            LedgerIntegrityError: if the head counts more records than the log holds, or
                more than one fewer, or does not match the record it counts last.
        """
        head, records = self._head, self._records
        count = head.get("transactions")
        if not isinstance(count, int) or not 0 <= count <= len(records) <= count + 1:
            raise LedgerIntegrityError(
                self._file(HEAD),
                -1,
                f"counts {count!r} transactions, the log holds {len(records)} "
                "(truncated or extended log?)",
            )
        last = records[count - 1] if count else None
        expected = {
            "transactions": count,
            "block_number": last.block_number if last else 0,
            "block_hash": last.block_hash if last else "",
        }
        if head != expected:
            raise LedgerIntegrityError(
                self._file(HEAD), -1, f"does not match record {count - 1} of the log"
            )
        self._head_behind = len(records) != count

    def repair(self) -> bool:
        """Drop an incomplete last record and move a lagging head (after :meth:`load`).

        Returns:
            Whether anything was repaired.
        """
        repaired = False
        log = self.path / LOG
        if log.stat().st_size != self._valid_bytes:
            os.truncate(log, self._valid_bytes)
            repaired = True
        if self._head_behind:
            last = self._parse(self.count - 1, log.read_bytes().split(b"\n")[-2])
            self._write_head(last)
            self._head_behind, repaired = False, True
        return repaired

    def _parse(self, index: int, line: bytes) -> TxRecord:
        try:
            obj = json.loads(line)
        except (UnicodeDecodeError, ValueError) as err:
            raise LedgerIntegrityError(self._file(LOG), index, f"not JSON: {err}") from None
        if not isinstance(obj, dict) or set(obj) != _FIELDS:
            raise LedgerIntegrityError(self._file(LOG), index, "unexpected fields")
        if canonical_json(obj) != line:
            raise LedgerIntegrityError(self._file(LOG), index, "not in canonical form (edited?)")
        try:
            record = TxRecord(**obj)
            types_ok = all(
                isinstance(
                    getattr(record, f),
                    int if f in {"index", "block_number", "gas_used", "status"} else str,
                )
                for f in _FIELDS
            )
        except TypeError as err:
            raise LedgerIntegrityError(self._file(LOG), index, str(err)) from None
        if not types_ok or record.index != index:
            raise LedgerIntegrityError(
                self._file(LOG), index, f"bad field types or index {obj.get('index')!r}"
            )
        return record
