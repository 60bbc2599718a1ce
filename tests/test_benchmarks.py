"""The benchmarks still run against today's engine (their ``--quick`` smoke modes).

Benchmarks reach into engine seams (trainer builders, tiers, update metadata) that the
tests of the package do not pin; a seam that changes under them should fail here rather
than when someone next measures. Only that they run to the end is checked: their figures
are measurements, never asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

#: Script and its smoke-mode arguments (each well under 15 s on one core).
SMOKE = {
    "bench_client_overhead.py": ["--quick", "--threads", "1"],
    "bench_engine_overhead.py": ["--quick", "--threads", "1"],
    "bench_aggregation.py": ["--quick"],
    "bench_task_metrics.py": ["--quick"],
    "bench_augment.py": ["--quick", "--threads", "1"],
    "bench_dual_shield.py": ["--quick", "--threads", "1"],
    "bench_dual_shield_overhead.py": ["--quick", "--threads", "1"],
    "bench_detectors.py": ["--quick", "--threads", "1"],
    "diag_oda_centralised.py": ["--quick", "--fractions", "0", "1"],
    "bench_envelope.py": ["--quick"],
    "bench_uplink_codec.py": ["--quick"],
    "bench_nqi_policy.py": ["--quick"],
    "bench_workers.py": ["--quick"],
    "bench_contacts.py": ["--quick"],
    "bench_hierarchy.py": ["--quick"],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_in_smoke_mode(script: str, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GEOFL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *SMOKE[script]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
