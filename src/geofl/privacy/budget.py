"""A client's ε from its own ledger (the DpEvent specs of everything it released).

The client step (:mod:`geofl.client.step`) calls :func:`ledger_epsilon` through the
``ClientPrivacy`` the engine gives it: after each round it reports ε(δ), and before a round
it declines if its planned release would take ε past ``privacy.target_epsilon``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from geofl.privacy.accounting import ACCOUNTANTS, dp_event_from_spec

__all__ = ["ledger_epsilon"]


def ledger_epsilon(
    events: Iterable[Mapping[str, Any]],
    *,
    accountant: str,
    params: Mapping[str, Any],
    delta: float,
) -> float:
    """ε(δ) of one client's ledger, composed by a fresh accountant.

    Args:
        events: The ledger's event specs (:func:`~geofl.privacy.accounting.dp_event_from_spec`).
        accountant: Accountant registry key (``rdp``, ``pld``).
        params: Its parameters.
        delta: δ.
    """
    acc = ACCOUNTANTS.build(accountant, params)
    for spec in events:
        acc.record(0, dp_event_from_spec(spec))
    return acc.epsilon(0, delta)
