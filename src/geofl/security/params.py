"""Configuration of the uplink's per-hop security (003 §2.1.8) and of a simulated on-path
adversary that exercises it (tampering, replaying)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SecurityParams"]


class SecurityParams(BaseModel):
    """Envelope settings of a run's uplink.

    ``tamper_prob`` and ``replay_prob`` simulate the §2.1.8 adversary on the wireless link:
    with these probabilities per transmission it flips one random bit of one envelope, or
    re-injects the sender's previous envelope. Receivers must reject both (counted and
    logged); a tampered update is lost like an upload in an outage.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="seal every hop in an XSalsa20-Poly1305 envelope")
    epoch_rounds: int = Field(10, ge=1, description="rounds per key epoch (rotation)")
    window: int = Field(64, ge=1, description="receiver replay-window width (counters)")
    epoch_grace: int = Field(1, ge=0, description="previous epochs still accepted")
    tamper_prob: float = Field(0.0, ge=0.0, le=1.0, description="adversary flips a bit")
    replay_prob: float = Field(0.0, ge=0.0, le=1.0, description="adversary replays")
