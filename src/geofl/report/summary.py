"""Read a run directory and summarise each method's results over seeds.

The engine writes one directory per run (see :func:`load_run`); this module reads it into a
small typed structure and reduces it to mean ± std over seeds, the form papers report
(e.g. 000 Table 1: "95.04 ± 0.32" over three seeds).

Conventions:
    * ``std`` is the **sample** standard deviation (``ddof=1``), as papers use for mean ± std
      over a handful of seeds; it is ``0.0`` for a single value.
    * Undefined values (JSON ``null``, NaN, a rolling std over fewer rounds than the window)
      are left out of a :class:`Stat`; its ``n`` counts only the values used. With ``n == 0``
      mean and std are NaN in memory and ``null`` in ``summary.json``.
    * A seed without ``final.json`` is unfinished: it is listed under ``incomplete`` and left
      out of every statistic.
    * The rolling-std window is the run's ``eval.rolling_window`` (``config.yaml``), else
      :data:`ROLLING_WINDOW`.
    * Metric keys follow the run's task (``run.json["task"]``, :class:`TaskInfo`; runs
      written before tasks existed are classification): ``final_test_<metric>`` for every
      scalar the task reports, ``best_val_test_<primary>`` and a rolling std of the
      primary metric. Classification keeps exactly its historical keys
      (``final_test_accuracy``, ``final_test_macro_f1``, ``final_test_loss``,
      ``best_val_test_accuracy``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import numpy as np
import yaml

from geofl import io
from geofl.errors import RunDirError
from geofl.records import RoundRecord, TaskInfo
from geofl.report.paired import PAIRED_METRICS, final_values, paired_statistics
from geofl.tasks.metrics import rolling_std

__all__ = [
    "PERCENT_METRICS",
    "MethodSummary",
    "RunData",
    "RunSummary",
    "SeedRun",
    "Stat",
    "format_pm",
    "load_run",
    "make_stat",
    "metric_names",
    "metric_scale",
    "metric_unit",
    "num",
    "read_json",
    "summarize_run",
    "write_summary",
]

#: Default window of the rolling std of test accuracy (000 Fig. 6), if the config sets none.
ROLLING_WINDOW = 10

#: Metrics that are fractions in [0, 1]: reports show them in percent.
PERCENT_METRICS = frozenset(
    {"accuracy", "macro_f1", "micro_f1", "map", "roc_auc", "f1", "precision", "recall", "asr"}
)


def metric_scale(name: str) -> float:
    """Display scale of a metric: 100 (percent) for fractions, else 1."""
    return 100.0 if name in PERCENT_METRICS else 1.0


def metric_unit(name: str) -> str:
    """Display unit suffix: ``" (%)"`` for fractions, else ``""``."""
    return " (%)" if name in PERCENT_METRICS else ""


#: Scalar metrics a task reports when no finished seed says otherwise (their summary keys
#: exist even before any seed finished).
_DEFAULT_METRICS = {"classification": ("accuracy", "macro_f1", "loss")}


class Stat(TypedDict):
    """Mean ± sample std (``ddof=1``) of the finite ``values``; ``n == len(values)``."""

    mean: float
    std: float
    values: list[float]
    n: int


class MethodSummary(TypedDict):
    """Per-method entry of :class:`RunSummary` (accuracies as fractions in [0, 1]).

    The keys listed are classification's; another task has ``final_test_<metric>`` for
    each of its scalar metrics and ``best_val_test_<primary>`` in their place (a summary
    of such a run is built as a plain dict with those keys).

    ``bytes_total`` is each seed's communication over its rounds, up plus down (001
    §6.1.4: Comm_total). ``target`` is present when the runs report rounds to a target
    (``eval.target``): its metric, value and split, per seed the first round reaching it
    or ``"not reached"``, and Stats of those rounds and of the bytes moved until then over
    the seeds that reached it.

    ``epsilon_max`` is the per-seed ``final.json["privacy"]["epsilon_max"]`` (ε of the worst
    client at the run's δ) over finished seeds, None for a method whose release adds no
    noise. An infinite ε (``null`` in ``final.json``) is left out of the Stat like any
    undefined value.
    """

    seeds_done: list[int]
    incomplete: list[int]
    final_test_accuracy: Stat
    final_test_macro_f1: Stat
    final_test_loss: Stat
    best_val_test_accuracy: Stat
    best_val_round: Stat
    final_rolling_std: Stat
    bytes_up_per_round: Stat
    bytes_total: Stat
    target: NotRequired[dict[str, Any]]
    diverged: dict[str, str]
    paper: dict[str, Any] | None
    epsilon_max: Stat | None


class RunSummary(TypedDict):
    """Content of ``summary.json``; ``paired`` only with ``compare_to`` in the config."""

    name: str
    seeds: list[int]
    methods: dict[str, MethodSummary]
    paired: NotRequired[dict[str, Any]]


@dataclass(frozen=True)
class SeedRun:
    """What exists on disk for one (method, seed).

    Attributes:
        seed: The seed.
        rounds: Records of ``rounds.jsonl`` in file order (empty if the file is missing).
        partition: Content of ``partition.json``, or None if missing.
        final: Content of ``final.json``, or None if the run is unfinished.
    """

    seed: int
    rounds: list[RoundRecord] = field(default_factory=list)
    partition: dict[str, Any] | None = None
    final: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        """True when ``final.json`` exists."""
        return self.final is not None

    def series(self, split: str, key: str = "accuracy") -> tuple[np.ndarray, np.ndarray]:
        """``(rounds, values)`` of one metric over the evaluated rounds (NaN where null).

        Args:
            split: ``"val"``, ``"test"``, or a top-level scalar of the round record
                (``"train_loss"``, ``"bytes_up"``, ``"train_<metric>"`` such as
                ``"train_accuracy"``; then ``key`` is ignored).
            key: Metric name inside the split's :class:`~geofl.tasks.base.SplitMetrics`.
        """
        xs = np.array([r.round for r in self.rounds], dtype=np.float64)
        if split in ("train_loss", "bytes_up"):
            ys = [num(getattr(r, split)) for r in self.rounds]
        elif split.startswith("train_"):
            ys = [num(r.train_metrics.get(split.removeprefix("train_"))) for r in self.rounds]
        else:
            splits = [getattr(r, split) for r in self.rounds]
            ys = [math.nan if m is None else num(m.values.get(key)) for m in splits]
        return xs, np.array(ys, dtype=np.float64)


@dataclass(frozen=True)
class RunData:
    """A loaded run directory.

    Attributes:
        run_dir: The directory.
        info: Content of ``run.json``.
        methods: ``method -> seed -> SeedRun``, methods in ``run.json`` order, seeds in
            ``run.json`` order (directories found on disk but not listed come after).
        config: Content of ``config.yaml`` (the resolved experiment config), ``{}`` if the
            file is missing or not a mapping.
    """

    run_dir: Path
    info: dict[str, Any]
    methods: dict[str, dict[int, SeedRun]]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Run name from ``run.json`` (the directory name if absent)."""
        return str(self.info.get("name") or self.run_dir.name)

    @property
    def seeds(self) -> list[int]:
        """Seeds listed in ``run.json``."""
        return [int(s) for s in self.info.get("seeds") or []]

    @property
    def task(self) -> TaskInfo:
        """The run's task (``run.json["task"]``; classification for older runs)."""
        return TaskInfo.from_json(self.info.get("task"))

    @property
    def rolling_window(self) -> int:
        """``eval.rolling_window`` of the config, else :data:`ROLLING_WINDOW`."""
        window = (self.config.get("eval") or {}).get("rolling_window")
        if isinstance(window, int) and not isinstance(window, bool) and window >= 1:
            return window
        return ROLLING_WINDOW

    def label(self, method: str) -> str:
        """Display name of ``method`` (``run.json["labels"]``), else the method name."""
        labels = self.info.get("labels")
        label = labels.get(method) if isinstance(labels, dict) else None
        return str(label) if label else method

    def method_config(self, method: str) -> dict[str, Any]:
        """The ``methods`` entry of the config named ``method`` (``{}`` if not found)."""
        for entry in self.config.get("methods") or []:
            if isinstance(entry, dict) and entry.get("name") == method:
                return entry
        return {}


def num(x: Any) -> float:
    """``float(x)``, with None (JSON null) and non-numbers mapped to NaN."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return math.nan
    return float(x)


def read_json(path: Path) -> Any:
    """Parse a JSON file of the run directory.

    Raises:
        RunDirError: The file is not valid JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: invalid JSON ({exc}); re-run or delete the file") from exc


def _read_rounds(path: Path) -> list[RoundRecord]:
    if not path.is_file():
        return []
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    out: list[RoundRecord] = []
    for i, line in enumerate(lines):
        try:
            out.append(RoundRecord.from_json(json.loads(line)))
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:  # a run still writing may leave a truncated last line
                break
            raise RunDirError(
                f"{path}:{i + 1}: invalid JSON line ({exc}); the file is corrupt, re-run"
            ) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise RunDirError(
                f"{path}:{i + 1}: not a round record ({type(exc).__name__}: {exc}); re-run"
            ) from exc
    return out


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        raise RunDirError(
            f"{path}: invalid YAML ({where}{what}); restore it or re-run the experiment to "
            "rewrite it"
        ) from exc
    return config if isinstance(config, dict) else {}


def _seed_dirs(method_dir: Path) -> list[int]:
    if not method_dir.is_dir():
        return []
    seeds = []
    for p in method_dir.glob("seed-*"):
        suffix = p.name.removeprefix("seed-")
        if p.is_dir() and suffix.lstrip("-").isdigit():
            seeds.append(int(suffix))
    return sorted(seeds)


def load_run(run_dir: Path) -> RunData:
    """Read ``run.json`` and every ``methods/<method>/seed-<seed>/`` that exists.

    Args:
        run_dir: The run directory.

    Raises:
        RunDirError: ``run_dir`` or its ``run.json`` is missing, or a JSON (or
            ``config.yaml``) file is corrupt.
    """
    run_dir = Path(run_dir)
    info_path = run_dir / "run.json"
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} not found; pass the directory of a run")
    if not info_path.is_file():
        raise RunDirError(
            f"{info_path} not found; pass a run directory written by the engine (has run.json)"
        )
    info = read_json(info_path)
    if not isinstance(info, dict):
        raise RunDirError(f"{info_path}: expected a JSON object; re-run to regenerate it")
    methods_root = run_dir / "methods"
    names = [str(m) for m in info.get("methods") or []]
    if methods_root.is_dir():
        names += sorted(
            p.name for p in methods_root.iterdir() if p.is_dir() and p.name not in names
        )
    listed = [int(s) for s in info.get("seeds") or []]
    methods: dict[str, dict[int, SeedRun]] = {}
    for name in names:
        found = _seed_dirs(methods_root / name)
        seeds = listed + [s for s in found if s not in listed]
        runs: dict[int, SeedRun] = {}
        for seed in seeds:
            d = methods_root / name / f"seed-{seed}"
            part, final = d / "partition.json", d / "final.json"
            runs[seed] = SeedRun(
                seed=seed,
                rounds=_read_rounds(d / "rounds.jsonl"),
                partition=read_json(part) if part.is_file() else None,
                final=read_json(final) if final.is_file() else None,
            )
        methods[name] = runs
    return RunData(
        run_dir=run_dir, info=info, methods=methods, config=_read_config(run_dir / "config.yaml")
    )


def make_stat(values: Sequence[float]) -> Stat:
    """Mean and sample std (``ddof=1``; 0.0 for one value) of the finite ``values``."""
    vals = [float(v) for v in values if math.isfinite(v)]
    n = len(vals)
    if n == 0:
        return Stat(mean=math.nan, std=math.nan, values=[], n=0)
    arr = np.asarray(vals, dtype=np.float64)
    std = float(arr.std(ddof=1)) if n > 1 else 0.0
    return Stat(mean=float(arr.mean()), std=std, values=vals, n=n)


def format_pm(stat: Stat, scale: float = 100.0, digits: int = 2) -> str:
    """``"95.04 ± 0.32"`` from a Stat of fractions (``scale`` 100 → percent); ``"–"`` if empty."""
    if stat["n"] == 0 or not math.isfinite(stat["mean"]):
        return "–"
    return f"{stat['mean'] * scale:.{digits}f} ± {stat['std'] * scale:.{digits}f}"


def _final_metric(final: dict[str, Any], *path: str) -> float:
    node: Any = final
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return num(node)


def _epsilon_max(finals: Sequence[dict[str, Any]]) -> Stat | None:
    privacy = [f["privacy"] for f in finals if isinstance(f.get("privacy"), dict)]
    if not privacy:
        return None
    return make_stat([num(p.get("epsilon_max")) for p in privacy])


def metric_names(task: TaskInfo, finals: Sequence[dict[str, Any]]) -> list[str]:
    """Scalar test metrics of the finished seeds, in the order the task reports them."""
    names: dict[str, None] = {}
    for f in finals:
        test = (f.get("final") or {}).get("test")
        if isinstance(test, dict):
            names.update((k, None) for k, v in test.items() if not isinstance(v, list | dict))
    names.pop("n", None)
    return list(names) or list(_DEFAULT_METRICS.get(task.name, (task.primary_metric, "loss")))


def _summarize_method(
    runs: dict[int, SeedRun], paper: Any, window: int, task: TaskInfo
) -> MethodSummary:
    done = [r for r in runs.values() if r.final is not None]
    finals = [r.final for r in done if r.final is not None]
    primary = task.primary_metric
    last_std = []
    for r in done:
        _, values = r.series("test", primary)
        values = values[np.isfinite(values)]  # rounds without evaluation (eval.every > 1)
        rs = rolling_std(values, window) if values.size else values
        last_std.append(float(rs[-1]) if rs.size else math.nan)
    out: dict[str, Any] = {
        "seeds_done": [r.seed for r in done],
        "incomplete": [r.seed for r in runs.values() if r.final is None],
    }
    for name in metric_names(task, finals):
        out[f"final_test_{name}"] = make_stat(
            [_final_metric(f, "final", "test", name) for f in finals]
        )
    out[f"best_val_test_{primary}"] = make_stat(
        [_final_metric(f, "best_val", "test", primary) for f in finals]
    )
    out.update(
        best_val_round=make_stat([_final_metric(f, "best_val", "round") for f in finals]),
        final_rolling_std=make_stat(last_std),
        diverged={
            str(r.seed): str(r.final["diverged"])
            for r in done
            if r.final is not None and r.final.get("diverged")
        },
        bytes_up_per_round=make_stat(
            [float(np.mean([rec.bytes_up for rec in r.rounds])) for r in done if r.rounds]
        ),
        bytes_total=make_stat(
            [
                float(sum(rec.bytes_up + rec.bytes_down for rec in r.rounds))
                for r in done
                if r.rounds
            ]
        ),
        paper=dict(paper) if isinstance(paper, dict) else None,
        epsilon_max=_epsilon_max(finals),
    )
    target = _target_summary(done)
    if target is not None:
        out["target"] = target
    return cast(MethodSummary, out)


#: What a seed's target entry says when no round reached the target.
NOT_REACHED = "not reached"


def _target_summary(done: Sequence[SeedRun]) -> dict[str, Any] | None:
    """Rounds to the target over seeds (``final.json["target"]``), or None without one."""
    entries = {
        r.seed: r.final["target"]
        for r in done
        if r.final is not None and isinstance(r.final.get("target"), dict)
    }
    if not entries:
        return None
    first = next(iter(entries.values()))
    reached = [e for e in entries.values() if e.get("round") is not None]
    return {
        "metric": first.get("metric"),
        "value": first.get("value"),
        "split": first.get("split"),
        "direction": first.get("direction", "max"),
        "per_seed": {
            str(seed): NOT_REACHED if e.get("round") is None else int(e["round"])
            for seed, e in entries.items()
        },
        "rounds": make_stat([num(e["round"]) for e in reached]),
        "bytes_total": make_stat([num(e.get("bytes_total")) for e in reached]),
    }


def summarize_run(run_dir: Path) -> RunSummary:
    """Mean ± std over finished seeds of each method's final metrics.

    ``final_rolling_std`` is the rolling std (window :attr:`RunData.rolling_window`, 10 by
    default; :func:`~geofl.tasks.metrics.rolling_std`) of the task's primary test metric
    (accuracy for classification) at the last evaluated round; it is undefined (left out)
    for seeds with fewer evaluated rounds than the window.

    Args:
        run_dir: The run directory.

    Raises:
        RunDirError: See :func:`load_run`.
    """
    run = load_run(run_dir)
    paper = run.info.get("paper") or {}
    paper = paper if isinstance(paper, dict) else {}
    summary = RunSummary(
        name=run.name,
        seeds=run.seeds,
        methods={
            m: _summarize_method(runs, paper.get(m), run.rolling_window, run.task)
            for m, runs in run.methods.items()
        },
    )
    baseline = run.config.get("compare_to")
    if isinstance(baseline, str) and baseline in run.methods:
        finals = {m: {s: r.final for s, r in v.items() if r.final} for m, v in run.methods.items()}
        metrics = (run.task.primary_metric, *PAIRED_METRICS)
        summary["paired"] = paired_statistics(final_values(finals, metrics), baseline)
    return summary


def _json_ready(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_ready(v) for v in x]
    return x


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory + ``os.replace``.

    Readers never see a half-written file; the file gets the usual umask permissions.
    """
    io.write_text_atomic(path, text)


def write_summary(run_dir: Path) -> RunSummary:
    """Compute :func:`summarize_run` and write it atomically to ``run_dir/summary.json``.

    NaN values are written as ``null`` (strict JSON).

    Returns:
        The summary (with NaN, not None, for undefined values).
    """
    summary = summarize_run(run_dir)
    text = json.dumps(_json_ready(summary), indent=2, ensure_ascii=False, allow_nan=False)
    write_text_atomic(Path(run_dir) / "summary.json", text + "\n")
    return summary
