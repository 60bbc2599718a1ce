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

A preset whose definition changed on purpose between the trees (its YAML differs) differs by
its new definition. ``--config-from old`` separates that from a change in the code: it writes
each named preset's YAML as the OLD tree ships it to ``OUT/NAME@old-yaml/NAME.yaml`` and runs
that file with both trees (rows and run directories are keyed ``NAME@old-yaml``; the output
format is otherwise the same). Each run gets its own ``GEOFL_CACHE`` so that a data cache
written by one tree is never read by the other. ``--reuse`` keeps the sides that an earlier
invocation with the same arguments finished (on a loaded machine a run can take longer than
``--timeout``); a side cut off before it finished is run again from the start.

A preset too slow even at ``--rounds 1`` is shrunk with ``--set KEY=VALUE`` (repeatable):
each is passed to ``geofl run --set`` after the tool's own rounds and seed overrides,
identically for both trees, and recorded in the row (``overrides``). Fewer clients or a
smaller data set is still a same-code comparison; the row says what was shrunk. Use a
separate ``--out`` for a shrunk run, so that ``--reuse`` never keeps an unshrunk side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

#: Where a source tree ships its presets, relative to its ``src`` directory.
PRESETS = Path("geofl") / "config" / "presets"

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


def run_preset(
    src: str, preset: str, out: Path, rounds: int, timeout: float, overrides: list[str]
) -> str | None:
    """``geofl run preset`` with ``src`` first on the path; None when it finished, else why.

    ``preset`` is a preset name or a YAML path; ``overrides`` are ``KEY=VALUE`` strings
    passed as ``--set`` after the rounds and seed (so they win over both).
    """
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["GEOFL_CACHE"] = str(out.parent / f"{out.name}-cache")
    seeds = _first_seed(src, preset, env)
    if seeds is None:
        return "no such preset"
    cmd = [sys.executable, "-m", "geofl.cli", "run", preset, "--out", str(out)]
    cmd += ["--no-report", "--no-progress", "--set", f"federation.rounds={rounds}"]
    cmd += ["--set", f"seeds=[{seeds}]"]
    for override in overrides:
        cmd += ["--set", override]
    try:
        got = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    if got.returncode != 0:
        tail = (got.stderr or got.stdout).strip().splitlines()[-1:]
        return f"exit {got.returncode}: {tail[0] if tail else ''}"
    return None


def _first_seed(src: str, preset: str, env: dict[str, str]) -> int | None:
    """The first of the YAML's ``seeds``; without them, as the tree's loader completes it.

    Reading the file spares a Python start that imports geofl (tens of CPU seconds at the
    load these runs meet) for every preset that states its seeds, as shipped presets do.
    """
    path = Path(preset) if preset.endswith(".yaml") else Path(src) / PRESETS / f"{preset}.yaml"
    if not path.is_file():
        return None
    seeds = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("seeds")
    if isinstance(seeds, list) and seeds and isinstance(seeds[0], int):
        return seeds[0]
    code = (
        "import sys; from geofl.config.load import list_presets, load_config\n"
        f"n = {preset!r}\n"
        "ok = n in list_presets() or n.endswith('.yaml')\n"
        "print(load_config(n).seeds[0] if ok else '')"
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


def old_yaml(src: str, preset: str, out: Path) -> Path | None:
    """The old tree's shipped YAML of ``preset`` copied to ``out``; None when it has none."""
    shipped = Path(src) / PRESETS / f"{preset}.yaml"
    if not shipped.is_file():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(shipped.read_bytes())
    return out


def compare(args: argparse.Namespace, preset: str) -> dict[str, Any]:
    """Run one preset (or its old YAML) with both trees and compare; the JSON row."""
    label = f"{preset}@old-yaml" if args.config_from == "old" else preset
    row: dict[str, Any] = {"preset": label, "rounds": args.rounds, "overrides": args.overrides}
    source: str | None = preset
    if args.config_from == "old":
        path = old_yaml(args.old, preset, args.out / label / f"{preset}.yaml")
        source = None if path is None else str(path)
    runs = {}
    for side in ("old", "new"):
        where = args.out / label / side
        why = "no such preset in the old tree" if source is None else None
        if side == "new" and row["old_error"] and why is None:
            why = "not run: the old tree's run did not finish"
        if why is None and not (args.reuse and (where / "summary.json").is_file()):
            shutil.rmtree(where, ignore_errors=True)  # a run cut off earlier: start afresh
            src = getattr(args, side)
            why = run_preset(src, source or "", where, args.rounds, args.timeout, args.overrides)
        row[f"{side}_error"] = why
        runs[side] = where
    if row["old_error"] or row["new_error"]:
        row["verdict"] = "not compared"
    else:
        diff = differences(summary(runs["old"]), summary(runs["new"]))
        row["verdict"] = "same" if not diff else "DIFFERENT"
        row["differences"] = diff
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="+")
    ap.add_argument("--old", required=True, help="the old tree's src directory")
    ap.add_argument("--new", required=True, help="the new tree's src directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument(
        "--config-from",
        choices=("preset", "old"),
        default="preset",
        help="preset: each tree runs its own preset of that name; old: both run the old "
        "tree's YAML of it (separates a deliberate change of the definition from the code)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep a side whose run directory under --out already holds a finished run "
        "(summary.json) from an earlier invocation with the same arguments",
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a geofl --set override for both trees' runs (repeatable), to shrink a preset "
        "too slow at --rounds: fewer clients, smaller data; recorded in each row",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for preset in args.presets:
        t0 = time.perf_counter()
        row = compare(args, preset)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        with (args.out / "parity.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        detail = row.get("differences", [])[:4] or [row["old_error"], row["new_error"]]
        print(f"{row['preset']}: {row['verdict']} ({row['wall_s']} s) {detail}", flush=True)


if __name__ == "__main__":
    main()
