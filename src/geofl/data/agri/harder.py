"""A harder Task B: regional drift of the stress rule and label noise (issue 35).

With the paper's rule verbatim, synthetic Task B saturates (test ROC-AUC 0.97–0.998 for
every method of 003 Table 5), so no method can be told apart. 003 describes where real
labels are less clean than ours, and these options follow it, each off by default:

* **Regional drift of the rule** (``regional_shift``): 003 §4.5 names "label drift in the
  mapping from sensor readings" across agronomic regimes, and §3.1.1 defines stress by
  "vegetation-index thresholds and/or historical condition indicators" without fixing them
  per region. Region r of R applies the rule of
  :func:`~geofl.data.agri.pipeline.stress_labels` with k_r = 1.0·(1 + s·c_r) and
  m_r = 0.08·(1 + s·c_r), c_r evenly spaced over [−1, 1] in region order (no draw): the
  first region labels more weeks stressed, the last fewer, and the same canopy dip means
  stress in one region and not in another.
* **Label noise** (``label_noise``): the rule reads cloud-masked weekly composites
  (§3.1.1 (ii)), and residual haze or a missed cloud flips a threshold test; each Task B
  label is flipped independently with probability η (generator ``(seed,
  "synthetic_agri", "label_noise")``), so the expected flipped share is η.

Rarer stress is the generator's existing ``stress_scale`` (odds of a stress event).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from geofl.rng import numpy_generator

__all__ = ["RuleThresholds", "flip_labels", "regional_thresholds"]

#: The paper's σ multiplier and EVI margin of the Task B rule (003 §3.1.1).
PAPER_K_SIGMA = 1.0
PAPER_EVI_MARGIN = 0.08


class RuleThresholds(NamedTuple):
    """Per-block thresholds of the Task B rule (``[B]`` float64 each)."""

    k_sigma: np.ndarray
    evi_margin: np.ndarray


def regional_thresholds(region: np.ndarray, regions: int, shift: float) -> RuleThresholds:
    """Thresholds of every block under regional drift ``shift`` (module docstring).

    Args:
        region: ``[B]`` int64 region of each block, in ``0 … regions − 1``.
        regions: Number of regions R (so c_r does not depend on which regions hold blocks).
        shift: s ≥ 0; 0 gives the paper's k = 1.0 and m = 0.08 everywhere. s < 1 keeps
            every k_r and m_r positive.

    Raises:
        ValueError: when ``shift`` is negative or not below 1, or a region is out of range.
    """
    if not 0.0 <= shift < 1.0:
        raise ValueError(f"regional_shift {shift}: give a value in [0, 1)")
    region = np.asarray(region, dtype=np.int64)
    if region.size and (region.min() < 0 or region.max() >= regions):
        raise ValueError(f"region codes must lie in 0..{regions - 1}, got {region.max()}")
    centre = np.linspace(-1.0, 1.0, regions) if regions > 1 else np.zeros(1)
    factor = 1.0 + shift * centre[region]
    return RuleThresholds(PAPER_K_SIGMA * factor, PAPER_EVI_MARGIN * factor)


def flip_labels(labels: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """``labels`` (0/1) with each flipped independently with probability ``rate``.

    Args:
        labels: ``[N]`` int64 0/1 labels; not modified.
        rate: η in [0, 0.5); 0 returns a copy unchanged (and draws nothing).
        seed: Seed of the generator ``(seed, "synthetic_agri", "label_noise")``.

    Raises:
        ValueError: when ``rate`` is outside [0, 0.5) (at 0.5 the labels carry nothing).
    """
    if not 0.0 <= rate < 0.5:
        raise ValueError(f"label_noise {rate}: give a flip probability in [0, 0.5)")
    out = np.array(labels, dtype=np.int64, copy=True)
    if rate == 0.0:
        return out
    flip = numpy_generator(seed, "synthetic_agri", "label_noise").random(out.size) < rate
    out[flip] = 1 - out[flip]
    return out
