"""The batch store the accumulators keep a split's batches in."""

from __future__ import annotations

import pytest
import torch

from geofl.tasks import common
from geofl.tasks.common import BatchStore


def test_batch_store_take_forgets_pending_batches_and_says_when_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common, "FLUSH_ENTRIES", 10)
    store = BatchStore(owns_loss=True)
    assert not store.add(torch.zeros(3, 2), torch.zeros(3), None)  # 6 entries pending
    assert store.add(torch.ones(2, 2), torch.ones(2), None)  # 10: reduce now
    assert store.pending
    outputs, targets = store.take()
    assert outputs.shape == (5, 2) and targets.tolist() == [0, 0, 0, 1, 1]
    assert (store.n, store.pending, store.pending_entries) == (5, False, 0)
    weights = torch.ones(4, 1, requires_grad=True)
    store.add(weights * 2, torch.zeros(4), None)  # kept detached
    outputs, _ = store.take()
    assert not outputs.requires_grad and store.n == 9
    with pytest.raises(ValueError, match="no batches"):
        store.take()
