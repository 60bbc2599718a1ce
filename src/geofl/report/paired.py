"""Paired statistics over matched seeds: each method vs a baseline (004 Table 3 columns).

For a metric and a method B compared with the baseline A over the n seeds both finished
(with finite values), the differences are d_i = B_i − A_i (so the sign says how B moved from
A; 004 Table 3 reports reference − method, the opposite sign). Then

* Δ = mean(d), sd = sample std of d (ddof = 1);
* effect size d_z = Δ / sd (Cohen's d for paired samples);
* 95 % CI of Δ: Δ ± t_{0.975, n−1} · sd / √n (``scipy.stats.t.ppf``);
* raw p: two-sided paired t-test (``scipy.stats.ttest_rel``);
* Holm p: Holm's step-down correction over the methods compared on that metric (one
  family per metric, as 004 Table 3 corrects its CDA and ASR columns separately).

Undefined values (n < 2; sd = 0 leaves d_z and p undefined unless every d_i is equal and
non-zero, where p = 0) are NaN in memory and ``null`` in ``summary.json``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "PAIRED_METRICS",
    "final_values",
    "holm",
    "paired_html",
    "paired_statistics",
    "paired_test",
]

#: Final test metrics compared besides the task's primary one (CDA): the backdoor's ASR.
PAIRED_METRICS = ("asr",)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (Holm 1979), in the input order.

    Sort the m finite p-values ascending, p_(1) ≤ … ≤ p_(m); the adjusted value of p_(j) is
    max_{i ≤ j} min(1, (m − i + 1) · p_(i)). NaN inputs stay NaN and are not counted in m.

    Examples:
        >>> [round(p, 4) for p in holm([0.01, 0.04, 0.03, 0.005])]
        [0.03, 0.06, 0.06, 0.02]
    """
    out = [math.nan] * len(pvalues)
    finite = sorted((p, i) for i, p in enumerate(pvalues) if math.isfinite(p))
    m, running = len(finite), 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def paired_test(method: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    """Paired t-test of ``method`` vs ``baseline`` (aligned by seed).

    Returns:
        ``{n, mean_diff, sd_diff, d_z, ci_low, ci_high, t, p}``; NaN where undefined.
    """
    d = np.asarray(method, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    n = int(d.size)
    nan = math.nan
    out = {"n": float(n), "mean_diff": nan, "sd_diff": nan, "d_z": nan}
    out.update(ci_low=nan, ci_high=nan, t=nan, p=nan)
    if n == 0:
        return out
    mean = float(d.mean())
    out["mean_diff"] = mean
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    out.update(sd_diff=sd, ci_low=mean - half, ci_high=mean + half)
    if sd == 0.0:
        out["p"] = nan if mean == 0.0 else 0.0
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_rel(np.asarray(method, float), np.asarray(baseline, float))
    out.update(d_z=mean / sd, t=float(res.statistic), p=float(res.pvalue))
    return out


def final_values(
    finals: Mapping[str, Mapping[int, Mapping[str, Any]]], metrics: Sequence[str]
) -> dict[str, dict[str, dict[int, float]]]:
    """``metric -> method -> seed -> final test value`` (``final.json["final"]["test"]``)
    of the finished seeds, for each of ``metrics`` that some run reports.

    Args:
        finals: ``method -> seed -> final.json`` of the finished seeds.
        metrics: Metric names, e.g. ``("accuracy", "asr")``.
    """
    out: dict[str, dict[str, dict[int, float]]] = {}
    for metric in metrics:
        per = {
            m: {s: _test_value(f, metric) for s, f in seeds.items()} for m, seeds in finals.items()
        }
        if any(math.isfinite(v) for vals in per.values() for v in vals.values()):
            out[metric] = per
    return out


def _test_value(final: Mapping[str, Any], metric: str) -> float:
    test = (final.get("final") or {}).get("test") or {}
    value = test.get(metric) if isinstance(test, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def paired_statistics(
    values: Mapping[str, Mapping[str, Mapping[int, float]]], baseline: str
) -> dict[str, Any]:
    """Paired tests of every method vs ``baseline``, per metric, with Holm per metric.

    Args:
        values: ``metric -> method -> seed -> final value`` (NaN for undefined).
        baseline: The reference method.

    Returns:
        ``{"baseline", "difference", "metrics": {metric: {method: paired_test(...) + holm_p
        + seeds}}}``; the baseline itself is not listed.
    """
    out: dict[str, Any] = {"baseline": baseline, "difference": "method − baseline"}
    out["metrics"] = {}
    for metric, per_method in values.items():
        base = per_method.get(baseline, {})
        rows: dict[str, dict[str, Any]] = {}
        for method, seeds in per_method.items():
            if method == baseline:
                continue
            shared = [
                s for s in seeds if s in base and math.isfinite(seeds[s]) and math.isfinite(base[s])
            ]
            row: dict[str, Any] = dict(
                paired_test([seeds[s] for s in shared], [base[s] for s in shared])
            )
            row["n"], row["seeds"] = len(shared), shared
            rows[method] = row
        for row, adj in zip(rows.values(), holm([r["p"] for r in rows.values()]), strict=True):
            row["holm_p"] = adj
        out["metrics"][metric] = rows
    return out


def _p(p: float) -> str:
    if not math.isfinite(p):
        return "–"
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


def _cell(row: Mapping[str, Any]) -> str:
    """004 Table 3's cell: ``n = 3; Δ = +0.090; d_z = 4.811; 95 % CI [...]; raw p …``."""
    if row["n"] < 2:
        return f"n = {row['n']}; too few matched seeds"

    def f(x: Any, sign: str = "") -> str:
        return "–" if x is None or not math.isfinite(x) else f"{x:{sign}.3f}"

    d_z = row["d_z"]
    dz = "–" if not math.isfinite(d_z) else f"{d_z:.3f}"
    return (
        f"n = {row['n']}; Δ = {f(row['mean_diff'], '+')}; d<sub>z</sub> = {dz}; 95 % CI "
        f"[{f(row['ci_low'])}, {f(row['ci_high'])}]; raw p {_p(row['p'])}; "
        f"Holm p {_p(row['holm_p'])}"
    )


def paired_html(paired: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """A table in the layout of 004 Table 3's paired columns, one row per method.

    Args:
        paired: :func:`paired_statistics`' result (``summary.json["paired"]``).
        labels: ``method -> display name``.
    """
    metrics = list(paired.get("metrics") or {})
    if not metrics:
        return ""
    base = labels.get(str(paired.get("baseline")), str(paired.get("baseline")))
    head = "".join(f"<th>{escape(m)}: paired statistics vs {escape(base)}</th>" for m in metrics)
    methods: dict[str, None] = {}
    for m in metrics:
        methods.update((k, None) for k in paired["metrics"][m])
    rows = []
    for method in methods:
        cells = [
            f"<td>{_cell(paired['metrics'][m][method])}</td>"
            if method in paired["metrics"][m]
            else "<td>–</td>"
            for m in metrics
        ]
        rows.append(f"<tr><td>{escape(labels.get(method, method))}</td>{''.join(cells)}</tr>")
    return (
        f"<p>Paired t-tests over matched seeds of each method vs {escape(base)} on the final "
        "test metric (fractions): Δ = mean(method − baseline), d<sub>z</sub> = Δ / sd, 95 % CI "
        "of Δ, two-sided raw p and Holm-corrected p (one family per metric).</p>\n"
        f'<table class="paired"><tr><th>method</th>{head}</tr>\n' + "\n".join(rows) + "</table>"
    )
