"""Validation-based NQI weight tuning by grid search over the simplex (003 §2.1.3, Eq. 5).

``w* = argmin_{w ∈ W} p_fail(w) + λ·ℓ̄(w)  s.t.  c̄(w) ≤ C_max`` over the grid of step 0.05
on ``W = {w ≥ 0, Σw = 1}`` (231 candidates). For each candidate the transmission policy
runs over a held-out trace of link states: NQI (Eq. 10) → skip below τ_NQI or pick a
pipeline (§3.1.3) → its real encoded byte size → delivered iff the link is up and
``L + 8·bytes / B ≤ ℓ_max``. Measured per candidate:

* ``p_fail``: failed ÷ *attempted* updates (the paper's definition; an attempt in an
  outage fails). A candidate that never attempts has no p_fail and is infeasible — else
  "never send" would win;
* ``latency``: mean seconds of the delivered updates;
* ``bytes``: mean uplink bytes per scheduled update (skips count 0), the budget c̄;
* ``delivery``: delivered ÷ scheduled updates. With the paper's attempted-basis p_fail the
  objective favours sending only on the best links (few attempts, low failure and
  latency); ``min_delivery`` (our addition, 0 = the paper's problem) makes a candidate
  infeasible below a delivery ratio.

All 231 candidates are evaluated at once as ``[W, N]`` arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from geofl.network.nqi import NqiParams, nqi
from geofl.network.pipelines import Pipeline
from geofl.network.rural import transfer_time_s

__all__ = ["Trace", "TuningResult", "simplex_grid", "tune_weights"]


def simplex_grid(step: float = 0.05) -> np.ndarray:
    """``[M, 3]`` weight vectors on the simplex with the given step (0.05 → M = 231)."""
    n = round(1.0 / step)
    if n < 1 or not np.isclose(n * step, 1.0):
        raise ValueError(f"step: {step} must divide 1 (e.g. 0.05)")
    rows = [(i, j, n - i - j) for i in range(n + 1) for j in range(n + 1 - i)]
    return np.array(rows, dtype=np.float64) / n


@dataclass(frozen=True)
class Trace:
    """Held-out link states: N (tractor, round) samples.

    Attributes:
        values: ``[N, 3]`` raw (S, B, L).
        ranges: ``[N, 3, 2]`` normalisation ranges of each sample's tractor.
        outage: ``[N]`` bool.
    """

    values: np.ndarray
    ranges: np.ndarray
    outage: np.ndarray


@dataclass(frozen=True)
class TuningResult:
    """Every candidate's measurements and the chosen one.

    Attributes:
        candidates: ``[M, 3]`` weights.
        p_fail, latency_s, bytes, delivery, objective: ``[M]`` (NaN where undefined).
        feasible: ``[M]`` bool: attempted at least once, c̄ ≤ C_max, delivery ≥ minimum.
        best: Index of w* in ``candidates``.
    """

    candidates: np.ndarray
    p_fail: np.ndarray
    latency_s: np.ndarray
    bytes: np.ndarray
    delivery: np.ndarray
    objective: np.ndarray
    feasible: np.ndarray
    best: int

    @property
    def weights(self) -> tuple[float, float, float]:
        """w*."""
        w = self.candidates[self.best]
        return float(w[0]), float(w[1]), float(w[2])


def tune_weights(
    trace: Trace,
    payload_bytes: Mapping[Pipeline, int],
    nqi_params: NqiParams,
    *,
    deadline_s: float,
    lam: float = 0.05,
    c_max: float = float("inf"),
    min_delivery: float = 0.0,
    step: float = 0.05,
) -> TuningResult:
    """Eq. 5 by grid search.

    Args:
        trace: Held-out link states.
        payload_bytes: Encoded bytes of a representative update per pipeline.
        nqi_params: τ_NQI and the pipeline thresholds (its weights are ignored).
        deadline_s: ℓ_max.
        lam: λ, per second of latency.
        c_max: C_max, bytes per scheduled update.
        min_delivery: Smallest delivered ÷ scheduled ratio a candidate may have.
        step: Grid step.
    """
    cands = simplex_grid(step)
    score = nqi(trace.values, trace.ranges, cands)  # [M, N]
    p = nqi_params
    bands = [score < p.t_chunked, score < p.t_fallback]
    size = np.select(
        bands,
        [payload_bytes[Pipeline.COMPRESSED], payload_bytes[Pipeline.CHUNKED]],
        payload_bytes[Pipeline.FALLBACK],
    ).astype(np.float64)
    attempted = score >= p.tau
    size = np.where(attempted, size, 0.0)
    t = transfer_time_s(size, trace.values[:, 1], trace.values[:, 2])
    ok = attempted & ~trace.outage & (t <= deadline_s)
    n_att = attempted.sum(1)
    n_ok = ok.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_fail = np.where(n_att > 0, (n_att - n_ok) / n_att, np.nan)
        latency = np.where(n_ok > 0, (t * ok).sum(1) / n_ok, np.nan)
    sent = np.where(attempted & ~trace.outage, size, 0.0)  # an outage sends nothing
    mean_bytes = sent.mean(1)
    objective = p_fail + lam * np.nan_to_num(latency, nan=0.0)
    delivery = n_ok / score.shape[1]
    feasible = (n_att > 0) & (mean_bytes <= c_max) & (delivery >= min_delivery)
    if not feasible.any():
        raise ValueError("no weight vector is feasible: raise C_max or check the trace")
    best = int(np.argmin(np.where(feasible, objective, np.inf)))
    return TuningResult(cands, p_fail, latency, mean_bytes, delivery, objective, feasible, best)
