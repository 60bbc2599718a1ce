"""Network models: does an upload arrive, after what delay, at what byte cost.

Later work adds 3G/4G/5G link states, outages and satellite contact windows (003 §2.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.registry import NoParams, Registry
from geofl.update import UpdateMeta

__all__ = ["NETWORK_MODELS", "Delivery", "IdealNetwork", "NetworkModel"]


@dataclass(frozen=True)
class Delivery:
    """Outcome of one upload."""

    delivered: bool
    delay_s: float
    bytes: int


class NetworkModel(Protocol):
    """Decide the fate of an upload from its metadata and a seeded generator."""

    def __call__(self, meta: UpdateMeta, rng: np.random.Generator) -> Delivery: ...


#: Network-model registry: ``ideal``, ``lossy``, ``scripted_outage``.
NETWORK_MODELS: Registry[NetworkModel] = Registry("network model")


class IdealNetwork:
    """Every upload arrives at once; bytes are the payload size.

    It never reads its generator, and says so (:attr:`always_delivers`): a scheduler then
    skips deriving one per upload (≈ 20 µs each, a tenth of a 10,000-tractor round)."""

    #: Every upload is delivered whatever the generator: callers need not make one.
    always_delivers: ClassVar[bool] = True

    def __call__(self, meta: UpdateMeta, rng: np.random.Generator) -> Delivery:
        return Delivery(True, 0.0, meta.bytes_sent)


@NETWORK_MODELS.register("ideal")
def build_ideal(_: NoParams) -> NetworkModel:
    """Every upload arrives at once; bytes are the payload size."""
    return IdealNetwork()


class LossyParams(BaseModel):
    """Independent upload loss with a fixed probability."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    drop_prob: float = Field(..., ge=0.0, lt=1.0, description="probability an upload is lost")
    bandwidth_mbps: float = Field(10.0, gt=0.0, description="uplink rate for the delay")


@NETWORK_MODELS.register("lossy", params=LossyParams)
def build_lossy(params: LossyParams) -> NetworkModel:
    """Each upload is lost with probability p; delay = bytes / bandwidth."""

    def model(meta: UpdateMeta, rng: np.random.Generator) -> Delivery:
        delay = meta.bytes_sent * 8 / (params.bandwidth_mbps * 1e6)
        return Delivery(bool(rng.random() >= params.drop_prob), delay, meta.bytes_sent)

    return model


class ScriptedOutageParams(BaseModel):
    """Outages at given rounds for given clients (e.g. 000 §4.7.2: client 7, rounds 4–5)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    outages: dict[int, list[int]] = Field(
        ..., description="client id → rounds (1-based) in which its upload is lost"
    )


@NETWORK_MODELS.register("scripted_outage", params=ScriptedOutageParams)
def build_scripted_outage(params: ScriptedOutageParams) -> NetworkModel:
    """Uploads are lost exactly in the scripted (client, round) pairs; otherwise ideal."""
    lost = {(c, r) for c, rounds in params.outages.items() for r in rounds}

    def model(meta: UpdateMeta, rng: np.random.Generator) -> Delivery:
        return Delivery((meta.client_id, meta.round) not in lost, 0.0, meta.bytes_sent)

    return model
