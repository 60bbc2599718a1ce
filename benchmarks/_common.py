"""Shared helpers of the benchmark scripts: header line, repeated timing, plain-text tables.

Not a benchmark itself. Every ``bench_*.py`` script imports it (the scripts run as
``python benchmarks/<name>.py``, which puts this folder on ``sys.path``). Timings use
``time.perf_counter``; a measurement is warm-up calls followed by several timed repeats,
summarised by the median (robust to the load spikes of a machine shared with other jobs).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["fmt", "header", "median_time", "print_table", "set_threads"]


def set_threads(n: int) -> None:
    """Use ``n`` intra-op threads (and one inter-op thread) for torch."""
    torch.set_num_threads(n)


def header(name: str, args: object) -> None:
    """Print one line identifying the run: script, torch, threads, CPUs, load, arguments."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"== {name} | torch {torch.__version__} | threads {torch.get_num_threads()} | "
        f"cpus {os.cpu_count()} | load avg {load} | python {platform.python_version()}"
    )
    print(f"   args: {vars(args) if hasattr(args, '__dict__') else args}")


def median_time(
    fn: Callable[[], Any], *, repeats: int, warmup: int = 1, number: int = 1
) -> tuple[float, list[float]]:
    """Median seconds per call of ``fn`` and the per-call time of every repeat.

    Args:
        fn: The call to time.
        repeats: Timed repeats (the median is taken over these).
        warmup: Untimed calls first (allocator, caches, lazy init).
        number: Calls per repeat; each repeat's time is divided by it.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times), times


def fmt(value: Any, digits: int = 3) -> str:
    """Format a number with ``digits`` significant digits (ints and strings unchanged)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0.0:
            return "0"
        if abs(value) >= 10 ** (digits + 2) or abs(value) < 10 ** -(digits + 1):
            return f"{value:.{digits - 1}e}"
        return f"{value:,.{max(0, digits - 1 - _magnitude(value))}f}"
    return str(value)


def _magnitude(value: float) -> int:
    out, v = 0, abs(value)
    while v >= 10:
        v /= 10
        out += 1
    while v < 1:
        v *= 10
        out -= 1
    return out


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> None:
    """Print ``rows`` as an aligned plain-text table (numbers right-aligned)."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int | float) for row in rows) for i in range(len(headers))]
    if title:
        print(f"\n{title}")

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    print(line(headers))
    print(line(["-" * w for w in widths]))
    for r in cells:
        print(line(r))
