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

__all__ = [
    "cpu_busy",
    "fmt",
    "footer",
    "header",
    "interleaved_medians",
    "median_time",
    "print_table",
    "set_threads",
]

#: Fraction of CPUs busy before the start above which the header prints a warning.
BUSY_WARNING = 0.2


def set_threads(n: int) -> None:
    """Use ``n`` intra-op threads for torch."""
    torch.set_num_threads(n)


def cpu_busy(interval: float = 0.5) -> float | None:
    """Fraction of all CPUs busy during ``interval`` seconds (Linux ``/proc/stat``), or None.

    Called before a benchmark starts its work, it measures what *other* processes use.
    """
    try:

        def sample() -> tuple[int, int]:
            with open("/proc/stat", encoding="ascii") as fh:
                fields = [int(v) for v in fh.readline().split()[1:]]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
            return sum(fields[:8]), idle

        total0, idle0 = sample()
        time.sleep(interval)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    total = total1 - total0
    return 1.0 - (idle1 - idle0) / total if total > 0 else None


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def header(name: str, args: object) -> None:
    """Print one line identifying the run: script, torch, threads, CPUs, load, arguments.

    Also how busy the machine was (other processes) just before the benchmark started:
    on a shared 2-core machine a second busy process slows multi-threaded torch ops by
    far more than 2×, so absolute numbers are only comparable at similar load.
    """
    busy = cpu_busy()
    busy_s = f"{100 * busy:.0f}%" if busy is not None else "n/a"
    print(
        f"== {name} | torch {torch.__version__} | threads {torch.get_num_threads()} | "
        f"cpus {os.cpu_count()} | load avg {_load()} | cpu busy before start {busy_s} | "
        f"python {platform.python_version()}"
    )
    print(f"   args: {vars(args) if hasattr(args, '__dict__') else args}")
    if busy is not None and busy > BUSY_WARNING:
        print(
            f"   WARNING: other processes keep {100 * busy:.0f}% of the CPUs busy; multi-threaded "
            "torch timings are unreliable (rerun when idle, or compare with --threads 1)"
        )


def footer(t_start: float) -> None:
    """Print the elapsed wall time, the load average and how busy other processes are now."""
    elapsed = time.perf_counter() - t_start
    busy = cpu_busy()
    busy_s = f"{100 * busy:.0f}%" if busy is not None else "n/a"
    print(f"\n== done in {elapsed:.1f}s | load avg at end {_load()} | cpu busy after end {busy_s}")


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


def interleaved_medians(
    fns: dict[str, Callable[[], Any]], *, repeats: int, warmup: int = 1, number: int = 1
) -> dict[str, float]:
    """Median seconds per call of each of ``fns``, timed round-robin.

    Every repeat times each function once, in turn, so that all of them see the same
    machine state; ratios between them stay meaningful when the load changes mid-run.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - t0) / number)
    return {name: statistics.median(ts) for name, ts in times.items()}


def interleaved_costs(
    fns: dict[str, Callable[[], Any]], *, repeats: int, warmup: int = 1
) -> dict[str, tuple[float, float, float]]:
    """``(wall s, CPU s, minor page faults)`` per call of each of ``fns``, medians, timed
    round-robin as :func:`interleaved_medians`.

    On a shared machine the wall time of a single-threaded call also counts the time other
    processes held its core; the process CPU time (``time.process_time``) does not, so its
    ratios drift far less with the load. Minor page faults (``ru_minflt``) count pages
    touched for the first time — fresh allocations that glibc took from the kernel — which
    cost microseconds each in a VM and explain much of the spread between runs.
    """
    import resource

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            f0, c0, t0 = faults(), time.process_time(), time.perf_counter()
            fn()
            t, c, f = time.perf_counter() - t0, time.process_time() - c0, faults() - f0
            runs[name].append((t, c, float(f)))
    med = statistics.median
    return {
        name: (med(r[0] for r in rs), med(r[1] for r in rs), med(r[2] for r in rs))
        for name, rs in runs.items()
    }


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
