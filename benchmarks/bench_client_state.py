"""The per-client state store at cross-device scale: K = 1,000 × D = 1.1M float32, mmap'd.

Usage::

    .venv/bin/python benchmarks/bench_client_state.py [--quick] [--clients 1000]
        [--dim 1.1e6] [--cohort 100] [--rounds 5] [--ram-clients 100] [--threads 2]

What is measured and why: a stateful algorithm (SCAFFOLD's c_k, FedDyn's linear term) keeps
one ``[D]`` row per client in :class:`~geofl.client.state.ClientStateStore`. At K = 1,000
clients of a ResNet-18-sized model (D = 1.1M) that is 4.4 GB, which the store keeps
memory-mapped (``federation.client_state: mmap``) so that it need not fit in RAM. The
script runs the store through the round pattern of a run, for a few rounds:

1. draw ``--cohort`` random clients;
2. per client: ``store.get(k)`` and one read of its row as a client step does
   (``c − c_k``, SCAFFOLD's correction) — *get*; the new row (one vector op, the client's
   compute, timed apart); ``store.stage(k, …)`` — *stage*;
3. ``store.state_dict()`` — what the round's checkpoint carries (the staged rows);
4. ``store.commit()`` — the staged rows written into the store and the mapping flushed.

Reported: ms per client of get / stage / state_dict / commit (median over rounds of the
round's total ÷ cohort), the process's peak RSS (``VmHWM``, as ``ru_maxrss``) and its peak
anonymous RSS (``RssAnon``, sampled after every phase: heap memory, which the kernel cannot
drop, unlike the clean file-backed pages of the mapping that ``VmHWM`` also counts), the
file's size on disk (a new ``.npy`` memmap is sparse; only rows ever committed take disk).
Target: peak RSS < 2 GB at K = 1,000, D = 1.1M.

Each variant runs in its own child process (its own peak RSS) one after the other:

* ``ram``: the in-RAM store at ``--ram-clients`` (K = 100: 440 MB, fits) — the reference
  of the ratios;
* ``mmap`` at the same K (what memory mapping costs at equal size);
* ``mmap`` at ``--clients`` (the cross-device case);
* ``mmap+dontneed`` at ``--clients``: after each commit the benchmark calls
  ``madvise(MADV_DONTNEED)`` on the store's mapping (through a private attribute) — a
  prototype of a seam the store lacks, showing what releasing the mapped pages after a
  commit would do to the peak RSS.

The arrays live under a temporary directory (free space is checked first with
``shutil.disk_usage``; variants that do not fit are skipped with a message) that is removed
after each variant and at the end.
"""

from __future__ import annotations

import argparse
import json
import mmap
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _common import footer, header, print_table, set_threads
from geofl.client.state import ClientState, ClientStateStore, StateSpec

TARGET_GB = 2.0
NAME = "control"
#: Free space kept beyond the arrays' full size (bytes).
DISK_MARGIN = 1 << 30


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One variant: the store through ``rounds`` rounds; timings (s) and memory (kB)."""
    set_threads(spec["threads"])
    k, dim, cohort = spec["clients"], spec["dim"], spec["cohort"]
    path = Path(spec["path"]) if spec["path"] else None
    rss_base = _status_kb("VmRSS")
    t0 = time.perf_counter()
    store = ClientStateStore(k, {NAME: StateSpec((dim,))}, path=path)
    t_open = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(0)
    control = 0.01 * torch.randn(dim, generator=gen)
    delta = 0.01 * torch.randn(dim, generator=gen)
    rng = np.random.default_rng(spec["seed"])
    anon_peak = _status_kb("RssAnon")
    rows: dict[str, list[float]] = {}

    def keep(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    for _ in range(spec["rounds"]):
        t_get = t_new = t_stage = 0.0
        for c in rng.choice(k, size=cohort, replace=False):
            t0 = time.perf_counter()
            st = store.get(int(c))
            corr = control - st.tensors[NAME]  # the client reads its row once
            t1 = time.perf_counter()
            new = corr - delta  # c_k⁺-like: a new [D] row (client compute)
            t2 = time.perf_counter()
            store.stage(int(c), ClientState({NAME: new}, st.dp_events))
            t3 = time.perf_counter()
            t_get, t_new, t_stage = t_get + t1 - t0, t_new + t2 - t1, t_stage + t3 - t2
            del corr, new
        anon_peak = max(anon_peak, _status_kb("RssAnon"))
        t0 = time.perf_counter()
        sd = store.state_dict()
        t_sd = time.perf_counter() - t0
        anon_peak = max(anon_peak, _status_kb("RssAnon"))
        del sd
        t0 = time.perf_counter()
        store.commit()
        t_commit = time.perf_counter() - t0
        if spec["dontneed"]:
            for mm in store._mmaps.values():  # private: no public seam for this
                mm._mmap.madvise(mmap.MADV_DONTNEED)  # type: ignore[attr-defined]
        anon_peak = max(anon_peak, _status_kb("RssAnon"))
        for key, val in (
            ("get", t_get),
            ("new row", t_new),
            ("stage", t_stage),
            ("state_dict", t_sd),
            ("commit", t_commit),
        ):
            keep(key, val / cohort)
        keep("rss", _status_kb("VmRSS"))
    out: dict[str, Any] = {k_: statistics.median(v) for k_, v in rows.items()}
    out["rss_max_round"] = max(rows["rss"])
    out["open"] = t_open
    out["vmhwm"] = _status_kb("VmHWM")
    out["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux
    out["anon_peak"] = anon_peak
    out["rss_base"] = rss_base
    out["disk"] = sum(f.stat().st_blocks * 512 for f in path.iterdir()) if path else 0
    out["apparent"] = sum(f.stat().st_size for f in path.iterdir()) if path else 0
    return out


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``child(spec)`` in a fresh interpreter; its last stdout line is the JSON result."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"variant {spec['label']} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Parse arguments, run each variant in a child process, print the table and ratios."""
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="D = 110k, 2 rounds")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--dim", type=float, default=1.1e6)
    parser.add_argument("--cohort", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ram-clients", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.quick:
        args.dim, args.rounds = 1.1e5, 2
    args.dim = int(args.dim)
    set_threads(args.threads)
    header("bench_client_state", args)

    gb = 1e9
    with tempfile.TemporaryDirectory(prefix="geofl-bench-state-") as tmp:
        free = shutil.disk_usage(tmp).free
        row_bytes = 4 * args.dim
        print(
            f"   temp dir {tmp}: {free / gb:.1f} GB free; mmap store at K = {args.clients:,}: "
            f"{args.clients * row_bytes / gb:.2f} GB"
        )
        variants = [
            ("ram", args.ram_clients, False, False),
            ("mmap", args.ram_clients, True, False),
            ("mmap", args.clients, True, False),
            ("mmap+dontneed", args.clients, True, True),
        ]
        results: dict[tuple[str, int], dict[str, Any]] = {}
        for label, k, mapped, dontneed in variants:
            need = k * row_bytes + DISK_MARGIN
            if mapped and shutil.disk_usage(tmp).free < need:
                print(
                    f"   SKIPPED {label} K = {k:,}: needs {need / gb:.1f} GB free under {tmp} "
                    f"(the array's full size + 1 GB), only "
                    f"{shutil.disk_usage(tmp).free / gb:.1f} GB"
                )
                continue
            path = Path(tmp) / f"{label}-{k}"
            spec = {
                "label": label,
                "clients": k,
                "dim": args.dim,
                "cohort": min(args.cohort, k),
                "rounds": args.rounds,
                "seed": args.seed,
                "threads": args.threads,
                "path": str(path) if mapped else None,
                "dontneed": dontneed,
            }
            try:
                results[(label, k)] = run_child(spec)
            finally:
                shutil.rmtree(path, ignore_errors=True)
    rows = []
    for (label, k), r in results.items():
        ms = {key: 1e3 * r[key] for key in ("get", "new row", "stage", "state_dict", "commit")}
        rows.append(
            [
                label,
                k,
                k * row_bytes / gb,
                ms["get"],
                ms["new row"],
                ms["stage"],
                ms["state_dict"],
                ms["commit"],
                ms["get"] + ms["stage"] + ms["state_dict"] + ms["commit"],
                r["vmhwm"] / 1e6,
                r["ru_maxrss"] / 1e6,
                r["anon_peak"] / 1e6,
                r["rss_base"] / 1e6,
                r["disk"] / gb,
                r["open"] * 1e3,
            ]
        )
    print_table(
        [
            "store",
            "K",
            "GB",
            "get",
            "(new row)",
            "stage",
            "state_dict",
            "commit",
            "store total",
            "VmHWM GB",
            "ru_maxrss GB",
            "anon peak GB",
            "base GB",
            "disk GB",
            "open ms",
        ],
        rows,
        title=f"Client-state store, D = {args.dim:,}, {args.cohort} random clients per round, "
        f"{args.rounds} rounds: ms per client (median over rounds); 'store total' = get + "
        f"stage + state_dict + commit; '(new row)' is the client's compute, not the store's",
    )
    big = results.get(("mmap", args.clients))
    ram = results.get(("ram", args.ram_clients))
    if big is not None:
        hwm = big["vmhwm"] / 1e6
        print(
            f"\nmmap store K = {args.clients:,} × D = {args.dim:,} "
            f"({args.clients * row_bytes / gb:.1f} GB): peak RSS {hwm:.2f} GB (VmHWM; "
            f"anonymous {big['anon_peak'] / 1e6:.2f} GB); target < {TARGET_GB:g} GB: "
            f"{'met' if hwm < TARGET_GB else 'MISSED'}"
        )
        dn = results.get(("mmap+dontneed", args.clients))
        if dn is not None:
            print(
                f"  with madvise(MADV_DONTNEED) after each commit: peak RSS "
                f"{dn['vmhwm'] / 1e6:.2f} GB (VmHWM; anonymous {dn['anon_peak'] / 1e6:.2f} GB)"
            )
    if big is not None and ram is not None:
        parts = ", ".join(
            f"{key} {big[key] / ram[key]:.2f}×" for key in ("get", "stage", "state_dict", "commit")
        )
        print(
            f"mmap K = {args.clients:,} / in-RAM K = {args.ram_clients:,}, ms per client: {parts}"
        )
    small = results.get(("mmap", args.ram_clients))
    if small is not None and ram is not None and args.ram_clients != args.clients:
        parts = ", ".join(
            f"{key} {small[key] / ram[key]:.2f}×"
            for key in ("get", "stage", "state_dict", "commit")
        )
        print(f"mmap / in-RAM at equal K = {args.ram_clients:,}, ms per client: {parts}")
    footer(t_start)


if __name__ == "__main__":
    main()
