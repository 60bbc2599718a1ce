"""Paired statistics over matched seeds: each method vs a baseline (004 Table 3 columns).

For a metric and a method B compared with the baseline A over the n seeds both finished
(with finite values), the differences are d_i = B_i − A_i (so the sign says how B moved from
A; 004 Table 3 reports reference − method, the opposite sign). Then

* Δ = mean(d), sd = sample std of d (ddof = 1);
* effect size d_z = Δ / sd (Cohen's d for paired samples);
* 95 % CI of Δ: Δ ± t_{0.975, n−1} · sd / √n (``scipy.stats.t.ppf``);
* raw p: two-sided paired t-test (``scipy.stats.ttest_rel``);
* Holm p: Holm's step-down correction over the methods compared on that metric (one
  family per metric, as 004 Table 3 corrects its CDA and ASR columns separately);
* equivalence (fraction metrics — accuracy, F1, ASR …; others have no stated margin and are
  not tested): TOST (Schuirmann 1987) against a stated margin m — two one-sided t-tests of
  H₀: Δ ≤ −m and H₀: Δ ≥ +m, p_TOST = the larger one-sided p; the same decision as "the
  90 % CI of Δ lies inside (−m, m)". Its p-values get their own Holm family per metric.

A non-significant t-test is not evidence of equality (with 3 seeds the 95 % CI of an ASR
difference spans ≈ ±0.47 in 004's runs), so the verdict of each comparison is one of
"differs" (Holm p < α), "equivalent within ±m" (Holm-corrected TOST p < α) or
"inconclusive" (neither).

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

from geofl.report.stats import PERCENT_METRICS

__all__ = [
    "ALPHA",
    "EQUIVALENCE_MARGIN",
    "PAIRED_METRICS",
    "equivalence_test",
    "final_values",
    "holm",
    "paired_html",
    "paired_statistics",
    "paired_test",
    "verdict",
]

#: Final test metrics compared besides the task's primary one (CDA): the backdoor's ASR.
PAIRED_METRICS = ("asr",)

#: Significance level of every test and verdict here.
ALPHA = 0.05

#: Equivalence margin m of the TOST on fraction metrics (CDA, ASR): ±0.05, i.e. 5
#: percentage points. 004 Table 6 calls a 2–5 point CDA loss the price of privacy, so two
#: methods within ±5 points are "equal" for its purposes; a tighter margin could never be
#: shown with 3–5 seeds at the seed-to-seed spreads measured here (sd 0.03–0.2).
EQUIVALENCE_MARGIN = 0.05


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


def equivalence_test(
    method: Sequence[float],
    baseline: Sequence[float],
    margin: float = EQUIVALENCE_MARGIN,
    alpha: float = ALPHA,
) -> dict[str, float]:
    """TOST of ``method`` ≈ ``baseline`` within ±``margin`` (paired, aligned by seed).

    With d_i = method_i − baseline_i, Δ = mean(d), se = sd(d)/√n and df = n − 1:
    t_low = (Δ + m)/se with p_low = P(T ≥ t_low), t_high = (Δ − m)/se with p_high =
    P(T ≤ t_high); p_TOST = max(p_low, p_high). Equivalence at level α ⇔ p_TOST < α ⇔ the
    (1 − 2α) CI of Δ lies inside (−m, m) (Schuirmann 1987).

    Args:
        method: The method's values, one per seed.
        baseline: The baseline's values on the same seeds.
        margin: Equivalence margin m > 0 in the metric's units.
        alpha: Level of each one-sided test (the CI is 1 − 2α).

    Returns:
        ``{margin, tost_p, ci90_low, ci90_high}``; NaN where undefined (n < 2). With sd = 0
        the CI collapses to Δ and p_TOST is 0 if |Δ| < m, else 1.

    Raises:
        ValueError: If ``margin`` ≤ 0 or ``alpha`` is not in (0, 0.5).
    """
    if not margin > 0 or not 0 < alpha < 0.5:
        raise ValueError(f"need margin > 0 and 0 < alpha < 0.5, got {margin}, {alpha}")
    d = np.asarray(method, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    n, nan = int(d.size), math.nan
    out = {"margin": float(margin), "tost_p": nan, "ci90_low": nan, "ci90_high": nan}
    if n < 2:
        return out
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf(1 - alpha, n - 1)) * se
    out.update(ci90_low=mean - half, ci90_high=mean + half)
    if se == 0.0:
        out["tost_p"] = 0.0 if abs(mean) < margin else 1.0
        return out
    p_low = float(stats.t.sf((mean + margin) / se, n - 1))
    p_high = float(stats.t.cdf((mean - margin) / se, n - 1))
    out["tost_p"] = max(p_low, p_high)
    return out


def verdict(holm_p: float, tost_holm_p: float, alpha: float = ALPHA) -> str:
    """``"differs"``, ``"equivalent"`` or ``"inconclusive"`` from the Holm-corrected p-values.

    Equality is claimed only by the equivalence test, never by a large t-test p.
    """
    if math.isfinite(holm_p) and holm_p < alpha:
        return "differs"
    if math.isfinite(tost_holm_p) and tost_holm_p < alpha:
        return "equivalent"
    return "inconclusive"


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
    values: Mapping[str, Mapping[str, Mapping[int, float]]],
    baseline: str,
    margin: float = EQUIVALENCE_MARGIN,
) -> dict[str, Any]:
    """Paired and equivalence tests of every method vs ``baseline``, Holm per metric.

    Args:
        values: ``metric -> method -> seed -> final value`` (NaN for undefined).
        baseline: The reference method.
        margin: The TOST's equivalence margin (metric units).

    Returns:
        ``{"baseline", "difference", "margin", "alpha", "metrics": {metric: {method:
        paired_test(...) + equivalence_test(...) + holm_p + tost_holm_p + verdict +
        seeds}}}``; the baseline itself is not listed.
    """
    out: dict[str, Any] = {"baseline": baseline, "difference": "method − baseline"}
    out.update(margin=margin, alpha=ALPHA, metrics={})
    for metric, per_method in values.items():
        base = per_method.get(baseline, {})
        rows: dict[str, dict[str, Any]] = {}
        for method, seeds in per_method.items():
            if method == baseline:
                continue
            shared = [
                s for s in seeds if s in base and math.isfinite(seeds[s]) and math.isfinite(base[s])
            ]
            a, b = [seeds[s] for s in shared], [base[s] for s in shared]
            row: dict[str, Any] = dict(paired_test(a, b)) | _equivalence(metric, a, b, margin)
            row["n"], row["seeds"] = len(shared), shared
            rows[method] = row
        _correct(rows)
        out["metrics"][metric] = rows
    return out


def _equivalence(
    metric: str, a: Sequence[float], b: Sequence[float], margin: float
) -> dict[str, float]:
    """The TOST on a fraction metric; on others (loss, RMSE) a margin in their units is not
    stated, so the test is not run (NaN) and the verdict can only be differs/inconclusive."""
    if metric in PERCENT_METRICS:
        return equivalence_test(a, b, margin)
    return {"margin": math.nan, "tost_p": math.nan, "ci90_low": math.nan, "ci90_high": math.nan}


def _correct(rows: Mapping[str, dict[str, Any]]) -> None:
    """Holm over the family (one metric's rows), for the t-tests and the TOSTs separately."""
    family = list(rows.values())
    for row, adj, tost in zip(
        family,
        holm([r["p"] for r in family]),
        holm([r["tost_p"] for r in family]),
        strict=True,
    ):
        row["holm_p"], row["tost_holm_p"] = adj, tost
        row["verdict"] = verdict(adj, tost)


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
        f"Holm p {_p(row['holm_p'])}; {_tost(row)}: "
        f"<b>{escape(str(row.get('verdict', '–')))}</b>"
    )


def _tost(row: Mapping[str, Any]) -> str:
    margin = row.get("margin")
    if not isinstance(margin, int | float) or not math.isfinite(margin):
        return "no equivalence margin for this metric"
    return f"TOST ±{margin:g} Holm p {_p(row.get('tost_holm_p', math.nan))}"


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
    margin = paired.get("margin", EQUIVALENCE_MARGIN)
    return (
        f"<p>Paired t-tests over matched seeds of each method vs {escape(base)} on the final "
        "test metric (fractions): Δ = mean(method − baseline), d<sub>z</sub> = Δ / sd, 95 % CI "
        "of Δ, two-sided raw p and Holm-corrected p (one family per metric). Equality is "
        f"claimed only by a TOST with margin ±{margin:g} (Holm-corrected per metric): "
        "<i>differs</i> = Holm p &lt; 0.05, <i>equivalent</i> = TOST Holm p &lt; 0.05, "
        "<i>inconclusive</i> = neither (a large p is not evidence of equality).</p>\n"
        f'<table class="paired"><tr><th>method</th>{head}</tr>\n' + "\n".join(rows) + "</table>"
    )
