"""Hashes the ledger commits: keccak-256 of canonical JSON or of raw bytes.

A rule commitment is the hash of a resolved config plus its governance rules, an
aggregation commitment the hash of a model and of its update set. Hashing canonical JSON
(sorted keys, no whitespace, UTF-8, no NaN) makes the hash independent of key order and
formatting, so an auditor recomputes it from the stored config.
"""

from __future__ import annotations

import json
from typing import Any

from eth_hash.auto import keccak

__all__ = ["Hash32", "as_bytes32", "canonical_json", "hash_bytes", "hash_json", "to_hex"]

#: A 32-byte hash given as bytes or as (optionally ``0x``-prefixed) hex.
Hash32 = bytes | str


def canonical_json(obj: Any) -> bytes:
    """``obj`` as canonical JSON bytes: sorted keys, compact separators, UTF-8.

    Raises:
        ValueError: if ``obj`` holds NaN or infinity.
        TypeError: if ``obj`` holds a value JSON cannot encode.
    """
    text = json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def hash_bytes(data: bytes) -> str:
    """Keccak-256 of ``data`` as ``0x`` hex."""
    return to_hex(keccak(bytes(data)))


def hash_json(obj: Any) -> str:
    """Keccak-256 of the canonical JSON of ``obj`` as ``0x`` hex."""
    return hash_bytes(canonical_json(obj))


def to_hex(data: bytes) -> str:
    """``0x``-prefixed lowercase hex of ``data``."""
    return "0x" + bytes(data).hex()


def as_bytes32(value: Hash32, *, what: str = "hash") -> bytes:
    """``value`` as exactly 32 bytes.

    Raises:
        ValueError: naming ``what`` if ``value`` is not 32 bytes or 64 hex digits.
    """
    if isinstance(value, str):
        digits = value[2:] if value[:2] in ("0x", "0X") else value
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            raise ValueError(f"{what}: {value!r} is not hex") from None
    else:
        raw = bytes(value)
    if len(raw) != 32:
        raise ValueError(f"{what}: expected 32 bytes, got {len(raw)}")
    return raw
