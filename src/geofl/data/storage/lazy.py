"""Samples that stay on disk: rows of a store array read per mini-batch as float32 tensors.

:class:`StoredRows` stands where an in-memory ``[N, C, …]`` float32 tensor would: it has a
``shape``, a length, and indexing with a batch's indices (or a slice) returns the float32
tensor of exactly those rows — so a trainer's ``data.inputs[idx]`` and an evaluation's
``inputs[lo:hi]`` work unchanged. Selecting rows (a split, a client's share), bands or a
standardisation returns a new *view* that holds only indices and constants; nothing is read
until a batch is asked for.

A batch is read with one ``os.preadv`` per run of consecutive rows, in file order (indices
sorted, then put back in batch order). ``benchmarks/bench_store_read.py`` measured this
against ``np.memmap`` fancy indexing and zarr v3 (random batches of 64 × 13×64×64): pread
and the memmap are as fast as indexing the in-memory tensor (0.6-0.9× its time), sorting
the indices saves a third of a memmap read, and zarr was 9-115× slower (per-chunk
overhead), so the store is a plain ``.npy`` per array (memory-mappable, no dependency).
Unlike a mapping, reads leave no resident pages in the process: its RSS stays at the batch
it holds whatever the size of the store (the page cache, which the kernel can drop, keeps
recently read rows).

Values are bit-identical to the in-memory path: the raw value is converted to float32,
divided by the loader's ``scale`` and standardised with ``sub_(mean).div_(std)``, the same
element-wise float32 operations the in-memory path applies to the whole tensor.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from geofl.errors import DataError

__all__ = ["EXACT_STATS_BYTES", "StoredRows"]

#: Train splits up to this many float32 bytes get their standardisation statistics from
#: the same torch reductions as the in-memory path (bit-identical); larger ones stream.
EXACT_STATS_BYTES = 512 << 20
#: Rows per chunk when streaming through a split (statistics, materialising).
CHUNK_ROWS = 512
#: Buffers per ``preadv`` call (Linux IOV_MAX is 1024).
MAX_IOV = 512


class _File:
    """One open read-only file descriptor, closed when the last view is collected."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY)
        weakref.finalize(self, os.close, self.fd)


@dataclass(frozen=True, eq=False)
class StoredRows:
    """A lazily read ``[n, C, …]`` float32 view of rows of an on-disk ``[N, C, …]`` array.

    Attributes:
        source: The store's array (a read-only ``np.memmap``; gives shape, dtype and the
            file's byte offset; its pages are never touched by batch reads).
        rows: ``[n]`` int64 indices into ``source`` (None: all rows in order).
        channels: Indices into ``source``'s axis 1 to keep, in order (None: all).
        scale: Divisor from stored values to the float32 scale (e.g. 10000 for uint16
            reflectance, 255 for 8-bit images, 1 for float data).
        mean: ``[1, C, 1, …]`` float32 subtracted after scaling (None: no standardisation).
        std: ``[1, C, 1, …]`` float32 divisor after ``mean`` (set together with ``mean``).
    """

    source: np.ndarray
    rows: np.ndarray | None = None
    channels: np.ndarray | None = None
    scale: float = 1.0
    mean: torch.Tensor | None = None
    std: torch.Tensor | None = None
    _file: _File | None = None

    def __post_init__(self) -> None:
        if self._file is None:
            filename = getattr(self.source, "filename", None)
            if filename is None:
                raise TypeError("StoredRows needs a file-backed np.memmap source")
            object.__setattr__(self, "_file", _File(Path(filename)))

    # --- what an in-memory tensor also has -------------------------------------------

    @property
    def shape(self) -> torch.Size:
        """``[n, C, …]`` of the float32 rows this view yields."""
        n = self.source.shape[0] if self.rows is None else len(self.rows)
        c = self.source.shape[1] if self.channels is None else len(self.channels)
        return torch.Size((n, c, *self.source.shape[2:]))

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return int(self.source.ndim)

    @property
    def dtype(self) -> torch.dtype:
        """Always float32 (the dtype of the tensors it yields)."""
        return torch.float32

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, index: torch.Tensor | np.ndarray | slice) -> torch.Tensor:
        """Read the rows at ``index`` (``[b]`` ints or a slice) → ``[b, C, …]`` float32."""
        if isinstance(index, slice):
            local = np.arange(len(self))[index]
        else:
            local = np.asarray(index, dtype=np.int64).reshape(-1)
        glob = local if self.rows is None else self.rows[local]
        x = torch.from_numpy(self._read(glob))
        if self.channels is not None:
            x = x[:, torch.from_numpy(self.channels)]
        x = x.to(torch.float32)
        if self.scale != 1.0:
            x.div_(self.scale)
        if self.mean is not None and self.std is not None:
            x.sub_(self.mean).div_(self.std)
        return x

    # --- views -------------------------------------------------------------------------

    def take(self, index: torch.Tensor | np.ndarray) -> StoredRows:
        """A view of the rows at ``index`` (``[m]`` ints into this view); reads nothing."""
        local = np.asarray(index, dtype=np.int64).reshape(-1)
        return replace(self, rows=local.copy() if self.rows is None else self.rows[local])

    def select_channels(self, channels: list[int]) -> StoredRows:
        """A view keeping ``channels`` (indices into this view's axis 1), in that order."""
        chan = np.asarray(channels, dtype=np.int64)
        if self.mean is not None:
            raise ValueError("select channels before standardising")
        return replace(self, channels=chan if self.channels is None else self.channels[chan])

    def standardized(self, mean: torch.Tensor, std: torch.Tensor) -> StoredRows:
        """A view yielding ``(x − mean) / std`` (``[1, C, 1, …]`` float32 each)."""
        return replace(self, mean=mean.to(torch.float32), std=std.to(torch.float32))

    # --- whole-split passes ------------------------------------------------------------

    def materialize(self) -> torch.Tensor:
        """Every row of the view as one in-memory ``[n, C, …]`` float32 tensor."""
        out = torch.empty(self.shape, dtype=torch.float32)
        for lo in range(0, len(self), CHUNK_ROWS):
            out[lo : lo + CHUNK_ROWS] = self[slice(lo, lo + CHUNK_ROWS)]
        return out

    def channel_mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel mean and sample std (clamped ≥ 1e-6), ``[1, C, 1, …]`` float32 each.

        Up to :data:`EXACT_STATS_BYTES` the view is materialised and reduced with the same
        torch calls as the in-memory path (bit-identical); beyond that it streams in chunks
        with float64 sums around a shift (agrees to float32 rounding, not bit for bit).
        """
        dims = (0, *range(2, self.ndim))
        if 4 * int(np.prod(self.shape)) <= EXACT_STATS_BYTES:
            x = self.materialize()
            mean = x.mean(dim=dims, keepdim=True)
            std = x.std(dim=dims, keepdim=True).clamp_min(1e-6)
            return mean, std
        shift: torch.Tensor | None = None
        total = torch.zeros(self.shape[1], dtype=torch.float64)
        squares = torch.zeros(self.shape[1], dtype=torch.float64)
        for lo in range(0, len(self), CHUNK_ROWS):
            x = self[slice(lo, lo + CHUNK_ROWS)]
            if shift is None:  # a shift near the mean keeps the sum of squares accurate
                shift = x.mean(dim=dims, keepdim=True)
            x.sub_(shift)
            total += x.sum(dim=dims, dtype=torch.float64)
            squares += x.square_().sum(dim=dims, dtype=torch.float64)
        assert shift is not None
        count = int(np.prod(self.shape)) // self.shape[1]
        centred = total / count
        var = (squares - count * centred * centred) / max(count - 1, 1)
        view = shift.shape
        mean = (centred.view(view) + shift.to(torch.float64)).to(torch.float32)
        std = var.clamp_min(0).sqrt().to(torch.float32).clamp_min(1e-6).view(view)
        return mean, std

    # --- reading -----------------------------------------------------------------------

    def _read(self, glob: np.ndarray) -> np.ndarray:
        """Raw ``[b, C_all, …]`` rows ``glob`` of ``source``, read in file order."""
        src = self.source
        out = np.empty((len(glob), *src.shape[1:]), dtype=src.dtype)
        if len(glob) == 0:
            return out
        if glob.min() < 0 or glob.max() >= src.shape[0]:
            raise IndexError(f"row index out of range for {src.shape[0]} stored rows")
        assert self._file is not None
        order = np.argsort(glob, kind="stable")
        ordered = glob[order]
        flat = out.reshape(len(glob), -1)
        row_bytes = flat.shape[1] * flat.itemsize
        base = int(getattr(src, "offset", 0))
        # one scatter read (preadv) per run of consecutive rows, ≤ MAX_IOV rows each
        cuts = np.flatnonzero(np.diff(ordered) != 1) + 1
        for run in np.split(np.arange(len(ordered)), cuts):
            for lo in range(0, len(run), MAX_IOV):
                part = run[lo : lo + MAX_IOV]
                dest = [memoryview(flat[i]).cast("B") for i in order[part]]
                _pread_all(self._file, dest, base + int(ordered[part[0]]) * row_bytes)
        return out

    def __repr__(self) -> str:
        return (
            f"StoredRows(shape={list(self.shape)}, file={self._file.path if self._file else None})"
        )


def _pread_all(file: _File, buffers: list[memoryview], offset: int) -> None:
    """Fill ``buffers`` from consecutive bytes of ``file`` at ``offset`` (short reads retried).

    Raises:
        DataError: naming the file when it ends early (truncated after it was opened).
    """
    if os.preadv(file.fd, buffers, offset) == sum(b.nbytes for b in buffers):
        return
    pos = offset
    for buf in buffers:
        filled = 0
        while filled < buf.nbytes:
            n = os.preadv(file.fd, [buf[filled:]], pos + filled)
            if n == 0:
                raise DataError(
                    f"cache store file {file.path} ends at byte {pos + filled}; delete its "
                    "store and run again to rebuild it"
                )
            filled += n
        pos += buf.nbytes
