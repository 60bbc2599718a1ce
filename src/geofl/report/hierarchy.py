"""The report's hierarchy table (003 §3.1.4, Table 10): per method with ``method.hierarchy``,
the staleness of the updates the GEO incorporated (mean, GEO-weighted mean, share of the GEO
weight per staleness bucket), delivery ratio per hop, latency per hop (terrestrial uplink,
waiting for a LEO pass, waiting for a relay slot, downlink, creation → incorporation),
bytes per tractor and round per hop (encoded and sealed), the energy proxy Σ P_tx·t per
tractor and round of the uplink hops (tractor → driver: the ground uplink's; driver → LEO,
LEO → GEO: P_tx · 8·bytes / rate with the configured satellite link rates and powers) and
refused space-hop envelopes — mean ± std over finished seeds; ``""`` when no method has a
hierarchy."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from geofl.hierarchy.staleness import STALENESS_BUCKETS, staleness_table
from geofl.records import RoundRecord
from geofl.report.fragments import figure_html, slug
from geofl.report.hierarchy_plots import plot_timeline
from geofl.report.stats import Stat, format_pm, make_stat
from geofl.report.summary import MethodSummary, RunData

__all__ = ["hierarchy_figures", "hierarchy_html", "timeline_figures"]

#: Staleness buckets of Table 10 (the last is "this or more").
BUCKETS = (0, 1, 2, 3)
DELIVERY = ("tractor_driver", "driver_leo", "leo_geo", "driver_tractor")
LATENCY = ("terrestrial", "pass_wait", "relay_wait", "downlink", "end_to_end")
#: Table 10's buckets as labelled in the records.
T10 = tuple(f"{lo}+" if hi is None else f"{lo}-{hi}" for lo, hi in STALENESS_BUCKETS)
BYTES = ("tractor_driver", "driver_leo", "leo_geo", "geo_leo", "leo_driver", "driver_tractor")
#: Uplink hops with an energy proxy (003 §3.1.4, Table 7: tractor → driver + driver → LEO).
ENERGY = ("tractor_driver", "driver_leo", "leo_geo")


def _weighted_latency(blocks: Sequence[Mapping[str, Any]], hop: str) -> float:
    """Mean latency of ``hop`` over a seed: each round's mean weighted by its count."""
    num = den = 0.0
    for b in blocks:
        lat, n = b.get("latency_s", {}).get(hop), b.get("latency_n", {}).get(hop, 0)
        if n and isinstance(lat, int | float) and math.isfinite(lat):
            num, den = num + n * float(lat), den + n
    return num / den if den else math.nan


def hierarchy_figures(rounds: list[RoundRecord]) -> dict[str, float] | None:
    """One seed's figures, or None when its records carry no hierarchy block."""
    blocks = [r.hierarchy for r in rounds if r.hierarchy is not None]
    if not blocks:
        return None
    stale = [int(s) for b in blocks for s in b.get("staleness", [])]
    weight = [float(w) for b in blocks for w in b.get("geo_weight", [])]
    total_w = sum(weight)
    out: dict[str, float] = {
        "staleness": sum(stale) / len(stale) if stale else math.nan,
        "staleness_weighted": (
            sum(s * w for s, w in zip(stale, weight, strict=True)) / total_w
            if total_w
            else math.nan
        ),
    }
    for k in BUCKETS:
        inside = [
            w for s, w in zip(stale, weight, strict=True) if s == k or (k == BUCKETS[-1] and s > k)
        ]
        out[f"weight_{k}"] = sum(inside) / total_w if total_w else math.nan
    sent: Counter[str] = Counter()
    delivered: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    energy: Counter[str] = Counter()
    refused = 0
    for b in blocks:
        sent.update(b.get("sent", {}))
        delivered.update(b.get("delivered", {}))
        nbytes.update(b.get("bytes_by_hop", {}))
        energy.update(b.get("energy_by_hop", {}))
        refused += sum(sum(r.values()) for r in (b.get("envelope_rejections") or {}).values())
    metric = [
        math.nan if v is None else float(v)
        for b in blocks
        for v in (b.get("update_metric") or [None] * len(b.get("staleness", [])))
    ]
    for bucket in staleness_table(stale, weight, metric):
        for key in ("fraction", "contribution", "metric"):
            value = getattr(bucket, key)
            out[f"t10_{key}_{bucket.label}"] = math.nan if value is None else value
    for hop in DELIVERY:
        out[f"delivery_{hop}"] = delivered[hop] / sent[hop] if sent[hop] else math.nan
    for hop in LATENCY:
        out[f"latency_{hop}"] = _weighted_latency(blocks, hop)
    slots = sum(len(r.cohort) for r in rounds) or 1
    for hop in BYTES:
        out[f"bytes_{hop}"] = nbytes[hop] / slots
    for hop in ENERGY:
        out[f"energy_{hop}"] = energy[hop] / slots
    out["energy_uplink"] = sum(energy[hop] for hop in ENERGY) / slots
    out["refused"] = float(refused)
    return out


def _arrow(hop: str) -> str:
    return hop.replace("_", " → ").replace("leo", "LEO").replace("geo", "GEO")


def timeline_figures(run: RunData, out: Path, *, hours: float = 8.0) -> list[str]:
    """``hierarchy_timeline_<method>.png`` of the first finished seed of every method whose
    records carry timeline events (the first ``hours`` simulated hours), as HTML figures."""
    names, blocks = run.display_names(), []
    for method, seeds in run.methods.items():
        for seed, r in sorted(seeds.items()):
            events = [
                (float(t), str(kind), int(leo), int(cluster))
                for rec in r.rounds
                if rec.hierarchy is not None
                for t, kind, leo, cluster, *_ in rec.hierarchy.get("events", [])
            ]
            if not any(e[1] == "uplink" for e in events):
                continue
            label = names.get(method, method)
            name = f"hierarchy_timeline_{slug(method)}.png"
            plot_timeline(events, out / name, title=f"{label}, seed {seed}", hours=hours)
            caption = (
                f"{escape(label)}, seed {seed}: the first {hours:g} simulated hours — driver "
                "models reaching a LEO in a pass, LEO → GEO relays, GEO aggregations (vertical "
                "lines) and the global model reaching the drivers."
            )
            blocks.append(figure_html(name, caption, f"hierarchy timeline of {label}"))
            break
    return blocks


def hierarchy_html(run: RunData, methods: dict[str, MethodSummary], out: Path | None = None) -> str:
    """``<h2>Hierarchy</h2>``, a table of the methods whose rounds carry hierarchy blocks and,
    with ``out``, their timeline figures."""
    names, rows = run.display_names(), []
    for method, ms in methods.items():
        figs = [
            f
            for s in (int(s) for s in ms["seeds_done"])
            if s in run.methods[method]
            and (f := hierarchy_figures(run.methods[method][s].rounds)) is not None
        ]
        if not figs:
            continue
        stat: dict[str, Stat] = {k: make_stat([f[k] for f in figs]) for k in figs[0]}
        rows.append(_method_row(names.get(method, method), stat))
    if not rows:
        return ""
    header = "".join(f"<th>{h}</th>" for h in _table_head())
    figures = "" if out is None else "\n".join(timeline_figures(run, out))
    return (
        f"<h2>Hierarchy</h2>\n<p>{_INTRO}.</p>\n<table><thead><tr>{header}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>\n{figures}"
    )


#: The paragraph above the hierarchy table.
_INTRO = (
    "003 space-assisted hierarchy: staleness t − t' of the tractor updates the GEO "
    "incorporated and the share of the GEO update at each staleness; Table 10 per "
    "bucket 0-1 / 2-3 / 4+ rounds: share of the updates, share of the GEO update and the "
    "test metric (AUC for Task B) of the regional models w̄_l that carried them, "
    "weighted by their update counts (the paper does not define its AUC per bucket); "
    "delivery "
    "ratio per hop, simulated latency per hop (terrestrial uplink, waiting for a LEO "
    "pass, waiting for a relay slot, GEO aggregation → driver, creation → incorporation; "
    "§3.1.4's decomposition), encoded and sealed bytes per sampled tractor and round per "
    "hop, and the energy proxy Σ P_tx·t of the uplink hops per sampled tractor and round "
    "(the satellite hops' rates and powers are configuration, hierarchy.links: the paper "
    "gives none)"
)


def _method_row(name: str, stat: dict[str, Stat]) -> str:
    """One method's ``<tr>``: mean ± sd over its seeds of every column of :func:`_table_head`."""
    cells = [f"<td>{escape(name)}</td>"]
    cells += [
        f'<td class="num">{format_pm(stat[k], scale=1.0)}</td>'
        for k in ("staleness", "staleness_weighted")
    ]
    cells += [f'<td class="num">{format_pm(stat[f"weight_{k}"], digits=1)}</td>' for k in BUCKETS]
    for label in T10:
        cells += [
            f'<td class="num">{format_pm(stat[f"t10_{k}_{label}"], digits=1)}</td>'
            for k in ("fraction", "contribution")
        ]
        cells.append(f'<td class="num">{format_pm(stat[f"t10_metric_{label}"], scale=1.0)}</td>')
    cells += [
        f'<td class="num">{format_pm(stat[f"delivery_{h}"], digits=1)}</td>' for h in DELIVERY
    ]
    cells += [
        f'<td class="num">{format_pm(stat[f"latency_{h}"], scale=1.0, digits=1)}</td>'
        for h in LATENCY
    ]
    cells += [
        f'<td class="num">{format_pm(stat[f"bytes_{h}"], scale=1e-3, digits=1)}</td>' for h in BYTES
    ]
    cells += [
        f'<td class="num">{format_pm(stat[k], scale=1.0, digits=4)}</td>'
        for k in (*(f"energy_{h}" for h in ENERGY), "energy_uplink")
    ]
    cells.append(f'<td class="num">{format_pm(stat["refused"], scale=1.0, digits=0)}</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def _table_head() -> list[str]:
    """The hierarchy table's column headings."""
    return [
        "method",
        "staleness (rounds)",
        "GEO-weighted staleness",
        *(f"GEO weight at staleness {k}{'+' if k == BUCKETS[-1] else ''} %" for k in BUCKETS),
        *(
            h
            for label in T10
            for h in (f"updates % at {label}", f"GEO weight % at {label}", f"test AUC at {label}")
        ),
        *(f"delivered % {_arrow(h)}" for h in DELIVERY),
        *(f"latency (s) {h.replace('_', ' ')}" for h in LATENCY),
        *(f"kB / tractor·round {_arrow(h)}" for h in BYTES),
        *(f"energy (J / tractor·round) {_arrow(h)}" for h in ENERGY),
        "energy (J / tractor·round) uplink total",
        "space-hop envelopes refused",
    ]
