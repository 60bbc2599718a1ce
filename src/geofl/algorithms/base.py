"""The algorithm plug-in: a strategy and a client algorithm built together from one config.

A method names its algorithm in config (``algorithm: {name: scaffold}``); its factory gets
the validated parameters and an :class:`AlgorithmContext` with the composed aggregation tier
(defenses → weighting → combiner), and returns both halves. Checks that tie an algorithm to
the rest of a method (SCAFFOLD needs a linear aggregator, …) run at config load time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from geofl.client.step import ClientAlgorithm, PlainClient
from geofl.client.trainer import LocalTrainParams
from geofl.errors import ConfigError
from geofl.models.base import FlatModel
from geofl.registry import CheckContext, Registry
from geofl.rng import SEEDED, RandomSource
from geofl.server.strategy import Strategy
from geofl.server.tier import FlatTier
from geofl.tasks.base import Task

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "AlgorithmContext",
    "fail_method_field",
    "local_step_weight_sum",
    "require_linear_aggregator",
    "require_no_noise",
    "require_sgd",
]


@dataclass(frozen=True)
class AlgorithmContext:
    """What an algorithm factory is built from besides its own parameters.

    Attributes:
        tier: The method's aggregation tier.
        server_lr: ``federation.server_lr`` (η_s of the plain server step).
        num_clients: N, the federation size.
        dim: D, the flat model size.
        train: The local-optimisation settings.
        seed: The run's seed (keys of server-side generators, e.g. DP-FTRL's tree noise).
        clients_per_round: Clients trained per round when the sampler fixes it, else None.
        delta: ``privacy.delta``, the δ of the ε a private strategy reports.
        rounds: ``federation.rounds``, T (0 when unknown).
        model_factory: Builds a fresh workspace of the run's architecture, for a server that
            evaluates or trains models itself (BackdoorIndicator); None where unavailable.
        input_shape: One input's shape (``(C, H, W)``; ``()`` when unknown).
        num_classes: The task's output width (0 when unknown).
        task: The run's learning task, for a server that trains or evaluates models itself
            (BackdoorIndicator); None where unavailable.
        randomness: Where a private server's noise comes from (``privacy.randomness``:
            seeded, or a secret the server holds — DP-FTRL's tree noise).
    """

    tier: FlatTier
    server_lr: float
    num_clients: int
    dim: int
    train: LocalTrainParams
    seed: int = 0
    clients_per_round: int | None = None
    delta: float = 1e-5
    rounds: int = 0
    model_factory: Callable[[], FlatModel] | None = None
    input_shape: tuple[int, ...] = ()
    num_classes: int = 0
    task: Task | None = None
    randomness: RandomSource = SEEDED


@dataclass(frozen=True)
class Algorithm:
    """Both halves of a federated algorithm."""

    strategy: Strategy
    client: ClientAlgorithm = field(default_factory=PlainClient)


#: ``(params, *, ctx: AlgorithmContext) -> Algorithm``
ALGORITHMS: Registry[Algorithm] = Registry("algorithm")


def fail_method_field(ctx: CheckContext, field_name: str, message: str) -> NoReturn:
    """Raise the one-line ConfigError for a field of the algorithm's method
    (``methods.<i>.<field_name>``, e.g. ``methods.2.aggregator.name``)."""
    method_path = ctx.path.rsplit(".", 1)[0] if "." in ctx.path else ctx.path
    raise ConfigError(".".join(p for p in (method_path, field_name) if p), message)


def require_linear_aggregator(name: str, ctx: CheckContext) -> None:
    """Refuse a non-linear combiner (Krum, trimmed mean, median) for ``name``."""
    if "linear" not in ctx.traits.get("aggregator", frozenset()):
        method = ctx.method or {}
        agg = (method.get("aggregator") or {}).get("name")
        ctx.fail(
            "name",
            f"{name} averages its updates (and its server state) linearly; it cannot use the "
            f"{agg!r} aggregator — use aggregator: {{name: mean}} or another algorithm",
        )


def require_no_noise(name: str, ctx: CheckContext) -> None:
    """Refuse noise release steps for an algorithm that uploads un-noised extra tensors."""
    if "noise" in ctx.traits.get("release", frozenset()):
        ctx.fail(
            "name",
            f"{name} uploads a second tensor that the release steps do not perturb, so the "
            "noise would not protect the upload; drop the noise release step or the algorithm",
        )


def require_sgd(name: str, ctx: CheckContext) -> None:
    """Refuse local Adam for an algorithm whose server rule assumes local SGD."""
    if (ctx.experiment.get("train") or {}).get("optimizer") == "adam":
        ctx.fail("name", f"{name} assumes local SGD steps; set train.optimizer: sgd")


def local_step_weight_sum(steps: int, momentum: float) -> float:
    """‖a‖₁ of τ local SGD steps with momentum ρ (Wang et al. 2020, FedNova §4).

    With v_t = ρ v_{t−1} + g_t and w_{t+1} = w_t − η v_t, the gradient of step s moves the
    model by η(1 − ρ^{τ−s})/(1 − ρ), so Σ_s of those weights is
    [τ − ρ(1 − ρ^τ)/(1 − ρ)] / (1 − ρ); it is τ for plain SGD (ρ = 0).

    Args:
        steps: τ ≥ 0.
        momentum: ρ ∈ [0, 1).
    """
    if momentum == 0.0:
        return float(steps)
    rho = momentum
    return (steps - rho * (1.0 - rho**steps) / (1.0 - rho)) / (1.0 - rho)
