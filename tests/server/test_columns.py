"""Column-blocked passes (:mod:`geofl.server.columns`) against the plain products, with
blocks, worker threads and epilogue chunks forced small: outputs written into given rows,
the epilogue covering every column once after they are written, float64 squared norms."""

from __future__ import annotations

import itertools
import threading

import pytest
import torch

from geofl.server import columns


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "BLOCK_BYTES", 7 * 4 * 256)  # 256-column blocks at K = 7
    monkeypatch.setattr(columns, "MIN_COLUMNS_PER_WORKER", 700)
    monkeypatch.setattr(columns, "EPILOGUE_COLUMNS", 600)  # chunks of 512 columns


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.usefixtures("small_blocks")
def test_linear_combinations_write_into_rows_and_run_the_epilogue_once_per_column(
    threads: int, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both paths: torch's blocked products and the compiled kernels (chunks of
    ``EPILOGUE_COLUMNS`` = 600 columns there, of whole 256-column blocks here)."""
    if compiled:
        monkeypatch.setattr(columns, "FUSED_MIN_BYTES", 0)
        monkeypatch.setattr(columns, "FUSED_COLUMNS", 256)
    gen = torch.Generator().manual_seed(3)
    u = torch.randn(7, 3001, generator=gen)
    coeffs = torch.rand(2, 7, generator=gen, dtype=torch.float64)
    out = [torch.full((3001,), float("nan")), torch.full((3001,), float("nan"))]
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def epilogue(lo: int, hi: int) -> None:
        # the chunk's columns are written before the epilogue sees them
        assert not bool(out[0][lo:hi].isnan().any() or out[1][lo:hi].isnan().any())
        with lock:
            seen.append((lo, hi))

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rows = columns.linear_combinations(coeffs, u, out, epilogue)
    finally:
        torch.set_num_threads(before)
    assert rows[0] is out[0] and rows[1] is out[1]
    expected = coeffs.float() @ u
    assert torch.allclose(out[0], expected[0], atol=1e-5)
    assert torch.allclose(out[1], expected[1], atol=1e-5)
    spans = sorted(seen)
    assert spans[0][0] == 0 and spans[-1][1] == 3001
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # disjoint, no gap
    assert max(hi - lo for lo, hi in spans) == (600 if compiled else 512)
    if threads == 2:  # two worker ranges, the second from a multiple of 256 columns
        assert 1280 in {lo for lo, _ in spans}


@pytest.mark.usefixtures("small_blocks")
def test_squared_norm_sums_in_float64_without_a_float64_copy() -> None:
    v = torch.full((2001,), 3.0)
    v[0] = 1e-4  # its square is lost next to the others in a float32 sum
    torch.set_num_threads(2)
    try:
        sq = columns.squared_norm(v)
    finally:
        torch.set_num_threads(1)
    assert sq == 2000 * 9.0 + float(torch.tensor(1e-4)) ** 2
    assert columns.squared_norm(torch.zeros(0)) == 0.0
