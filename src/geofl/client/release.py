"""The release pipeline: steps applied to Δw on the client before it leaves.

Each step maps ``Δw [D]`` — with the client's own data, the round's directives and a
generator derived from (seed, round, client, "release") — to a new Δw and a small dict of
what it did. Those reports form the client's *local log* (:attr:`ClientUpdate.local_log`):
the simulation collects it for analysis, but it is not part of what the server receives,
so a step may log client-private facts such as its risk level (000 Alg. 1). A step that
adds calibrated noise reports ``{"dp_event": {"mechanism": "gaussian",
"noise_multiplier": z}}`` for the privacy accountant. Steps never modify their input in
place. Noise steps (000 Eq. 5–8) live in :mod:`geofl.privacy.mechanisms`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.client.data import ClientData
from geofl.registry import CheckContext, NoParams, Registry
from geofl.update import ClientDirectives, ClientUpdate

__all__ = [
    "HISTOGRAM_FREE_TRAINERS",
    "RELEASE_STEPS",
    "L2ClipParams",
    "NoisySizeParams",
    "ReleaseStep",
    "apply_release",
    "gaussian_event",
    "histogram_released",
    "is_private",
    "l2_clip",
    "noisy_count",
    "planned_releases",
]


class ReleaseStep(Protocol):
    """One stage of the client release pipeline."""

    name: str

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]: ...


#: Release-step registry: ``l2_clip``, ...
RELEASE_STEPS: Registry[ReleaseStep] = Registry("release step")


def l2_clip(delta: torch.Tensor, bound: float) -> tuple[torch.Tensor, float]:
    """Scale Δw to L2 norm at most ``bound``: Δw · min(1, C / ‖Δw‖₂) (000 Eq. 5).

    Args:
        delta: ``[D]`` update.
        bound: C > 0.

    Returns:
        The clipped update (a new tensor) and the original norm ‖Δw‖₂.
    """
    norm = float(torch.linalg.vector_norm(delta))
    scale = min(1.0, bound / norm) if norm > 0 else 1.0
    return delta * scale, norm


class L2ClipParams(BaseModel):
    """Parameters of the ``l2_clip`` release step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bound: float = Field(..., gt=0.0, description="L2 clipping bound C")


class _L2Clip:
    name = "l2_clip"

    def __init__(self, bound: float) -> None:
        self.bound = bound

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        bound = float(directives.extra.get("clip_bound", self.bound))
        clipped, norm = l2_clip(delta, bound)
        return clipped, {"norm": norm, "bound": bound, "clipped": norm > bound}


@RELEASE_STEPS.register("l2_clip", params=L2ClipParams)
def build_l2_clip(params: L2ClipParams) -> ReleaseStep:
    """L2-clip the update to a bound C (a per-client directive ``clip_bound`` overrides)."""
    return _L2Clip(params.bound)


class _ConcealSize:
    name = "conceal_size"

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        return delta, {"num_samples": len(data)}


@RELEASE_STEPS.register("conceal_size", traits=("hides_num_samples",))
def build_conceal_size(_: NoParams) -> ReleaseStep:
    """Withhold the local sample count n_k (the server sees n_k = 1): data-size privacy."""
    return _ConcealSize()


class NoisySizeParams(BaseModel):
    """Parameters of the ``noisy_size`` release step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_multiplier: float = Field(
        ..., gt=0.0, allow_inf_nan=False, description="z: the count's noise std (sensitivity 1)"
    )


def gaussian_event(z: float) -> dict[str, Any]:
    """The DpEvent spec of one Gaussian release with noise multiplier ``z`` (sensitivity 1
    after scaling): what a step reports in its log and announces to the budget check."""
    return {"mechanism": "gaussian", "noise_multiplier": z}


def noisy_count(n: int, z: float, generator: torch.Generator) -> int:
    """n + N(0, z²), rounded and floored at 1: the Gaussian mechanism on a count.

    Adding or removing one record moves n by 1 (L2 sensitivity 1), so the release is the
    DpEvent ``GaussianDpEvent(z)``; rounding and the floor are post-processing.
    """
    noise = float(torch.randn((), generator=generator, dtype=torch.float64))
    return max(1, round(n + z * noise))


class _NoisySize:
    name = "noisy_size"

    def __init__(self, z: float) -> None:
        self.z = z

    def planned_release(
        self, data: ClientData, directives: ClientDirectives
    ) -> list[dict[str, Any]]:
        """The count's DpEvent, released every round (the budget check composes it)."""
        return [gaussian_event(self.z)]

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        released = noisy_count(len(data), self.z, generator)
        report = {"num_samples": len(data), "released": released}
        return delta, {**report, "dp_event": gaussian_event(self.z)}


def _check_noisy_size(_: NoisySizeParams, ctx: CheckContext) -> None:
    """One release of n_k: refuse ``noisy_size`` beside ``conceal_size``."""
    if "hides_num_samples" in ctx.traits.get("release", frozenset()):
        ctx.fail("name", "noisy_size and conceal_size both set n_k; keep one of them")


@RELEASE_STEPS.register("noisy_size", params=NoisySizeParams, check=_check_noisy_size)
def build_noisy_size(params: NoisySizeParams) -> ReleaseStep:
    """Release n_k + N(0, z²) instead of n_k, composed into the client's ledger (ε)."""
    return _NoisySize(params.noise_multiplier)


class _WithholdHistogram:
    name = "withhold_histogram"

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        return delta, {"withheld": True}


@RELEASE_STEPS.register("withhold_histogram", traits=("hides_label_histogram",))
def build_withhold_histogram(_: NoParams) -> ReleaseStep:
    """Do not send the label histogram (exact class counts are outside any update-level ε)."""
    return _WithholdHistogram()


#: Local trainers whose update never carries a label histogram (DP-SGD: no server side
#: needs it, and exact class counts would leak outside ε).
HISTOGRAM_FREE_TRAINERS = frozenset({"dp_sgd"})


def histogram_released(trainer: str, release: Sequence[str]) -> bool:
    """Whether a client of a method with this trainer and these release steps sends its
    label histogram — what a server may accept from a site (:mod:`geofl.deploy.wire`)."""
    return trainer not in HISTOGRAM_FREE_TRAINERS and "withhold_histogram" not in release


def is_private(trainer: str, release: Sequence[str], algorithm_traits: frozenset[str]) -> bool:
    """Whether a method reports an ε: a DP-SGD trainer, a noise release step (000's
    risk-aware perturbation, 004's ADP, ``gaussian``) or a central-DP algorithm (DP-FTRL).

    Such a method fits no statistic on the clients' pooled training data: input
    standardisation and ``pos_weight: auto`` come from the held-out validation split
    (:func:`geofl.engine.experiment.prepare_split`), which holds no training record.
    """
    noisy = any("noise" in RELEASE_STEPS.traits(name) for name in release)
    return trainer == "dp_sgd" or noisy or "central_dp" in algorithm_traits


def planned_releases(
    steps: Sequence[ReleaseStep], data: ClientData, directives: ClientDirectives
) -> list[dict[str, Any]]:
    """The DpEvent specs ``steps`` will report this round, in order: what a step with a
    ``planned_release(data, directives)`` method says (a step without one releases
    nothing private). The budget check composes these with the trainer's, so it checks
    the very ε the client reports after the round."""
    planned: list[dict[str, Any]] = []
    for step in steps:
        plan = getattr(step, "planned_release", None)
        if plan is not None:
            planned.extend(plan(data, directives))
    return planned


def apply_release(
    update: ClientUpdate,
    steps: Sequence[ReleaseStep],
    *,
    data: ClientData,
    directives: ClientDirectives,
    generator: torch.Generator,
) -> ClientUpdate:
    """Run ``steps`` in order on ``update``; their reports go to ``update.local_log``."""
    if not steps:
        return update
    delta = update.delta
    report: dict[str, Any] = {}
    for step in steps:
        delta, report[step.name] = step(
            delta, data=data, directives=directives, generator=generator
        )
    meta = update.meta
    if any(step.name == "conceal_size" for step in steps):
        meta = replace(meta, num_samples=1)
    noisy = report.get("noisy_size")
    if isinstance(noisy, dict):  # the noisy count replaces n_k
        meta = replace(meta, num_samples=int(noisy["released"]))
    if "withhold_histogram" in report:
        meta = replace(meta, label_histogram=None)
    spatial = report.get("spatial_alpha")
    if isinstance(spatial, dict):  # α_k alone leaves the client (001 Eq. 10)
        meta = replace(meta, spatial_alpha=float(spatial["alpha"]))
    return replace(update, delta=delta, meta=meta, local_log={**update.local_log, **report})
