"""004 Fig. 5 analogue: what the object-disappearance attack removes and a defense restores.

004 Fig. 5 draws the same NWPU VHR-10 test scenes three times — clean ground truth, FedAvg +
ODA, DUAL-SHIELD + ODA — with "green boxes [for] correct detections, red boxes [for] objects
removed by the attack, blue boxes [for] detections restored by the defense, and orange
boxes [for] residual missed small objects". :func:`draw_oda_scenes` draws one row per scene
with those colours, for the attacked object class (the ODA target) on the triggered image:

* ground truth (left, the clean image): the target objects (white) and the other objects
  (thin grey);
* attacked model (middle, triggered image): a target object found by a correct detection
  (004 Eq. 15: target label, score ≥ 0.25, IoU ≥ 0.5) green, missed red;
* defended model (right, the same triggered image): found by both green, found only by the
  defended model blue (restored), missed by both orange (residual), missed only by the
  defended model red.

The scenes are gathered by :func:`geofl.engine.oda_scenes.collect_oda_scenes`; the figure
illustrates, the metrics (CDA, ASR) measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from geofl.report.style import new_figure, save

__all__ = ["OUTCOME_COLOURS", "OdaScene", "draw_oda_scenes"]

#: 004 Fig. 5's colours.
OUTCOME_COLOURS = {
    "correct": "#2ca02c",
    "removed": "#d62728",
    "restored": "#1f77b4",
    "residual": "#ff7f0e",
}


@dataclass(frozen=True)
class OdaScene:
    """One test scene of the figure.

    Attributes:
        index: The image's index in the test split.
        clean: ``[H, W, 3]`` float display image in [0, 1], without trigger.
        triggered: ``[H, W, 3]`` the same image with the trigger on every target object.
        target_boxes: ``[n, 4]`` xyxy boxes of the target-class objects.
        other_boxes: ``[m, 4]`` xyxy boxes of the other objects.
        attacked_missed: ``[n]`` bool, target objects the attacked model misses.
        defended_missed: ``[n]`` bool, target objects the defended model misses.
    """

    index: int
    clean: np.ndarray
    triggered: np.ndarray
    target_boxes: np.ndarray
    other_boxes: np.ndarray
    attacked_missed: np.ndarray
    defended_missed: np.ndarray


def defended_outcomes(attacked_missed: np.ndarray, defended_missed: np.ndarray) -> list[str]:
    """Per target object, the defended column's outcome (004 Fig. 5's colour key).

    >>> a, d = np.array([False, True, True, False]), np.array([False, False, True, True])
    >>> defended_outcomes(a, d)
    ['correct', 'restored', 'residual', 'removed']
    """
    out = []
    for a, d in zip(attacked_missed.tolist(), defended_missed.tolist(), strict=True):
        out.append(("residual" if a else "removed") if d else ("restored" if a else "correct"))
    return out


def _boxes(ax: Axes, boxes: np.ndarray, colours: Sequence[str], width: float) -> None:
    for (x1, y1, x2, y2), c in zip(boxes.tolist(), colours, strict=True):
        ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, ec=c, lw=width))


def _panel(ax: Axes, image: np.ndarray, title: str) -> None:
    ax.imshow(np.clip(image, 0.0, 1.0), interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=8)


def draw_oda_scenes(
    scenes: Sequence[OdaScene], out: Path, labels: tuple[str, str], target_name: str
) -> Path:
    """Draw ``scenes`` (rows) × (ground truth, attacked, defended) to the PNG ``out``.

    Args:
        scenes: The scenes, one row each (at least one).
        out: The PNG path (written atomically).
        labels: Names of the attacked and defended methods, e.g. ``("FedAvg + ODA", ...)``.
        target_name: The attacked class's name, for the titles.

    Returns:
        ``out``.
    """
    if not scenes:
        raise ValueError("draw_oda_scenes needs at least one scene")
    fig = new_figure((7.5, 2.6 * len(scenes) + 0.5))
    axes = fig.subplots(len(scenes), 3, squeeze=False)
    for row, s in zip(axes, scenes, strict=True):
        n = len(s.target_boxes)
        _panel(row[0], s.clean, f"test image {s.index}: ground truth ({n} {target_name})")
        _boxes(row[0], s.other_boxes, ["#bbbbbb"] * len(s.other_boxes), 0.8)
        _boxes(row[0], s.target_boxes, ["white"] * n, 1.6)
        attacked = ["removed" if m else "correct" for m in s.attacked_missed.tolist()]
        _panel(row[1], s.triggered, f"{labels[0]}: {sum(s.attacked_missed)} of {n} missed")
        _boxes(row[1], s.target_boxes, [OUTCOME_COLOURS[o] for o in attacked], 1.6)
        defended = defended_outcomes(s.attacked_missed, s.defended_missed)
        _panel(row[2], s.triggered, f"{labels[1]}: {sum(s.defended_missed)} of {n} missed")
        _boxes(row[2], s.target_boxes, [OUTCOME_COLOURS[o] for o in defended], 1.6)
    handles = [Line2D([], [], color=c, lw=2, label=k) for k, c in OUTCOME_COLOURS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=8)
    return save(fig, out)
