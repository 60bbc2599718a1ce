"""Check a preset on CUDA against CPU and print the speed-up (issue 34 item 5).

Runs the same config twice in this process, ``device: cpu`` then ``device: cuda``, and
prints per method the final test metrics of both, their largest difference and the wall
time ratio. GPU kernels reduce in another order than CPU ones, so the two runs agree to a
tolerance, not bit for bit: the check passes when every final metric differs by at most
``--tol`` (default 0.02, two points of accuracy after a few rounds).

Usage (on a machine with CUDA; exits 2 with one line where there is none)::

    python benchmarks/check_cuda.py demo --rounds 3
    python benchmarks/check_cuda.py paper004-table3 --rounds 2 --set seeds=[1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from _common import footer, header, print_table
from geofl.api import RunResult, run


def _run(
    preset: str, device: str, rounds: int, sets: list[str], out: Path
) -> tuple[RunResult, float]:
    start = time.perf_counter()
    result = run(
        preset,
        out / device,
        overrides=[f"device={device}", f"federation.rounds={rounds}", *sets],
    )
    return result, time.perf_counter() - start


def _finals(result: RunResult) -> dict[str, dict[str, float]]:
    out = {}
    for r in result.runs:
        if r.final is not None and r.final.test is not None:
            out[f"{r.method}/seed-{r.seed}"] = dict(r.final.test.values)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--tol", type=float, default=0.02)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("check_cuda: this torch sees no CUDA device; run it on a GPU machine")
        return 2
    header("check_cuda", args)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cpu, t_cpu = _run(args.preset, "cpu", args.rounds, args.sets, Path(tmp))
        gpu, t_gpu = _run(args.preset, "cuda", args.rounds, args.sets, Path(tmp))
    a, b = _finals(cpu), _finals(gpu)
    rows, worst = [], 0.0
    for run_name, metrics in a.items():
        for metric, value in metrics.items():
            other = b[run_name][metric]
            diff = abs(other - value)
            worst = max(worst, diff)
            rows.append([run_name, metric, f"{value:.4f}", f"{other:.4f}", f"{diff:.4f}"])
    print_table(["run", "metric", "cpu", "cuda", "|diff|"], rows)
    print(
        f"\nwall: cpu {t_cpu:.1f}s, cuda {t_gpu:.1f}s, speed-up {t_cpu / t_gpu:.2f}x "
        f"({torch.cuda.get_device_name()})"
    )
    ok = worst <= args.tol
    print(
        f"largest |diff| {worst:.4f} {'<=' if ok else '>'} tol {args.tol}: {'ok' if ok else 'FAIL'}"
    )
    footer(t0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
