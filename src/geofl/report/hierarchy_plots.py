"""The hierarchy's timeline figure: LEO passes that carried driver models, LEO → GEO relays,
GEO aggregations and downlinks to the drivers on the simulated clock (003 §2.3.2–2.3.4)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from geofl.report.style import legend, new_figure, save, style

__all__ = ["TimelineEvent", "plot_timeline"]

#: ``(t_s, kind, leo, cluster)`` as the records' ``hierarchy.events`` hold them.
TimelineEvent = tuple[float, str, int, int]


def plot_timeline(
    events: Sequence[TimelineEvent], path: Path, *, title: str, hours: float | None = None
) -> Path:
    """One row per LEO that appears in ``events`` (driver models arriving in a pass: dots;
    relays to the GEO: triangles just above), a GEO row (aggregations: stars, also as
    vertical lines) and a driver row (the global model reaching a cluster's driver), over
    simulated hours.

    Args:
        events: The run's timeline events, any order.
        path: PNG to write.
        title: Figure title.
        hours: Draw only ``[0, hours)`` (None: everything).
    """
    evs = [e for e in events if hours is None or e[0] < hours * 3600.0]
    n_leo = 1 + max((e[2] for e in evs), default=-1)
    geo_row, driver_row = n_leo, -1
    fig = new_figure((8.0, 3.2 + 0.15 * n_leo))
    ax = fig.subplots()

    def xs(kind: str) -> list[float]:
        return [e[0] / 3600.0 for e in evs if e[1] == kind]

    for kind, size, marker, c, label, lift in (
        ("uplink", 16, "o", "#1f77b4", "driver → LEO (pass)", 0.0),
        ("relay", 30, "^", "#ff7f0e", "LEO → GEO relay (drawn above its LEO)", 0.3),
    ):
        at = [(e[0] / 3600.0, e[2] + lift) for e in evs if e[1] == kind]
        if at:
            ax.scatter(
                [x for x, _ in at], [y for _, y in at], s=size, marker=marker, c=c, label=label
            )
    geo, down = xs("geo"), xs("downlink")
    for x in geo:
        ax.axvline(x, color="#d62728", lw=0.6, alpha=0.4)
    if geo:
        ax.scatter(
            geo, [geo_row] * len(geo), s=60, marker="*", c="#d62728", label="GEO aggregation"
        )
    if down:
        ax.scatter(
            down,
            [driver_row] * len(down),
            s=10,
            marker="v",
            c="#2ca02c",
            label="GEO model → driver",
        )
    ax.set_yticks([driver_row, *range(n_leo), geo_row])
    ax.set_yticklabels(["drivers", *(f"LEO {i}" for i in range(n_leo)), "GEO"])
    style(ax, title, "simulated time (h)", "")
    legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return save(fig, Path(path))
