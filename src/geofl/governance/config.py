"""Configuration of the on-chain governance layer (the ``governance:`` section)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from geofl.governance.committee import CommitteeParams
from geofl.governance.permissions import PermissionRules
from geofl.governance.reputation import ReputationParams

__all__ = ["BackendConfig", "GovernanceConfig"]


class BackendConfig(BaseModel):
    """The ledger backend: ``embedded`` (in-process EVM) or ``rpc`` with a ``url``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(..., min_length=1, description="embedded or rpc")

    @property
    def params(self) -> dict[str, object]:
        """The parameters (every field but ``name``)."""
        return dict(self.model_extra or {})


class GovernanceConfig(BaseModel):
    """The on-chain governance layer of 000 §3.5 (records and coordinates; never optimises).

    Training nodes are the clients; ``nodes`` restricts governance to a subset (000 §4.7
    observes 6 of 10 clients) and ``validators`` names the nodes that may sit on the
    committee (default: the governed nodes).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: BackendConfig = Field(
        default_factory=lambda: BackendConfig(name="embedded"),
        description="ledger backend: embedded (in-process EVM) or rpc {url: ...}",
    )
    label: str = Field("rule", min_length=1, max_length=64, description="rule record label")
    nodes: list[int] | None = Field(None, description="governed client ids (default: all)")
    validators: list[int] | None = Field(None, description="committee-eligible client ids")
    reputation: ReputationParams = Field(default_factory=ReputationParams)
    committee: CommitteeParams = Field(default_factory=CommitteeParams)
    permissions: PermissionRules = Field(default_factory=PermissionRules)
    consistency_beta: float = Field(
        5.0, gt=0.0, description="β of the consistency score S_i used in Quality (000 Eq. 15)"
    )
    methods: list[str] | None = Field(
        None, description="methods whose runs are governed (default: all)"
    )
