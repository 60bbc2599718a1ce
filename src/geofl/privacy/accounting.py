"""The accountant protocol: every private release is recorded and composed per client.

Implementations wrap ``dp_accounting`` (RDP and PLD) and arrive with the first private
mechanism (000 Eq. 5–8, 001 Eq. 19–21); the engine reports ε per client and the maximum.
"""

from __future__ import annotations

from typing import Any, Protocol

from geofl.registry import Registry

__all__ = ["ACCOUNTANTS", "Accountant"]


class Accountant(Protocol):
    """Composes the private releases of each client and answers ε for a given δ."""

    def record(self, client_id: int, event: Any) -> None:
        """Add one private release (a ``dp_accounting`` DpEvent) to the client's ledger."""
        ...

    def epsilon(self, client_id: int, delta: float) -> float:
        """ε(δ) of everything the client has released so far."""
        ...


#: Accountant registry (populated by the privacy mechanisms' modules).
ACCOUNTANTS: Registry[Accountant] = Registry("accountant")
