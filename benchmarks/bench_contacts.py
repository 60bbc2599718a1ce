"""Contact-plan construction (003 §2.3.2): 30 vs 2,500 cluster drivers over 100 rounds × 1 h,
and a plan per driver at its election (the hierarchy's contacts follow re-elected drivers).

Usage::

    .venv/bin/python benchmarks/bench_contacts.py [--quick] [--slots 12000] [--repeats 3]
        [--fleet 10000]

What is measured and why: the engine builds one contact plan per run — every LEO pass of
every driver (station) over the whole simulated horizon, the Proximity Driver's choice per
(driver, slot), and the LEO → GEO relay mask (:func:`geofl.network.contacts.contact_plan`).
The default horizon is 100 rounds × 3,600 s = 12,000 slots of 30 s with the synthetic
8-LEO Walker-star + GEO constellation. Drivers are placed uniformly at random (seeded) over
latitudes [−55°, 70°]. The two sizes are timed interleaved (median of ``--repeats``), and
the script prints seconds, passes, µs per (driver · slot) and the ratio of the two sizes.
A last untimed run of the large size under ``tracemalloc`` reports the peak memory Python
and numpy allocated (the elevation tensor is built in slot chunks of ~4 M elements, so the
peak stays far below G × S × T × 8 bytes) next to the size of the plan it returns.

Following the drivers (:class:`geofl.network.stations.StationContacts`): the hierarchy
propagates the satellites once (:func:`~geofl.network.contacts.ephemeris`) and computes a
tractor's plan alone when it first drives a cluster (alone, so that the plan does not depend
on which stations share a matrix product). Measured: the ephemeris, and one station's plan
over the same slots (median over stations); printed next to what precomputing every
tractor of a ``--fleet`` fleet in one batch would cost (time from the batch µs per
driver·slot above, plan size from its bytes per driver) — the choice the engine makes.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from datetime import UTC, datetime

import numpy as np

from _common import footer, header, interleaved_medians, print_table
from geofl.network.contacts import CHUNK_ELEMENTS, ContactPlan, contact_plan, ephemeris
from geofl.network.orbits import walker_constellation
from geofl.network.stations import StationContacts
from geofl.rng import numpy_generator

START = datetime(2026, 3, 20, 0, 0, tzinfo=UTC)


def drivers(n: int, seed: int = 0) -> np.ndarray:
    """[n, 2] seeded driver locations (lat ∈ [−55, 70], lon ∈ [−180, 180])."""
    gen = numpy_generator(seed, "bench_contacts", n)
    return np.stack([gen.uniform(-55.0, 70.0, n), gen.uniform(-180.0, 180.0, n)], axis=1)


def plan_bytes(plan: ContactPlan) -> int:
    """Array bytes of a plan plus its Pass objects (each with its float and two slot ints)."""
    arrays = plan.proximity.nbytes + plan.relay.nbytes + plan.geo_visible.nbytes
    per_pass = sys.getsizeof(plan.passes[0]) + sys.getsizeof(0.5) + 2 * sys.getsizeof(10**4)
    return arrays + len(plan.passes) * (per_pass + 8)  # + the tuple's pointer


def main() -> None:
    """Parse arguments, time both sizes interleaved, print the table and the ratio."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,200 slots, 30 and 250 drivers")
    parser.add_argument("--slots", type=int, default=12_000)
    parser.add_argument("--small", type=int, default=30)
    parser.add_argument("--large", type=int, default=2_500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fleet", type=int, default=10_000, help="tractors a run could elect")
    args = parser.parse_args()
    if args.quick:
        args.slots, args.large, args.repeats = 1_200, 250, 1
    header("bench_contacts", args)
    tles = walker_constellation(epoch=START)
    sizes = {args.small: drivers(args.small), args.large: drivers(args.large)}
    plans: dict[int, ContactPlan] = {}

    def build(n: int) -> None:
        plans[n] = contact_plan(tles, sizes[n], start=START, n_slots=args.slots)

    fns = {str(n): (lambda n=n: build(n)) for n in sizes}
    secs = {int(k): v for k, v in interleaved_medians(fns, repeats=args.repeats, warmup=0).items()}
    rows = []
    for n, plan in plans.items():
        dropped = sum(p.dropped for p in plan.passes)
        rows.append(
            [
                n,
                args.slots,
                secs[n],
                len(plan.passes),
                len(plan.passes) / n,
                dropped / max(1, len(plan.passes)),
                1e6 * secs[n] / (n * args.slots),
                plan_bytes(plan) / 2**20,
            ]
        )
    print_table(
        [
            "drivers",
            "slots",
            "s (median)",
            "passes",
            "passes/driver",
            "dropped",
            "µs/driver·slot",
            "plan MiB",
        ],
        rows,
        title=f"contact plan, 8 LEO + 1 GEO, {args.slots} slots of 30 s, mask 10°, p_fail 0.05",
    )
    ratio = secs[args.large] / secs[args.small]
    print(
        f"\nratio {args.large} / {args.small} drivers: {ratio:.1f}× time for "
        f"{args.large / args.small:.1f}× drivers"
    )
    tracemalloc.start()
    contact_plan(tles, sizes[args.large], start=START, n_slots=args.slots)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    dense = args.large * len(tles) * args.slots * 8
    print(
        f"peak traced memory, {args.large} drivers: {peak / 2**20:.0f} MiB "
        f"(plan {plan_bytes(plans[args.large]) / 2**20:.0f} MiB; a dense float64 elevation "
        f"tensor would be {dense / 2**20:.0f} MiB; chunk = {CHUNK_ELEMENTS:,} elements)"
    )
    per_slot = secs[args.large] / (args.large * args.slots)
    _follow_drivers(tles, sizes[args.large], args, per_slot, plan_bytes(plans[args.large]))
    footer(t_start)


def _follow_drivers(
    tles: list, locations: np.ndarray, args: argparse.Namespace, per_slot: float, nbytes: int
) -> None:
    """Ephemeris once + one station's plan alone, vs precomputing every tractor."""
    t0 = time.perf_counter()
    eph = ephemeris(tles, start=START, n_slots=args.slots)
    eph_s = time.perf_counter() - t0
    k = 5 if args.quick else 20
    times = []
    for i in range(k):
        plans = StationContacts(eph, locations[i : i + 1])
        t0 = time.perf_counter()
        plans.plan(0)
        times.append(time.perf_counter() - t0)
    one = float(np.median(times))
    batch_s = per_slot * args.fleet * args.slots
    batch_mib = nbytes / len(locations) * args.fleet / 2**20
    print(
        f"\nfollowing the drivers, {args.slots} slots: ephemeris {eph_s:.2f} s once; one "
        f"station's plan alone {1e3 * one:.1f} ms (median of {k}; "
        f"{1e6 * one / args.slots:.2f} µs/slot, ×{one / (per_slot * args.slots):.1f} its batch "
        f"share). Precomputing all {args.fleet:,} tractors in one batch: ≈ {batch_s:.0f} s and "
        f"≈ {batch_mib:.0f} MiB of plans; lazily, a run pays one plan per initial driver and "
        f"per re-election (e.g. 300 re-elections: {300 * one:.1f} s)"
    )


if __name__ == "__main__":
    main()
