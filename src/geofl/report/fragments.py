"""Small HTML pieces shared by the report sections (figures, file names, numbers).

Every string that comes from the run directory is escaped by the caller or here, as noted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

__all__ = [
    "BADGE_INCOMPLETE",
    "EMPTY",
    "Column",
    "figure_html",
    "fmt_e",
    "fmt_number",
    "fmt_sci",
    "partition_figure_name",
    "partition_text",
    "slug",
    "table_html",
]

#: Marks a method with unfinished seeds (no ``final.json``).
BADGE_INCOMPLETE = '<span class="badge">incomplete</span>'

_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def slug(name: str) -> str:
    """A file-name-safe form of ``name`` (``"method"`` if nothing is left)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "method"


def partition_figure_name(index: int, method: str) -> str:
    """File name of the partition heatmap of the ``index``-th method (0-based, in config
    order), e.g. ``partition-01-fedavg.png``; the report and ``geofl data describe`` share it.
    """
    return f"partition-{index:02d}-{slug(method)}.png"


def partition_text(name: str, params: Mapping[str, Any] | None = None) -> str:
    """A partitioner and its parameters as prose.

    E.g. ``iid``, ``dirichlet (alpha=0.1, min_samples=20)``, ``group by region`` (for
    ``group`` with ``key=region`` and for ``region``). Not escaped.
    """
    rest = dict(params or {})
    if name == "region":
        name, rest = "group", {"key": "region", **rest}
    if name == "group" and "key" in rest:
        name = f"group by {rest.pop('key')}"
    if rest:
        name += " (" + ", ".join(f"{k}={v}" for k, v in rest.items()) + ")"
    return name


def figure_html(src: str, caption: str, alt: str) -> str:
    """A ``<figure>``; ``caption`` is HTML (already escaped), ``src`` and ``alt`` plain text."""
    return (
        f'<figure><img src="{escape(src)}" alt="{escape(alt)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def fmt_sci(x: float, digits: int = 2) -> str:
    """Scientific notation as plain text: ``5e7`` → ``"5.0 × 10⁷"``, ``1e-5`` → ``"10⁻⁵"``.

    A mantissa of 1 is dropped; ``inf`` → ``"∞"``, NaN → ``"–"``.

    Args:
        x: The number.
        digits: Significant digits of the mantissa.
    """
    if math.isnan(x):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    if float(mantissa) in (1.0, -1.0):
        return power if float(mantissa) > 0 else f"−{power}"
    return f"{mantissa} × {power}"


def fmt_number(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits, in :func:`fmt_sci` form if tiny or huge."""
    if math.isfinite(x) and (x == 0 or 1e-2 <= abs(x) < 1e3):
        return f"{x:.{digits}g}"
    return fmt_sci(x, digits)


def fmt_e(x: float) -> str:
    """Compact e-notation for small factors: ``2.5e-4``, ``0.5`` (plain when 0.01 ≤ x < 1000)."""
    if not math.isfinite(x) or x == 0 or 1e-2 <= abs(x) < 1e3:
        return f"{x:.2g}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


#: What an empty table cell shows.
EMPTY = "–"


@dataclass(frozen=True)
class Column:
    """One column of a report table.

    Attributes:
        header: The header cell's content (HTML, escaped by the caller).
        cells: One cell content per row (HTML); :data:`EMPTY` marks a missing value.
        numeric: Right-aligned tabular digits (``class="num"``).
        keep: Shown even when every cell is empty (e.g. the method column).
    """

    header: str
    cells: list[str]
    numeric: bool = False
    keep: bool = False

    @property
    def empty(self) -> bool:
        """True when no row has a value."""
        return all(cell == EMPTY for cell in self.cells)


def table_html(
    columns: Sequence[Column], row_classes: Sequence[str] = (), css_class: str = ""
) -> str:
    """A ``<table>`` of ``columns``, leaving out those with no value in any row.

    Args:
        columns: The columns, all with the same number of cells.
        row_classes: A CSS class per row (``""``: none); default none.
        css_class: The table's CSS class (``""``: none).
    """
    shown = [c for c in columns if c.keep or not c.empty]
    n = len(shown[0].cells) if shown else 0
    classes = list(row_classes) or [""] * n
    head = "".join(f"<th>{c.header}</th>" for c in shown)
    rows = []
    for i in range(n):
        flag = f' class="{classes[i]}"' if classes[i] else ""
        cells = "".join(
            f'<td class="num">{c.cells[i]}</td>' if c.numeric else f"<td>{c.cells[i]}</td>"
            for c in shown
        )
        rows.append(f"<tr{flag}>{cells}</tr>")
    attr = f' class="{css_class}"' if css_class else ""
    return (
        f"<table{attr}><thead><tr>{head}</tr></thead><tbody>" + "\n".join(rows) + "</tbody></table>"
    )
