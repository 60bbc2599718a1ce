"""Report sections on privacy and aggregation (000 §4.4–4.6).

* :func:`epsilon_sentences` — the honest (ε, δ) of every method whose release adds Gaussian
  noise (``final.json["privacy"]``), with "no meaningful formal guarantee" when ε > 10.
* :func:`randomness_sentence` — where that noise came from (``privacy.randomness``):
  seeded (reproducible, and regenerable by whoever knows the config) or secure.
* :func:`attack_section` — the passive attribute-inference AUC
  (``analysis/attribute_inference.json``): a bar chart and a table, ours next to the paper's.
* :func:`weight_figures` — clients × rounds heatmaps of the JS-consistency aggregation
  weights (000 Eq. 15–16) of every method configured with ``weighting: consistency``.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

from geofl.errors import RunDirError
from geofl.report.fragments import figure_html, fmt_e, fmt_number, fmt_sci, slug
from geofl.report.paper import display_names
from geofl.report.privacy_plots import ATTRIBUTES, plot_aggregation_weights, plot_attack_auc
from geofl.report.run_data import RunData, num, read_json

__all__ = [
    "ATTACK_FILE",
    "CONSISTENCY_WEIGHTINGS",
    "MAX_WEIGHT_SEEDS",
    "MEANINGFUL_EPSILON",
    "attack_section",
    "epsilon_sentence",
    "epsilon_sentences",
    "neighbouring",
    "randomness_sentence",
    "weight_figures",
]

#: ε above which a guarantee is called not meaningful (a common rule of thumb: ε ≤ 10).
MEANINGFUL_EPSILON = 10.0

#: The analysis result read by :func:`attack_section`, relative to the run directory.
ATTACK_FILE = Path("analysis") / "attribute_inference.json"

#: Weighting names whose per-round weights get a heatmap.
CONSISTENCY_WEIGHTINGS = ("consistency",)

#: Seeds drawn per weights heatmap (one panel each; the first ones in run order).
MAX_WEIGHT_SEEDS = 3


# ---------------------------------------------------------------------------- ε sentence
def epsilon_sentence(label: str, privacies: list[dict[str, Any]]) -> str | None:
    """One plain-text sentence on the (ε, δ) of a method over its seeds.

    Args:
        label: The method's display name.
        privacies: ``final.json["privacy"]`` of each finished seed.

    Returns:
        The sentence, or None when ``privacies`` is empty (the method adds no noise).
    """
    if not privacies:
        return None
    eps: list[float] = []
    for p in privacies:
        value = num(p.get("epsilon_max"))
        if math.isfinite(value):
            eps.append(value)
        elif p.get("epsilon_per_client"):  # null for an infinite ε (strict JSON)
            eps.append(math.inf)
    deltas = sorted({num(p.get("delta")) for p in privacies if math.isfinite(num(p.get("delta")))})
    accountants = sorted({str(p.get("accountant") or "?").upper() for p in privacies})
    z_lo = [num(p.get("noise_multiplier_min")) for p in privacies]
    z_hi = [num(p.get("noise_multiplier_max")) for p in privacies]
    z_lo, z_hi = [z for z in z_lo if math.isfinite(z)], [z for z in z_hi if math.isfinite(z)]
    if not eps:
        return f"{label}: ε not available (no client's release was accounted)."
    epsilon = max(eps)
    at = " or ".join(fmt_sci(d) for d in deltas) or "?"
    details = ["max over clients and seeds", "/".join(accountants)]
    if z_lo and z_hi:
        lo, hi = min(z_lo), max(z_hi)
        # DP-SGD (001): σ of Poisson-sampled steps; 000's update noise: z = σ/(2C)
        what = (
            "DP-SGD noise multiplier σ"
            if all(p.get("record_level") for p in privacies)
            else "noise multiplier z = σ/(2C)"
        )
        details.append(
            f"{what} = {fmt_e(lo)}" if lo == hi else f"{what} between {fmt_e(lo)} and {fmt_e(hi)}"
        )
    digits = 2 if epsilon > MEANINGFUL_EPSILON else 3
    sentence = f"{label}: ε = {fmt_number(epsilon, digits)} at δ = {at} ({'; '.join(details)})."
    if epsilon > MEANINGFUL_EPSILON:
        sentence += (
            " A Gaussian mechanism this weak gives no meaningful formal guarantee: the "
            "perturbation is a heuristic defence."
        )
    return sentence


def epsilon_sentences(run: RunData) -> list[str]:
    """:func:`epsilon_sentence` of each method with ``final.json["privacy"]`` (config order)."""
    names = display_names(run)
    out = []
    for method, seeds in run.methods.items():
        privacies = [
            r.final["privacy"]
            for r in seeds.values()
            if r.final is not None and isinstance(r.final.get("privacy"), dict)
        ]
        sentence = epsilon_sentence(names[method], privacies)
        if sentence is not None:
            out.append(sentence)
    return out


def neighbouring(run: RunData) -> str | None:
    """The neighbouring relation of the accounting (first ``final.json`` that states it)."""
    for seeds in run.methods.values():
        for r in seeds.values():
            p = (r.final or {}).get("privacy")
            if isinstance(p, dict) and p.get("neighbouring"):
                return str(p["neighbouring"])
    return None


#: What each ``privacy.randomness`` mode means for the ε above (one sentence each).
RANDOMNESS_MEANING = {
    "seeded": (
        "seeded — noise and Poisson batches derive from (seed, round, client), so the run "
        "is reproducible bit for bit, but anyone who knows the config and seed (a "
        "deployment's server included) can regenerate and remove the noise: the ε holds "
        "only against parties without them"
    ),
    "secure": (
        "secure — every client step draws its noise and batches from a fresh secret from "
        "the OS CSPRNG (DP-FTRL's tree noise from a server-held secret), so no other party "
        "can regenerate them; the run is not reproducible"
    ),
}


def randomness_sentence(run: RunData) -> str | None:
    """One sentence on where the accounted noise came from (``randomness`` in
    ``final.json["privacy"]`` / ``["server_privacy"]``; absent: seeded, as every run was
    before the field existed); None when no seed reports privacy."""
    modes: set[str] = set()
    for seeds in run.methods.values():
        for r in seeds.values():
            for key in ("privacy", "server_privacy"):
                p = (r.final or {}).get(key)
                if isinstance(p, dict):
                    modes.add(str(p.get("randomness") or "seeded"))
    if not modes:
        return None
    parts = [RANDOMNESS_MEANING.get(m, m) for m in sorted(modes)]
    return "Randomness (privacy.randomness): " + "; ".join(parts) + "."


# ---------------------------------------------------------------------------- attack
def _auc(x: Any, digits: int = 3) -> str:
    v = num(x)
    return f"{v:.{digits}f}" if math.isfinite(v) else "–"


def _result(entry: dict[str, Any], attr: str) -> dict[str, Any]:
    found = entry.get(attr)
    return found if isinstance(found, dict) else {}


def _pct(x: Any) -> str:
    v = num(x)
    return f"{100 * v:.2f}" if math.isfinite(v) else "–"


def _attr_cells(entry: dict[str, Any], paper: dict[str, Any], attr: str) -> str:
    res = _result(entry, attr)
    folds = ", ".join(_auc(a) for a in res.get("fold_auc") or []) or "–"
    n, pos = num(res.get("n_samples")), num(res.get("positive_fraction"))
    size = (
        f"<br><small>n = {n:.0f}, {100 * pos:.0f} % positive</small>"
        if math.isfinite(n) and math.isfinite(pos)
        else ""
    )
    return (
        f'<td class="num">{_auc(res.get("auc"))}{size}</td>'
        f'<td class="num">{_auc(paper.get(attr), 4)}</td>'
        f'<td class="num"><small>{folds}</small></td>'
    )


def _attack_table(
    methods: list[str],
    label: dict[str, str],
    entries: dict[str, dict[str, Any]],
    papers: dict[str, dict[str, Any]],
) -> str:
    """The attack table: per method and attribute our AUC, the paper's, per fold."""
    head = (
        '<tr><th rowspan="2">Method</th>'
        + "".join(f'<th colspan="3">{name} attribute AUC</th>' for _, name, _ in ATTRIBUTES)
        + '<th colspan="2">best-val test acc (%)</th></tr><tr>'
        + "<th>ours</th><th>paper</th><th>per fold</th>" * len(ATTRIBUTES)
        + "<th>ours</th><th>paper</th></tr>"
    )
    rows = [
        f"<tr><td>{escape(label[m])}</td>"
        + "".join(_attr_cells(entries[m], papers[m], a) for a, _, _ in ATTRIBUTES)
        + f'<td class="num">{_pct(entries[m].get("best_val_test_accuracy"))}</td>'
        + f'<td class="num">{_pct(papers[m].get("best_test_accuracy"))}</td></tr>'
        for m in methods
    ]
    return f'<table class="attack">{head}\n' + "\n".join(rows) + "</table>"


def attack_section(run: RunData, out: Path) -> str:
    """Bar chart (``attack_auc.png``) and table of ``analysis/attribute_inference.json``.

    Args:
        run: The loaded run.
        out: The report folder.

    Returns:
        The section's HTML, ``""`` when the run has no attack result (a stale chart is
        removed).

    Raises:
        RunDirError: The file is not valid JSON or not an object with ``methods``.
    """
    path = run.run_dir / ATTACK_FILE
    chart = out / "attack_auc.png"
    if not path.is_file():
        chart.unlink(missing_ok=True)
        return ""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("methods"), dict):
        raise RunDirError(
            f"{path}: expected an object with 'methods'; re-run the attribute_inference analysis"
        )
    results: dict[str, Any] = data["methods"]
    found = data.get("paper")
    paper_all: dict[str, Any] = found if isinstance(found, dict) else {}
    names = display_names(run)
    methods = [m for m in run.methods if m in results] + [m for m in results if m not in names]
    label = {m: names.get(m, m) for m in methods}
    entries = {m: results[m] if isinstance(results[m], dict) else {} for m in methods}
    papers = {m: p if isinstance(p := paper_all.get(m), dict) else {} for m in methods}
    plot_attack_auc(
        {
            label[m]: {a: num(_result(entries[m], a).get("auc")) for a, _, _ in ATTRIBUTES}
            for m in methods
        },
        chart,
        paper={label[m]: {a: num(papers[m].get(a)) for a, _, _ in ATTRIBUTES} for m in methods},
    )
    table = _attack_table(methods, label, entries, papers)
    caption = (
        "ROC-AUC of an honest-but-curious server inferring whether a client is "
        "<em>high-risk</em> or <em>low-entropy</em> from the updates it receives "
        "(cf. paper 000 Fig. 9). Solid bars: ours; hatched: the paper's; dashed line: "
        "chance (0.5). Lower is better for the defence."
    )
    protocol = escape(str(data.get("protocol") or "not recorded"))
    return (
        figure_html("attack_auc.png", caption, "Attribute-inference attack AUC per method")
        + f"<p><small>Protocol: {protocol}.</small></p>"
        + table
    )


# ---------------------------------------------------------------------------- weights
def _num_clients(run: RunData, method: str) -> int | None:
    for r in run.methods[method].values():
        k = (r.final or {}).get("num_clients")
        if isinstance(k, int):
            return k
        sizes = (r.partition or {}).get("sizes")
        if isinstance(sizes, list) and sizes:
            return len(sizes)
    return None


def weight_figures(run: RunData, out: Path) -> list[str]:
    """A weights heatmap for each method with ``weighting: consistency``.

    One panel per seed, for the first :data:`MAX_WEIGHT_SEEDS` seeds.

    Args:
        run: The loaded run (its ``config.yaml`` names each method's weighting).
        out: The report folder (``weights-*.png`` files there are replaced).

    Returns:
        One ``<figure>`` per such method.
    """
    for stale in out.glob("weights-*.png"):
        stale.unlink()
    names = display_names(run)
    blocks = []
    for i, method in enumerate(run.methods):
        weighting = run.method_config(method).get("weighting")
        if not isinstance(weighting, dict) or weighting.get("name") not in CONSISTENCY_WEIGHTINGS:
            continue
        params = ", ".join(f"{k}={v}" for k, v in weighting.items() if k != "name")
        file = f"weights-{i:02d}-{slug(method)}.png"
        title = f"{names[method]}: {weighting['name']} weights" + (f" ({params})" if params else "")
        seeds = dict(list(run.methods[method].items())[:MAX_WEIGHT_SEEDS])
        plot_aggregation_weights(
            seeds, out / file, num_clients=_num_clients(run, method), title=title
        )
        shown = ", ".join(str(s) for s in seeds)
        extra = escape(f", {params}") if params else ""
        caption = (
            f"Aggregation weights of <strong>{escape(names[method])}</strong> "
            f"(JS-consistency weighting, paper 000 Eq. 15–16{extra}): normalised weight of "
            f"each client (rows) per round (columns), one panel per seed ({shown}); "
            "blank where the client's update was not aggregated. Client labels name the risk "
            "level reported by the client's release (high / mid / low), when it has one."
        )
        blocks.append(figure_html(file, caption, f"Aggregation weights of {method}"))
    return blocks
