"""The ``method.uplink`` section: paper 003's ground-layer uplink, each part's parameter
model owned by its module (checked at config load: NQI weights on the simplex, thresholds in
order, k ∈ (0, 1], profile shares summing to 1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from geofl.client.checkpointer import CheckpointParams
from geofl.network.aircomp import AirCompParams
from geofl.network.nqi import NqiParams
from geofl.network.pipelines import Pipeline, PipelineParams
from geofl.network.rural import RuralParams
from geofl.security.params import SecurityParams

__all__ = ["UplinkConfig"]


class UplinkConfig(BaseModel):
    """The 003 ground-layer uplink (Alg. 1, §2.1.2(3), §2.1.8, §2.3.1): checkpointer, NQI
    gate and pipeline choice, real encoding, per-hop envelopes, rural 3G/4G/5G links."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pipelines: PipelineParams = Field(default_factory=PipelineParams)
    nqi: NqiParams = Field(default_factory=NqiParams)
    network: RuralParams = Field(default_factory=RuralParams)
    checkpoint: CheckpointParams = Field(default_factory=CheckpointParams)
    security: SecurityParams = Field(default_factory=SecurityParams)
    neighbour_group: int = Field(
        4, ge=1, le=10**9, description="forwarding groups: ids k // g share a group"
    )
    fixed_pipeline: Pipeline | None = Field(
        None,
        description="send every update through this pipeline, without the NQI gate "
        "(ablations; `raw`: FedAvg's float32 upload over the same links; `paq`: FedPAQ's "
        "stochastic quantisation); None: by NQI",
    )
    compress: bool = Field(
        True,
        description="false: an update the NQI gate lets through is sent as raw float32 "
        "(003 Table 14 'w/o Compression'); the gate and checkpointer stay",
    )
    aircomp: AirCompParams | None = Field(
        None,
        description="digital AirComp-FL approximation: Rayleigh fading with truncated "
        "channel inversion, receiver noise at snr_db on the superposed sum",
    )
