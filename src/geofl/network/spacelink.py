"""The space hops' codec, envelopes and energy proxy (003 §2.2.8, Table 4, §3.1.4).

``method.hierarchy.links`` configures what the drivers and satellites put on the wire:

* **Driver → LEO** (003 Table 4: top-k and 4-bit quantisation "Tractor/Driver", chunking +
  staleness tag write "Driver"): the driver sends its cluster update
  u_c = w̄_c − w^{v_c} relative to the global version v_c it holds, top-k (k = 10 %) with
  4-bit codes (the ground uplink's ``compressed`` pipeline,
  :func:`~geofl.network.pipelines.encode_with_feedback`, error feedback kept by the
  driver), cut into staleness-tagged frames (:func:`~geofl.network.chunking.tag_frames`);
  ``compress: false`` sends u_c as raw float32 in the same frames.
* **LEO → GEO**: the regional model w̄_l as raw float32 (a regional average of sparse
  updates is dense; the paper compresses at the tractor and driver only).
* **GEO → LEO → driver**: the global model as raw float32.

Every space-hop payload is sealed in an XSalsa20-Poly1305 envelope (§2.2.8: "the same
Salsa20 + MAC mechanism ... extended to satellite links", hop-specific keys from Eq. 6's
KDF, replay windows) when ``security.enabled``.

Energy proxy E = P_tx · t with airtime t = 8 · bytes / rate (§3.1.4). The paper gives no
satellite link rate or transmit power, so both are configuration here, and the defaults
are *assumptions*: typical small-satellite S-band figures — 2 W RF (33 dBm, the top of the
settable 27–33 dBm RF output of the ISISPACE CubeSat S-band transceiver, whose downlink
reaches 4.3 Mbps; isispace.nl, "S-band Transceiver" datasheet) at 1 Mbps for the gateway
→ LEO uplink, and 5 W at 1 Mbps for the LEO → GEO relay (a 36 000 km link has ~31 dB more
free-space loss than a ~1 000 km LEO pass; NASA's TDRSS GEO relays return S-band at up to 6 Mbps;
NASA Small Spacecraft Technology State of the Art, ch. 9 "Communications",
sst-soa.arc.nasa.gov/09-communications, surveys such radios). Change them to the link
budget of the deployment at hand.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from geofl.network.pipelines import PipelineParams
from geofl.security.params import SecurityParams

__all__ = ["SpaceLinkParams", "hop_energy"]


class SpaceLinkParams(BaseModel):
    """``method.hierarchy.links``: codec, envelopes and energy of the space hops."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compress: bool | None = Field(
        None,
        description="driver → LEO: top-k + 4-bit (true) or raw float32 (false); None: as "
        "the tractors upload — off when the uplink sends raw float32 (uplink.compress "
        "false or fixed_pipeline raw), on otherwise (and without an uplink)",
    )
    pipelines: PipelineParams = Field(
        default_factory=PipelineParams,
        description="the driver's codec: k_frac, sparse_bits, quant_chunk, error_feedback "
        "(the compressed pipeline's fields; 003 Table 4: k = 10 %, 4-bit)",
    )
    frame_bytes: int = Field(
        65536, ge=1, description="payload bytes per staleness-tagged driver → LEO frame"
    )
    security: SecurityParams = Field(
        default_factory=SecurityParams,
        description="XSalsa20-Poly1305 envelopes on every space hop (§2.2.8) and a "
        "simulated adversary (tamper_prob, replay_prob per transmission)",
    )
    driver_leo_mbps: float = Field(
        1.0, gt=0.0, description="driver → LEO rate (Mbps; assumption, module docstring)"
    )
    driver_leo_w: float = Field(
        2.0, ge=0.0, description="driver → LEO transmit power (W; assumption)"
    )
    leo_geo_mbps: float = Field(1.0, gt=0.0, description="LEO → GEO relay rate (Mbps; assumption)")
    leo_geo_w: float = Field(5.0, ge=0.0, description="LEO → GEO transmit power (W; assumption)")
    pass_s: float | None = Field(
        None,
        gt=0.0,
        description="seconds of one contact slot in which a LEO receives drivers' uploads, "
        "shared by the drivers sending to it in that slot: an upload whose airtime does not "
        "fit is refused and the driver retries it at its next pass (003 §2.2.9, §2.3.1); "
        "None: unlimited",
    )
    max_retries: int = Field(
        3,
        ge=0,
        description="R_max (003 §2.3.1): a refused upload is retried at most this many times, "
        "then dropped (superseded by fresher updates)",
    )
    retry_queue: int = Field(
        2,
        ge=1,
        description="uploads a driver keeps waiting for a pass (its bounded retry queue): a "
        "refused upload is dropped when as many are already waiting (fresher ones supersede "
        "it, §2.3.1)",
    )


def hop_energy(nbytes: int, mbps: float, watts: float) -> tuple[float, float]:
    """Airtime t = 8·bytes / rate (s) and energy proxy E = P_tx · t (J) of one transmission
    (003 §3.1.4: E_comm = Σ_i P_tx · t_i).

    Args:
        nbytes: Bytes on the wire (sealed frames).
        mbps: Link rate in Mbit/s.
        watts: Transmit power P_tx.
    """
    airtime = 8.0 * nbytes / (mbps * 1e6)
    return airtime, watts * airtime
