"""Client sampling: who is asked to train in a round.

* ``fixed`` — m = max(1, round(q·N)) distinct clients uniformly without replacement (q =
  ``federation.participation``); every client when m = N. The draw is the same as geofl
  always made, so earlier runs reproduce.
* ``poisson`` — each client independently with probability p (Bernoulli/Poisson sampling);
  the cohort size varies and may be empty, which the scheduler records as a no-op round.
  This is the sampling that privacy amplification by subsampling assumes; the round record
  states the scheme and rate so an accountant can use the matching amplification.
* ``trace`` — an availability trace (a JSON file ``{"rounds": [[ids…], …]}``, round r uses
  entry (r − 1) mod len): the available clients, optionally thinned to a fraction of them.

A sampler is ``(num_clients, round_idx, rng) -> Cohort`` with ``rng`` derived from
(seed, "round", r, "participation").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import ConfigError
from geofl.registry import CheckContext, NoParams, Registry

__all__ = ["SAMPLERS", "ClientSampler", "Cohort", "PoissonParams", "TraceParams", "fixed_cohort"]


@dataclass(frozen=True)
class Cohort:
    """The clients drawn for one round and how they were drawn.

    Attributes:
        clients: Sorted client ids (may be empty for Poisson sampling).
        scheme: Sampler name (``fixed``, ``poisson``, ``trace``).
        rate: Per-client inclusion probability where the scheme fixes one (Poisson p;
            m/N for fixed-size sampling), else None.
    """

    clients: list[int]
    scheme: str
    rate: float | None = None


class ClientSampler(Protocol):
    """Draw a round's cohort."""

    def __call__(self, num_clients: int, round_idx: int, rng: np.random.Generator) -> Cohort: ...


#: ``(params, *, participation: float) -> ClientSampler``
SAMPLERS: Registry[ClientSampler] = Registry("client sampler")


def fixed_cohort(num_clients: int, q: float, rng: np.random.Generator) -> list[int]:
    """max(1, round(q·N)) distinct clients, sorted (all of them when that is N)."""
    m = max(1, round(q * num_clients))
    if m >= num_clients:
        return list(range(num_clients))
    return sorted(int(c) for c in rng.choice(num_clients, size=m, replace=False))


@SAMPLERS.register("fixed")
def build_fixed(_: NoParams, *, participation: float) -> ClientSampler:
    """Fixed-size sampling without replacement of a fraction q = federation.participation."""

    def sample(num_clients: int, round_idx: int, rng: np.random.Generator) -> Cohort:
        clients = fixed_cohort(num_clients, participation, rng)
        return Cohort(clients, "fixed", len(clients) / num_clients)

    return sample


class PoissonParams(BaseModel):
    """Independent per-client inclusion with probability p."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: float = Field(..., gt=0.0, le=1.0, allow_inf_nan=False, description="p per client")


def _check_participation(_: object, ctx: CheckContext) -> None:
    q = (ctx.experiment.get("federation") or {}).get("participation", 1.0)
    if q != 1.0:
        ctx.fail(
            "name",
            f"federation.participation={q} applies to the fixed sampler only; set the "
            "sampler's own rate and leave participation at 1.0",
        )


@SAMPLERS.register("poisson", params=PoissonParams, check=_check_participation)
def build_poisson(params: PoissonParams, *, participation: float) -> ClientSampler:
    """Poisson (Bernoulli) sampling: each client independently with probability p."""

    def sample(num_clients: int, round_idx: int, rng: np.random.Generator) -> Cohort:
        draws = rng.random(num_clients)
        return Cohort([int(c) for c in np.flatnonzero(draws < params.rate)], "poisson", params.rate)

    return sample


class TraceParams(BaseModel):
    """Availability trace: which clients are reachable in each round."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(..., description='JSON file {"rounds": [[client ids], ...]}')
    fraction: float = Field(
        1.0, gt=0.0, le=1.0, allow_inf_nan=False, description="share of the available drawn"
    )


def load_trace(path: Path) -> list[list[int]]:
    """The rounds of an availability trace file; a one-line ConfigError if unreadable."""
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        rounds = [[int(c) for c in r] for r in data["rounds"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            "federation.sampling.path",
            f"cannot read availability trace {path} ({type(err).__name__}); it must be JSON "
            '{"rounds": [[client ids], ...]}',
        ) from None
    if not rounds:
        raise ConfigError("federation.sampling.path", f"{path} lists no rounds")
    return rounds


def _check_trace(params: TraceParams, ctx: CheckContext) -> None:
    _check_participation(params, ctx)
    n = int((ctx.experiment.get("federation") or {}).get("num_clients", 0))
    bad = sorted({c for r in load_trace(params.path) for c in r if not 0 <= c < n})
    if bad:
        ctx.fail("path", f"trace names clients {bad[:5]} outside 0..{n - 1}")


@SAMPLERS.register("trace", params=TraceParams, check=_check_trace)
def build_trace(params: TraceParams, *, participation: float) -> ClientSampler:
    """Availability trace: the clients available in round r (optionally a fraction)."""
    rounds = load_trace(params.path)

    def sample(num_clients: int, round_idx: int, rng: np.random.Generator) -> Cohort:
        available = sorted(set(rounds[(round_idx - 1) % len(rounds)]))
        if params.fraction < 1.0 and available:
            m = max(1, round(params.fraction * len(available)))
            pick = rng.choice(len(available), size=m, replace=False)
            available = sorted(available[int(i)] for i in pick)
        return Cohort(available, "trace", None)

    return sample
