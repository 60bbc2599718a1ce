"""The report's uplink table (003 §3.1.4, Tables 6–8): per method with ``method.uplink``,
mean bytes per tractor and round by hop (the encoded, sealed bytes), delivery ratio, pipeline
shares of the delivered updates, forwarded uploads, energy proxy Σ P_tx·t_i, latency of the
delivered updates and envelope rejections — mean ± std over finished seeds; with a method
named ``fedavg`` (uploading through the uplink too), Table 6's byte reduction and Table 7's
normalised energy from the records' encoded bytes; ``""`` when no method has an uplink."""

from __future__ import annotations

import math
from collections import Counter
from html import escape

from geofl.records import RoundRecord
from geofl.report.summary import MethodSummary, RunData, Stat, format_pm, make_stat

__all__ = ["uplink_html"]

HOPS = ("tractor_server", "tractor_neighbour", "neighbour_server")
PIPELINES = ("compressed", "chunked", "fallback", "raw", "paq")
#: The method Tables 6–7 normalise by (003: vanilla FedAvg), when the run has it.
REFERENCE = "fedavg"


def _seed_figures(rounds: list[RoundRecord]) -> dict[str, float] | None:
    """One seed's figures, or None when its records carry no uplink."""
    ups = [r.uplink for r in rounds if r.uplink is not None]
    if not ups:
        return None
    slots = sum(len(r.cohort) - len(r.excluded) for r in rounds) or 1
    hops: Counter[str] = Counter()
    status: Counter[str] = Counter()
    pipes: Counter[str] = Counter()
    for up in ups:
        hops.update(up.get("bytes_by_hop", {}))
        status.update(up.get("status", {}))
        pipes.update(up.get("pipeline", {}))
    delivered = status.get("delivered", 0)
    out = {hop: hops.get(hop, 0) / slots for hop in HOPS}
    out["delivery"] = delivered / max(1, sum(status.values()))
    for p in PIPELINES:
        out[p] = pipes.get(p, 0) / max(1, delivered)
    out["forwarded"] = sum(int(up.get("forwarded", 0)) for up in ups) / max(1, delivered)
    out["energy"] = sum(float(up.get("energy", 0.0)) for up in ups) / slots
    out["rejections"] = float(sum(ups[-1].get("envelope_rejections", {}).values()))
    out["total"] = sum(hops.values()) / slots
    out["latency"], out["latency_local"] = _latency(ups)
    return out


def _latency(ups: list[dict[str, object]]) -> tuple[float, float]:
    """Mean creation → server latency and its local-hop part (s) over the delivered
    updates of a seed (each round's mean weighted by its deliveries); NaN if none."""
    num = local = den = 0.0
    for up in ups:
        status = up.get("status")
        n = float(status.get("delivered", 0)) if isinstance(status, dict) else 0.0
        lat, loc = up.get("latency_s"), up.get("latency_local_s")
        if n > 0 and isinstance(lat, int | float) and math.isfinite(lat):
            num += n * float(lat)
            local += n * float(loc) if isinstance(loc, int | float) and math.isfinite(loc) else 0.0
            den += n
    return (num / den, local / den) if den else (math.nan, math.nan)


def _relative(stat: dict[str, Stat], ref: dict[str, Stat] | None) -> tuple[str, str]:
    """Table 6's byte reduction and Table 7's normalised energy vs FedAvg (means), or "–"."""
    if ref is None or not ref["total"]["mean"] or not ref["energy"]["mean"]:
        return "–", "–"
    red = 100.0 * (1.0 - (stat["total"]["mean"] or 0.0) / ref["total"]["mean"])
    return f"{red:.1f}", f"{(stat['energy']['mean'] or 0.0) / ref['energy']['mean']:.2f}"


def uplink_html(run: RunData, methods: dict[str, MethodSummary]) -> str:
    """``<h2>Uplink</h2>`` and a table of the methods whose rounds carry uplink figures."""
    rows, names = [], run.display_names()
    stats: dict[str, dict[str, Stat]] = {}
    for method, ms in methods.items():
        seeds = [int(s) for s in ms["seeds_done"]]
        figs = [
            f
            for s in seeds
            if s in run.methods[method]
            and (f := _seed_figures(run.methods[method][s].rounds)) is not None
        ]
        if not figs:
            continue
        stat: dict[str, Stat] = {k: make_stat([f[k] for f in figs]) for k in figs[0]}
        stats[method] = stat
    for method, stat in stats.items():
        cells = [f"<td>{escape(names.get(method, method))}</td>"]
        cells += [f'<td class="num">{format_pm(stat[h], scale=1e-3, digits=1)}</td>' for h in HOPS]
        cells += [
            f'<td class="num">{format_pm(stat[k], digits=1)}</td>'
            for k in ("delivery", *PIPELINES, "forwarded")
        ]
        cells.append(f'<td class="num">{format_pm(stat["energy"], scale=1.0, digits=3)}</td>')
        cells += [
            f'<td class="num">{format_pm(stat[k], scale=1.0, digits=2)}</td>'
            for k in ("latency", "latency_local")
        ]
        cells.append(f'<td class="num">{format_pm(stat["rejections"], scale=1.0, digits=0)}</td>')
        cells += [f'<td class="num">{v}</td>' for v in _relative(stat, stats.get(REFERENCE))]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    if not rows:
        return ""
    ref = names.get(REFERENCE, REFERENCE)
    head = [
        "method",
        *(f"kB / tractor·round<br>{h.replace('_', ' → ')}" for h in HOPS),
        "delivered %",
        *(f"{p} %" for p in PIPELINES),
        "forwarded %",
        "energy proxy (J / tractor·round)",
        "latency (s)",
        "of which local hop (s)",
        "envelopes rejected",
        f"bytes reduction vs {escape(ref)} % (Table 6)",
        f"energy / {escape(ref)} (Table 7)",
    ]
    header = "".join(f"<th>{h}</th>" for h in head)
    intro = (
        "003 ground-layer uplink: encoded and sealed bytes per sampled tractor and round by "
        "hop, delivery ratio, shares of the delivered updates per pipeline (Table 8), "
        "forwarded uploads, Σ P_tx·t_i, mean creation → server latency of the delivered "
        "updates (and its tractor → neighbour part; §3.1.4's latency decomposition), "
        "envelopes refused by receivers (tampered, replayed)"
    )
    return (
        f"<h2>Uplink</h2>\n<p>{intro}.</p>\n<table><thead><tr>{header}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
