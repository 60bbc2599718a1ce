"""LEO passes over ground stations and the Proximity Driver's choice (003 §2.3.2, §3.1.3).

:class:`PassTracker` turns a [G, S, T'] visibility tensor, chunk after chunk of slots, into
passes — maximal runs of visible slots of one (station, LEO) — and decides each pass's fate:
dropped when its uniform u is below p_LEO-fail, u = ``derive_seed(seed, "leo_pass", station,
sat, start slot) / 2**63`` (:func:`pass_uniform`), the keyed hash with which
:mod:`geofl.rng` seeds its generators used as a one-draw counter-based generator (a PCG64 per
pass, for ~300 k passes, costs 5× more). ``station`` is the station's *id* — its row unless
the caller names the stations (the hierarchy names them by tractor, so a tractor's passes
are the same whatever role it holds and whenever its plan is computed). A pass's fate
therefore depends on nothing but its keys: not on which other passes, stations or slots are
simulated. :func:`proximity_driver` picks, per station and slot, the undropped visible LEO of
highest elevation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geofl.rng import derive_seed

__all__ = ["Pass", "PassTracker", "pass_uniform", "proximity_driver"]


@dataclass(frozen=True, slots=True)
class Pass:
    """One LEO pass over one station: slots ``[start_slot, end_slot)`` above the mask.

    Attributes:
        station: Station id (its index in the plan unless the plan names its stations).
        sat: LEO index (0 … n_leo − 1, order of the LEO TLEs).
        start_slot: First slot in view.
        end_slot: First slot after the pass.
        max_elevation_deg: Highest elevation sampled in the pass.
        dropped: Lost with probability p_LEO-fail (003 §3.1.3); unusable for the whole pass.
    """

    station: int
    sat: int
    start_slot: int
    end_slot: int
    max_elevation_deg: float
    dropped: bool


def pass_uniform(seed: int, station: int, sat: int, start_slot: int) -> float:
    """The uniform in [0, 1) that decides whether a pass is dropped (003 §3.1.3).

    ``derive_seed(seed, "leo_pass", station, sat, start_slot) / 2**63`` (module docstring);
    ``station`` is the station's id.
    """
    return derive_seed(seed, "leo_pass", station, sat, start_slot) / float(1 << 63)


class PassTracker:
    """Runs of visible slots per (station, LEO) row, accumulated chunk after chunk.

    A run touching the end of a chunk stays open (its start slot, peak and fate carried)
    and continues with the run starting at column 0 of the next chunk.

    Args:
        station_ids: ``[G]`` the stations' ids (the pass-drop hash keys, :attr:`Pass.station`).
        n_leo: S.
        seed: Seed of the pass drops.
        p_fail: p_LEO-fail.
    """

    def __init__(self, station_ids: np.ndarray, n_leo: int, seed: int, p_fail: float) -> None:
        self.ids = np.asarray(station_ids, dtype=np.int64)
        self.n_leo, self.seed, self.p_fail = n_leo, seed, p_fail
        rows = self.ids.size * n_leo
        self.open_start = np.full(rows, -1, dtype=np.int64)
        self.open_peak = np.full(rows, -np.inf)
        self.open_drop = np.zeros(rows, dtype=bool)
        self.closed: list[tuple[np.ndarray, ...]] = []

    def _dropped(self, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Fate of new passes: dropped iff pass_uniform(seed, id, sat, start) < p."""
        station, sat = np.divmod(rows, self.n_leo)
        keys = zip(self.ids[station].tolist(), sat.tolist(), starts.tolist(), strict=True)
        draws = [pass_uniform(self.seed, g, s, t) for g, s, t in keys]
        return np.asarray(draws, dtype=np.float64).reshape(-1) < self.p_fail

    def add(self, sin_el: np.ndarray, vis: np.ndarray, t0: int, final: bool) -> np.ndarray:
        """Record the runs of one chunk.

        Args:
            sin_el: [G, S, T'] sin(elevation); vis: [G, S, T'] above the mask.
            t0: Slot of the chunk's column 0.
            final: Last chunk (close every open run at its end).

        Returns:
            [G, S, T'] ``sin_el`` where usable (visible, pass not dropped), else −inf.
        """
        g, s, tc = vis.shape
        width = tc + 2  # one False column either side keeps runs inside their row
        pad = np.zeros((g * s, width), dtype=bool)
        pad[:, 1:-1] = vis.reshape(g * s, tc)
        flat = pad.ravel()
        edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1  # alternating run starts, ends
        row = edges[0::2] // width
        c0, c1 = edges[0::2] - row * width - 1, edges[1::2] - row * width - 1
        el = np.where(vis, sin_el, -np.inf).reshape(g * s, tc)
        first = row * tc + c0  # unpadded flat index of each run's first slot
        peak = np.maximum.reduceat(el.ravel(), first) if first.size else np.empty(0)
        cont = (c0 == 0) & (self.open_start[row] >= 0)
        start_slot = np.where(cont, self.open_start[row], t0 + c0)
        peak = np.where(cont, np.maximum(peak, self.open_peak[row]), peak)
        drop = self.open_drop[row].copy()
        drop[~cont] = self._dropped(row[~cont], start_slot[~cont])
        ended = self.open_start >= 0  # open passes not continued at column 0 end at t0
        ended[row[cont]] = False
        self.closed.append(self._open_rows(ended, t0))
        self.open_start[:] = -1
        keep_open = (c1 == tc) & (not final)
        self.open_start[row[keep_open]] = start_slot[keep_open]
        self.open_peak[row[keep_open]] = peak[keep_open]
        self.open_drop[row[keep_open]] = drop[keep_open]
        done = ~keep_open
        self.closed.append((row[done], start_slot[done], t0 + c1[done], peak[done], drop[done]))
        for r, a, b in zip(row[drop].tolist(), c0[drop].tolist(), c1[drop].tolist(), strict=True):
            el[r, a:b] = -np.inf  # a loop over dropped passes only
        return el.reshape(g, s, tc)

    def _open_rows(self, which: np.ndarray, end: int) -> tuple[np.ndarray, ...]:
        rows = np.flatnonzero(which)
        ends = np.full(rows.size, end, dtype=np.int64)
        return rows, self.open_start[rows], ends, self.open_peak[rows], self.open_drop[rows]

    def passes(self) -> tuple[Pass, ...]:
        """Every closed pass, sorted (start_slot, station row, sat), stations by id."""
        row, start, end, peak, drop = (np.concatenate(c) for c in zip(*self.closed, strict=True))
        station, sat = np.divmod(row, self.n_leo)
        order = np.lexsort((sat, station, start))
        elev = np.degrees(np.arcsin(np.clip(peak, -1.0, 1.0)))
        cols = (self.ids[station], sat, start, end, elev, drop)
        return tuple(Pass(*v) for v in zip(*(c[order].tolist() for c in cols), strict=True))


def proximity_driver(usable: np.ndarray) -> np.ndarray:
    """The Proximity Driver: [G, S, T'] usable sin(elevation) (−inf: not) → [G, T'] LEO or −1.

    Highest elevation wins (lowest index on ties); a loop over the S satellites only.
    """
    best_val = usable[:, 0].copy()
    best = np.zeros(best_val.shape, dtype=np.int8 if usable.shape[1] < 128 else np.int16)
    for k in range(1, usable.shape[1]):
        better = usable[:, k] > best_val
        best[better] = k
        np.maximum(best_val, usable[:, k], out=best_val)
    best[np.isneginf(best_val)] = -1
    return best
