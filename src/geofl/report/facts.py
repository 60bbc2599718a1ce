"""The report's "Run facts": how the run was started, on what software and machine, and how
long each method took.

Read from ``run.json`` (``provenance``, one ``resumed`` entry per resume,
:mod:`geofl.engine.records.provenance`; a merged run's ``merged_from``, :mod:`geofl.engine.merge`)
and each finished seed's ``final.json["wall_s"]``. Runs written before provenance existed
show what they recorded (versions) and say what was not.
"""

from __future__ import annotations

import shlex
from html import escape
from pathlib import Path
from typing import Any

from geofl.report.fragments import EMPTY, Column, table_html
from geofl.report.run_data import RunData, num
from geofl.report.stats import format_pm, make_stat

__all__ = ["command_text", "facts_html"]

NOT_RECORDED = "not recorded"


def command_text(argv: list[str] | None) -> str:
    """The command line as a shell would read it; ``python -m geofl.cli`` for a run started
    through the package's ``__main__`` (its argv[0] is a path inside the package)."""
    if not argv:
        return "library call (no command line)"
    head = Path(argv[0]).name
    prog = "python -m geofl.cli" if head == "__main__.py" else shlex.quote(argv[0])
    return " ".join([prog, *(shlex.quote(a) for a in argv[1:])])


def _git(git: Any) -> str:
    if not isinstance(git, dict) or not git.get("commit"):
        return "not a git checkout"
    dirty = git.get("dirty")
    state = " (with uncommitted changes)" if dirty else "" if dirty is False else " (state unknown)"
    return f"<code>{escape(str(git['commit'])[:12])}</code>{escape(state)}"


def _machine(p: dict[str, Any]) -> str:
    cpus = p.get("cpu_count")
    where = escape(str(p.get("platform") or NOT_RECORDED))
    return where + (f", {int(cpus)} CPUs" if isinstance(cpus, int) else "")


def _rows(run: RunData, p: dict[str, Any]) -> list[tuple[str, str]]:
    info = run.info
    overrides = p.get("overrides") or []
    versions = ", ".join(
        f"{name} {escape(str(p.get(key) or info.get(key)))}"
        for name, key in (("Python", "python"), ("torch", "torch"), ("numpy", "numpy"))
        if p.get(key) or info.get(key)
    )
    command = p.get("command") if p else None
    rows = [
        ("command", f"<code>{escape(command_text(command))}</code>" if p else NOT_RECORDED),
        (
            "overrides (--set)",
            "<br>".join(f"<code>{escape(str(o))}</code>" for o in overrides) or "none",
        ),
        ("seeds", escape(", ".join(str(s) for s in run.seeds)) or EMPTY),
        ("geofl", escape(str(p.get("geofl_version") or info.get("geofl_version") or "?"))),
        ("commit", _git(p.get("git")) if p else NOT_RECORDED),
        ("libraries", versions or NOT_RECORDED),
        ("machine", _machine(p) if p else NOT_RECORDED),
        ("started", escape(str(info.get("created") or NOT_RECORDED))),
    ]
    for i, r in enumerate(info.get("resumed") or []):
        if isinstance(r, dict):
            rows.append(
                (f"resumed ({i + 1})", escape(str(r.get("at") or "?")) + " on " + _machine(r))
            )
    return rows + _merged_rows(info.get("merged_from"))


def _merged_rows(merged: Any) -> list[tuple[str, str]]:
    """One row per input of a merged run (``geofl merge``): its directory, when and by
    which command it was started, on what machine and commit."""
    rows = []
    for i, m in enumerate(merged if isinstance(merged, list) else []):
        if not isinstance(m, dict):
            continue
        p = m.get("provenance") if isinstance(m.get("provenance"), dict) else {}
        how = (
            f"<br>started {escape(str(m.get('created') or '?'))} by "
            f"<code>{escape(command_text(p.get('command')))}</code> on {_machine(p)}, "
            f"commit {_git(p.get('git'))}"
            if p
            else ""
        )
        rows.append(
            (f"merged from ({i + 1})", f"<code>{escape(str(m.get('run_dir')))}</code>{how}")
        )
    return rows


def _timings(run: RunData) -> str:
    """Wall time per method: per seed (mean ± std) and in total, over finished seeds."""
    names = run.display_names()
    stats, rounds = {}, {}
    for m, seeds in run.methods.items():
        done = [r for r in seeds.values() if r.final is not None]
        stats[m] = make_stat([num((r.final or {}).get("wall_s")) for r in done])
        rounds[m] = sum(len(r.rounds) for r in done)
    one = run.single_seed  # then per seed = total, and the seed count is said once above
    totals = {m: sum(s["values"]) for m, s in stats.items()}
    columns = [
        Column("method", [escape(names[m]) for m in stats], keep=True),
        Column("finished seeds", [EMPTY if one else str(s["n"]) for s in stats.values()]),
        Column(
            "wall time (s)" if one else "wall time per seed (s)",
            [format_pm(s, scale=1.0, digits=1) for s in stats.values()],
            numeric=True,
        ),
        Column(
            "total (s)",
            [f"{totals[m]:.1f}" if s["n"] and not one else EMPTY for m, s in stats.items()],
            numeric=True,
        ),
        Column(
            "per round (s)",
            [
                f"{totals[m] / rounds[m]:.2f}" if s["n"] and rounds[m] else EMPTY
                for m, s in stats.items()
            ],
            numeric=True,
        ),
    ]
    if all(c.empty for c in columns[2:]):
        return ""
    return table_html(columns)


def facts_html(run: RunData) -> str:
    """``<h2>Run facts</h2>``: a two-column table of the run's provenance and the wall time
    of each method (training, evaluation and checkpoints; a resumed seed counts every
    stretch it ran)."""
    found = run.info.get("provenance")
    p: dict[str, Any] = found if isinstance(found, dict) else {}
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in _rows(run, p))
    timings = _timings(run)
    return (
        '<h2 id="run-facts">Run facts</h2>\n<table class="facts">'
        + rows
        + "</table>\n"
        + ("<h3>Wall time per method</h3>\n" + timings if timings else "")
    )
