"""The batch store and the blockwise sums the owning accumulators (binary, regression) use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofl.tasks import common
from geofl.tasks.common import GRAIN_SIZE, BatchStore, block_sums, runs


def test_runs_by_hand() -> None:
    assert runs([256, 256, 256, 100]) == [(0, 256, 3), (768, 100, 1)]
    assert runs([3, 5, 5, 3]) == [(0, 3, 1), (3, 5, 2), (13, 3, 1)]
    assert runs([]) == []


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("sizes", "width"),
    [
        ([256] * 8, 1),
        ([256] * 7 + [37], 3),
        ([1, 7, 7, 64, 64, 3], 5),
        ([GRAIN_SIZE, GRAIN_SIZE + 1, GRAIN_SIZE + 1, 9], 1),  # blocks too big for one row
        ([4096] * 9 + [999], 3),
    ],
)
def test_block_sums_equal_each_block_summed_by_torch(
    sizes: list[int], width: int, dtype: type, threads: int
) -> None:
    """One ``[k, w]`` reduction per run gives each block's own ``torch.sum`` to the bit,
    below torch's grain size (one thread per row) and above it (summed block by block,
    as a lone block's sum is split across threads there)."""
    rng = np.random.default_rng(sum(sizes) + width)
    values = (rng.standard_normal((sum(sizes), width)) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = block_sums(values, sizes)
        blocks = torch.from_numpy(values).split(sizes)
        want = [float(block.sum()) for block in blocks]
    finally:
        torch.set_num_threads(before)
    assert got == want


def test_batch_store_take_forgets_pending_batches_and_says_when_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common, "FLUSH_ENTRIES", 10)
    store = BatchStore(owns_loss=True)
    assert not store.add(torch.zeros(3, 2), torch.zeros(3), None)  # 6 entries pending
    assert store.add(torch.ones(2, 2), torch.ones(2), None)  # 10: reduce now
    outputs, targets, sizes = store.take()
    assert outputs.shape == (5, 2) and targets.tolist() == [0, 0, 0, 1, 1] and sizes == [3, 2]
    assert (store.n, store.sizes, store.pending_entries) == (5, [], 0)
    weights = torch.ones(4, 1, requires_grad=True)
    store.add(weights * 2, torch.zeros(4), None)  # kept detached
    outputs, _, _ = store.take()
    assert not outputs.requires_grad and store.n == 9
    with pytest.raises(ValueError, match="no batches"):
        store.take()
