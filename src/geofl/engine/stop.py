"""Stopping a run cleanly: SIGINT and SIGTERM end it after the current round's durable write.

While :meth:`StopRequest.install` is active, the first SIGINT or SIGTERM only *requests* a
stop; the run loop finishes the round it is in (record appended, checkpoint written, client
state committed) and then raises :class:`~geofl.errors.RunStopped`, which the CLI turns into
one line: ``stopped after round N; resume with: …``. A second SIGINT interrupts at once
(KeyboardInterrupt), as users expect of Ctrl-C pressed twice.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["StopRequest"]


class StopRequest:
    """A flag set by a signal and polled by the run loop between rounds.

    Attributes:
        signum: The signal that asked for the stop, or None.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None

    def request(self, signum: int) -> None:
        """Ask for a stop (what the signal handler does)."""
        self.signum = signum

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.request(signum)

    @contextmanager
    def install(self) -> Iterator[StopRequest]:
        """Route SIGINT and SIGTERM to this request while the block runs (main thread only;
        elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, self._handle)
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
