"""Hostile inputs for ``geofl predict`` tests: lying TIFF headers, and guards that keep a
regression from eating the machine (a memory cap) or hanging the suite (a thread timeout)."""

from __future__ import annotations

import os
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

#: TIFF field types: SHORT (2 bytes) and LONG (4 bytes).
_SHORT, _LONG = 3, 4


def header_only_tiff(
    width: int, height: int, *, bits: int = 16, samples: int = 1, sample_format: int = 1
) -> bytes:
    """A little-endian TIFF whose one IFD claims ``width × height`` pixels over two bytes.

    The header is complete (one strip of ``height`` rows, uncompressed, MINISBLACK), so a
    reader that trusts it allocates ``width × height × samples × bits / 8`` bytes before it
    notices the data is missing: 100000 × 100000 uint16 asks for 18.6 GiB from 124 bytes.

    Args:
        width: ImageWidth.
        height: ImageLength (and RowsPerStrip).
        bits: BitsPerSample.
        samples: SamplesPerPixel.
        sample_format: SampleFormat (1 unsigned, 2 signed, 3 float).
    """
    tags = [
        (256, _LONG, width),
        (257, _LONG, height),
        (258, _SHORT, bits),
        (259, _SHORT, 1),
        (262, _SHORT, 1),
        (273, _LONG, 8),
        (277, _SHORT, samples),
        (278, _LONG, height),
        (279, _LONG, 2),
        (339, _SHORT, sample_format),
    ]
    ifd = struct.pack("<H", len(tags))
    for tag, kind, value in tags:
        packed = struct.pack("<HH", value, 0) if kind == _SHORT else struct.pack("<I", value)
        ifd += struct.pack("<HHI", tag, kind, 1) + packed
    return b"II*\0" + struct.pack("<I", 10) + b"\0\0" + ifd + struct.pack("<I", 0)


def header_only_png(width: int, height: int) -> bytes:
    """An 8-bit RGB PNG of ``width × height`` pixels with no image data (IHDR and IEND)."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(tag + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


@contextmanager
def memory_cap(headroom: int = 2 << 30) -> Iterator[None]:
    """Cap this process's address space at its current size plus ``headroom`` bytes (Linux).

    A regression that trusts a lying header then fails fast with a ``MemoryError`` instead of
    swapping the shared test machine to death; the old limit is restored on exit.
    """
    if not sys.platform.startswith("linux"):
        pytest.skip("the address-space cap is Linux-only")
    import resource

    with open("/proc/self/statm") as fh:
        used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + headroom
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def call_with_fifo_timeout(fifo: Path, call: Callable[[], T], seconds: float = 60.0) -> T:
    """``call()`` in a thread; if it is still running after ``seconds``, fail the test.

    A reader blocked in ``open(fifo)`` is released by opening the write end (and closing it,
    so it reads end-of-file) before failing, so no thread is left hanging.
    """
    box: dict[str, T] = {}
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as err:  # re-raised in the test's thread
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(seconds)
        pytest.fail(f"still blocked on the FIFO {fifo} after {seconds:.0f} s")
    if errors:
        raise errors[0]
    return box["result"]
