"""Only a malformed update moves a node to the watchlist (000 §3.5.3).

Found running ``paper003-composed``: the 003 uplink's held-back uploads (NQI below τ, the
checkpointer's gate) were counted as "update rejected by server validation", so the ledger
watchlisted 38 of 39 tractors that had done nothing wrong.
"""

from __future__ import annotations

from geofl.governance.process import validation_rejected
from geofl.records import Rejection, RejectionReason


def test_only_malformed_updates_count_as_rejected_by_validation() -> None:
    rejections = [
        Rejection(1, RejectionReason.MALFORMED, "non-finite values"),
        Rejection(2, RejectionReason.HELD_BACK, "NQI 0.31 < 0.5"),
        Rejection(3, RejectionReason.LOST_IN_TRANSIT),
        Rejection(4, RejectionReason.BUDGET_EXHAUSTED),
        Rejection(5, RejectionReason.MALFORMED, "shape"),
    ]
    assert validation_rejected(rejections) == {1, 5}
    assert validation_rejected([]) == set()
