"""Contact-plan construction (003 §2.3.2): 30 vs 2,500 cluster drivers over 100 rounds × 1 h.

Usage::

    .venv/bin/python benchmarks/bench_contacts.py [--quick] [--slots 12000] [--repeats 3]

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
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from datetime import UTC, datetime

import numpy as np

from _common import footer, header, interleaved_medians, print_table
from geofl.network.contacts import CHUNK_ELEMENTS, ContactPlan, contact_plan
from geofl.network.orbits import walker_constellation
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
        ["drivers", "slots", "s (median)", "passes", "passes/driver", "dropped", "µs/driver·slot",
         "plan MiB"],
        rows,
        title=f"contact plan, 8 LEO + 1 GEO, {args.slots} slots of 30 s, mask 10°, p_fail 0.05",
    )  # fmt: skip
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
    footer(t_start)


if __name__ == "__main__":
    main()
