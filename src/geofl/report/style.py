"""The house style of the report's figures: size, palette, axes style, legends, saving.

Every figure is drawn on its own :class:`matplotlib.figure.Figure` (no pyplot, no global
state) and written as PNG atomically. A method keeps one colour in every figure (its
position in the run's method order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from geofl.io import atomic_write

__all__ = [
    "SIZE",
    "colour",
    "legend",
    "new_figure",
    "no_data",
    "outside_legend",
    "plain",
    "save",
    "style",
]

#: Default figure size in inches.
SIZE = (7.0, 4.0)
_DPI = 120
_PALETTE = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
]

#: Legend frame: opaque, so that a legend over data stays readable.
_FRAME = {"frameon": True, "framealpha": 0.95, "facecolor": "white", "edgecolor": "#cccccc"}


def colour(i: int) -> str:
    """Colour of the ``i``-th method of a run (the palette repeats after 10)."""
    return _PALETTE[i % len(_PALETTE)]


def new_figure(size: tuple[float, float] = SIZE) -> Figure:
    """A constrained-layout Figure in the house size and resolution (no pyplot)."""
    return Figure(figsize=size, dpi=_DPI, layout="constrained")


def plain(text: object) -> str:
    """Escape ``$`` so that strings from the run dir are never parsed as mathtext."""
    return str(text).replace("$", r"\$")


def style(ax: Axes, title: str, xlabel: str, ylabel: str, grid: bool = True) -> None:
    """The house style, set per axes (no rcParams, so no global state)."""
    ax.set_title(plain(title), fontsize=10, fontweight="bold")
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    if grid:
        ax.grid(True, alpha=0.3)
        ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def legend(ax: Axes, **kwargs: Any) -> None:
    """A small legend with an opaque frame on ``ax`` (``kwargs`` go to :meth:`Axes.legend`)."""
    ax.legend(fontsize=8, **{**_FRAME, **kwargs})


def outside_legend(ax: Axes, **kwargs: Any) -> None:
    """A legend to the right of ``ax``, outside the data (constrained layout makes room)."""
    legend(ax, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def save(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as PNG to ``path`` atomically (temporary file + rename); returns it."""
    return atomic_write(Path(path), lambda fh: fig.savefig(fh, format="png", dpi=_DPI), sync=False)


def no_data(ax: Axes, what: str) -> None:
    """Replace the axes content by a grey "no ``what`` yet" note."""
    ax.text(
        0.5,
        0.5,
        f"no {what} yet",
        ha="center",
        va="center",
        transform=ax.transAxes,
        color="#666666",
    )
    ax.set_xticks([])
    ax.set_yticks([])
