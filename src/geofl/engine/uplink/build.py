"""Building a method's 003 uplink for a run: the load-time check of its inputs and the
tractors' nominal link profiles (drawn in fixed shares, or the dataset's per-region
connectivity, 003 Table 12)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from geofl.config.schema import ExperimentConfig
from geofl.config.uplink import UplinkConfig
from geofl.data.base import ArrayDataset
from geofl.engine.uplink.ground import Uplink
from geofl.errors import ConfigError
from geofl.network.rural import profiles_from_data

__all__ = ["build_uplink", "check_uplink_inputs"]


def build_uplink(
    cfg: UplinkConfig,
    train_metadata: Mapping[str, Any],
    indices: Sequence[Any],
    seed: int,
) -> Uplink:
    """A method's uplink over the clients holding ``indices`` of the train split, with
    tractor profiles from its ``link_profile`` when ``network.profile_source: data``
    (checked at load by :func:`check_uplink_inputs`)."""
    profiles = None
    if cfg.network.profile_source == "data":
        link = np.asarray(train_metadata["link_profile"])
        profiles = profiles_from_data(link, [np.asarray(p) for p in indices])
    return Uplink(cfg, len(indices), seed, profiles)


def check_uplink_inputs(cfg: ExperimentConfig, ds: ArrayDataset) -> None:
    """Refuse ``uplink.network.profile_source: data`` on a dataset without a usable per-sample
    ``link_profile`` (0/1/2 = 3G/4G/5G; the agri file readers write −1: unknown).

    Raises:
        ConfigError: naming ``methods.<i>.uplink.network.profile_source``.
    """
    link = ds.metadata.get("link_profile")
    for i, method in enumerate(cfg.methods):
        if method.uplink is None or method.uplink.network.profile_source != "data":
            continue
        field = f"methods.{i}.uplink.network.profile_source"
        if link is None:
            raise ConfigError(
                field,
                f"dataset {ds.name!r} has no per-sample link_profile; use `shares` "
                "(profiles drawn in network.shares)",
            )
        values = np.asarray(link)
        if values.size and (values.min() < 0 or values.max() > 2):
            raise ConfigError(
                field,
                f"dataset {ds.name!r} has unknown link profiles (values outside 0 = 3G, "
                "1 = 4G, 2 = 5G); use `shares`",
            )
