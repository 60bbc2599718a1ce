"""A diagnostic, not a timing: do presets give the same numbers at two source trees?

Issue 32's "done when": every existing preset gives the same metrics and model hashes as
before the hierarchy refactor at a few rounds. For each preset named, this runs ``geofl run``
shortened (``federation.rounds`` and the first seed only; the same overrides for both) once
with each source tree on ``PYTHONPATH``, one torch thread, then compares per method: every
round's ``model_sha256``, ``update_set_sha256``, status, participants, weights, training
loss and val/test metrics, and the final val/test metrics. Prints one line per preset
(``same``, ``DIFFERENT`` with the first differing fields, or why it did not run) and appends
a JSON line per preset to ``OUT/parity.jsonl``.

Export the old tree first::

    git archive c899965 src | tar -x -C /tmp/h32w_base
    nice -n 5 python benchmarks/diag_preset_parity.py --old /tmp/h32w_base/src --new src \\
        --out /tmp/parity paper003-hierarchical-example demo

Presets that exist in only one tree are reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: Per-round fields compared (present in both trees' records).
ROUND_FIELDS = (
    "status",
    "participants",
    "weights",
    "train_loss",
    "model_sha256",
    "update_set_sha256",
    "val",
    "test",
)


def run_preset(src: str, preset: str, out: Path, rounds: int, timeout: float) -> str | None:
    """``geofl run preset`` with ``src`` first on the path; None when it finished, else why."""
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    seeds = _first_seed(src, preset, env)
    if seeds is None:
        return "no such preset"
    cmd = [sys.executable, "-m", "geofl.cli", "run", preset, "--out", str(out)]
    cmd += ["--no-report", "--no-progress", "--set", f"federation.rounds={rounds}"]
    cmd += ["--set", f"seeds=[{seeds}]"]
    try:
        got = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    if got.returncode != 0:
        tail = (got.stderr or got.stdout).strip().splitlines()[-1:]
        return f"exit {got.returncode}: {tail[0] if tail else ''}"
    return None


def _first_seed(src: str, preset: str, env: dict[str, str]) -> int | None:
    code = (
        "import sys; from geofl.config.load import list_presets, load_config\n"
        f"n = {preset!r}\n"
        "print(load_config(n).seeds[0] if n in list_presets() else '')"
    )
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    line = got.stdout.strip().splitlines()[-1:] if got.returncode == 0 else []
    return int(line[0]) if line and line[0] else None


def summary(run: Path) -> dict[str, Any]:
    """Per ``method/seed``: the compared round fields and the final val/test metrics."""
    out: dict[str, Any] = {}
    for rounds in sorted(run.glob("methods/*/seed-*/rounds.jsonl")):
        key = f"{rounds.parent.parent.name}/{rounds.parent.name}"
        recs = [json.loads(line) for line in rounds.read_text().splitlines() if line]
        final = json.loads((rounds.parent / "final.json").read_text())
        out[key] = {
            "rounds": [{f: r.get(f) for f in ROUND_FIELDS} for r in recs],
            "final": final.get("final"),
        }
    return out


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="+")
    ap.add_argument("--old", required=True, help="the old tree's src directory")
    ap.add_argument("--new", required=True, help="the new tree's src directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for preset in args.presets:
        t0 = time.perf_counter()
        row: dict[str, Any] = {"preset": preset, "rounds": args.rounds}
        runs = {}
        for side in ("old", "new"):
            where = args.out / preset / side
            why = run_preset(getattr(args, side), preset, where, args.rounds, args.timeout)
            row[f"{side}_error"] = why
            runs[side] = where
        if row["old_error"] or row["new_error"]:
            row["verdict"] = "not compared"
        else:
            diff = differences(summary(runs["old"]), summary(runs["new"]))
            row["verdict"] = "same" if not diff else "DIFFERENT"
            row["differences"] = diff
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        with (args.out / "parity.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        detail = row.get("differences", [])[:4] or [row["old_error"], row["new_error"]]
        print(f"{preset}: {row['verdict']} ({row['wall_s']} s) {detail}", flush=True)


if __name__ == "__main__":
    main()
