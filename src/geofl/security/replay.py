"""Receiver-side sliding replay window over message counters (003 §2.1.8).

The anti-replay window of IPsec (RFC 4303 §3.4.3): the receiver keeps the highest counter
accepted so far and a bitmap of which of the ``size`` counters below it were seen. A
counter above the highest is new (the window slides); one inside the window is new unless
its bit is set (a replay); one below the window is too old to tell and is refused
(reordered beyond the window). :meth:`ReplayWindow.check` only looks; the caller calls
:meth:`ReplayWindow.commit` after the message authenticated, so a forged message can
neither advance the window nor burn a counter.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ReplayVerdict", "ReplayWindow"]


class ReplayVerdict(StrEnum):
    """What the window says of a counter."""

    FRESH = "fresh"
    REPLAYED = "replayed"
    TOO_OLD = "too_old"


class ReplayWindow:
    """Highest accepted counter plus a ``size``-bit bitmap of the counters below it.

    Args:
        size: Window width W ≥ 1: counters in ``(highest − W, highest]`` are remembered.
    """

    def __init__(self, size: int = 64) -> None:
        if size < 1:
            raise ValueError(f"replay window size: {size}; use a width of at least 1")
        self.size = size
        self.highest = -1
        self._bits = 0  # bit j set ⇔ counter (highest − j) was accepted
        self._mask = (1 << size) - 1

    def check(self, counter: int) -> ReplayVerdict:
        """Whether ``counter`` would be accepted, without recording it."""
        if counter > self.highest:
            return ReplayVerdict.FRESH
        offset = self.highest - counter
        if offset >= self.size:
            return ReplayVerdict.TOO_OLD
        return ReplayVerdict.REPLAYED if (self._bits >> offset) & 1 else ReplayVerdict.FRESH

    def commit(self, counter: int) -> None:
        """Record an authenticated ``counter`` (which :meth:`check` found fresh)."""
        if counter > self.highest:
            shift = counter - self.highest
            self._bits = ((self._bits << shift) | 1) & self._mask if shift < self.size else 1
            self.highest = counter
        else:
            self._bits |= 1 << (self.highest - counter)
