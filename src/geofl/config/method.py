"""One entry of ``methods``: a compared method's plug-ins (partition, algorithm, trainer,
release, defenses, weighting, aggregator, attack, network) and its 003 uplink or hierarchy."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from geofl.config.base import Component, _OmitUnset
from geofl.config.hierarchy import HierarchyConfig
from geofl.config.uplink import UplinkConfig

__all__ = ["MethodConfig"]


class MethodConfig(_OmitUnset):
    """One compared method: partition, algorithm, local trainer, release steps, weighting,
    defenses and aggregator (the last three compose inside the algorithm's strategy)."""

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("augment", "uplink", "hierarchy")

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=64)
    label: str | None = Field(None, description="display name in reports")
    partition: Component = Field(default_factory=lambda: Component(name="iid"))
    algorithm: Component = Field(
        default_factory=lambda: Component(name="fedavg"),
        description="federated algorithm: fedavg, fedprox, scaffold, feddyn, fednova, ...",
    )
    trainer: Component = Field(default_factory=lambda: Component(name="local_sgd"))
    release: list[Component] = Field(default_factory=list, description="client release steps")
    defenses: list[Component] = Field(default_factory=list, description="server-side filters")
    weighting: Component = Field(default_factory=lambda: Component(name="data_size"))
    aggregator: Component = Field(default_factory=lambda: Component(name="mean"))
    attack: Component | None = Field(None, description="malicious-client behaviour")
    network: Component = Field(default_factory=lambda: Component(name="ideal"))
    augment: list[Component] | None = Field(
        None,
        description="this method's training augmentations, replacing train.augment (e.g. "
        "FL-SPDP's spectral augmentation against baselines without it, 001 Table 4); "
        "None: train.augment",
    )
    uplink: UplinkConfig | None = Field(
        None,
        description="003 ground-layer uplink (pipelines, NQI, envelopes, rural links); "
        "replaces `network`, which must stay `ideal`; None: uploads go through `network`",
    )
    hierarchy: HierarchyConfig | None = Field(
        None,
        description="003 space-assisted hierarchy: tractor → cluster driver → LEO → GEO on "
        "a simulated clock (§2.2, Alg. 3); None: the synchronous flat loop",
    )

    @model_validator(mode="after")
    def _uplink_replaces_network(self) -> MethodConfig:
        if self.uplink is not None and self.network.name != "ideal":
            raise ValueError(
                f"network {self.network.name!r} and uplink are both set; the uplink models "
                "the links itself: drop `network` or set it to ideal"
            )
        return self
