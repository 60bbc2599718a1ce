"""Confirmation latency of the governance ledger's four operation types (paper 000 Table 4).

Usage::

    .venv/bin/python benchmarks/bench_ledger_latency.py [--quick] [--runs 5] [--no-rpc]

What is measured and why: the paper times each governance write on a Hyperledger Fabric
test network from ``peer chaincode invoke`` to the commit event (≈ 2.08 s each, Table 4).
Here each operation is timed with ``time.perf_counter`` around the ledger call, from
submission (encoding the call) to the confirmed receipt, decoded events included:

* *rule commit* — ``commit_rule`` (hash of a resolved config plus governance rules);
* *agg. commit* — ``commit_aggregation`` (round, model hash, update-set hash);
* *committee* — ``record_committee`` (election of 2 members with the seed's hash);
* *perm. update* — ``propose_permission`` plus the approvals of the committee's majority
  (2 of 2), the last of which executes the change: three transactions, so the table also
  gives the time per transaction.

Backends: the embedded chain (web3 over eth-tester / py-evm, in process, stored in a
temporary run directory with its transaction log flushed to disk per transaction) and a
local ganache 7 node over JSON-RPC on loopback (installed into the cache directory on
first use, as the tests do; skipped with the reason where node/npm are missing). Setup
(roles for nine clients, a first rule) and one warm-up of each operation precede the
timed runs. Target: ≤ 50 ms per transaction on the embedded backend.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import footer, header, print_table
from geofl.governance.ledger import (
    EmbeddedLedger,
    Role,
    RpcLedger,
    Web3Ledger,
    hash_json,
)
from geofl.governance.ledger.ganache import GanacheNode, missing_tools
from geofl.governance.permissions import PermissionLevel

TARGET_MS = 50.0
#: Paper 000 Table 4, mean of five runs (ms), Hyperledger Fabric test network.
PAPER_MS = {
    "rule commit": 2081.0,
    "agg. commit": 2088.6,
    "committee": 2077.8,
    "perm. update": 2076.0,
}
CLIENTS = [f"client{i}" for i in range(1, 10)]
COMMITTEE = ["client5", "client9"]


class Workload:
    """The four operations on one ledger, with fresh arguments at every call."""

    def __init__(self, ledger: Web3Ledger) -> None:
        self.ledger = ledger
        self.round = 0
        self.election = 0
        self.state = PermissionLevel.ACTIVE
        for client in CLIENTS:
            ledger.grant_role(client, Role.TRAINING | Role.VALIDATION)
        ledger.commit_rule(hash_json({"scenario": "bench", "seed": 1}), "rule_bench_seed1")
        self.committee()

    def rule(self) -> int:
        self.ledger.commit_rule(hash_json({"rule": self.round}), f"rule_{self.round}")
        return 1

    def aggregation(self) -> int:
        self.round += 1
        r = self.round
        self.ledger.commit_aggregation(r, hash_json(["model", r]), hash_json(["updates", r]))
        return 1

    def committee(self) -> int:
        self.election += 1
        e = self.election
        self.ledger.record_committee(e, max(self.round, 1), COMMITTEE, hash_json(["draw", e]))
        return 1

    def permission(self) -> int:
        new = (
            PermissionLevel.WATCHLIST
            if self.state == PermissionLevel.ACTIVE
            else PermissionLevel.ACTIVE
        )
        pid, _ = self.ledger.propose_permission("client7", self.state, new, "Two failures", 5)
        for member in COMMITTEE:
            self.ledger.approve(pid, member)
        self.state = new
        return 1 + len(COMMITTEE)


def measure(ledger: Web3Ledger, runs: int) -> dict[str, tuple[list[float], int]]:
    """Milliseconds per run of each operation and its number of transactions."""
    work = Workload(ledger)
    ops: dict[str, Callable[[], int]] = {
        "rule commit": work.rule,
        "agg. commit": work.aggregation,
        "committee": work.committee,
        "perm. update": work.permission,
    }
    for op in ops.values():  # warm-up
        op()
    times: dict[str, list[float]] = {name: [] for name in ops}
    txs: dict[str, int] = {}
    for _ in range(runs):
        for name, op in ops.items():
            t0 = time.perf_counter()
            txs[name] = op()
            times[name].append(1e3 * (time.perf_counter() - t0))
    return {name: (times[name], txs[name]) for name in ops}


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 runs, embedded backend only")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-rpc", action="store_true", help="skip the ganache column")
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    t_start = time.perf_counter()
    header("bench_ledger_latency", args)

    results: dict[str, dict[str, tuple[list[float], int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ledger = EmbeddedLedger.create(Path(tmp) / "ledger", seed=1)
        results["embedded"] = measure(ledger, runs)
        ledger.close()
    skip = "--no-rpc" if args.no_rpc or args.quick else missing_tools()
    if skip is None:
        t0 = time.perf_counter()
        with GanacheNode() as node:
            print(f"   ganache ready at {node.url} after {time.perf_counter() - t0:.1f}s")
            results["ganache"] = measure(RpcLedger.create(node.url, seed=1), runs)
    else:
        print(f"   ganache column skipped: {skip}")

    rows = []
    for backend, by_op in results.items():
        for name, (ms, txs) in by_op.items():
            mean = statistics.fmean(ms)
            rows.append(
                [
                    name,
                    backend,
                    *[round(t, 1) for t in ms],
                    round(mean, 1),
                    txs,
                    round(mean / txs, 1),
                    PAPER_MS[name],
                ]
            )
    print_table(
        [
            "operation",
            "backend",
            *[f"run {i + 1}" for i in range(runs)],
            "mean ms",
            "txs",
            "ms/tx",
            "paper ms",
        ],
        rows,
        title="Confirmation latency, submission → confirmed receipt (paper: Fabric, Table 4)",
    )
    per_tx = [row[-2] for row in rows if row[1] == "embedded"]
    worst = max(per_tx)
    verdict = "met" if worst <= TARGET_MS else "missed"
    print(f"\nembedded, worst mean ms per transaction: {worst:.1f} (≤ {TARGET_MS:.0f}: {verdict})")
    footer(t_start)


if __name__ == "__main__":
    main()
