"""Every registry in one place; :func:`load_all` imports the modules that fill them."""

from __future__ import annotations

import importlib

from geofl.attacks.analyses import ANALYSES
from geofl.attacks.client import ATTACKS
from geofl.client.release import RELEASE_STEPS
from geofl.client.trainer import LOCAL_TRAINERS
from geofl.data.base import DATASETS
from geofl.data.partition import PARTITIONERS
from geofl.events import SUBSCRIBERS
from geofl.hierarchy.tiers import TIERS
from geofl.models.base import MODELS
from geofl.network.links import NETWORK_MODELS
from geofl.privacy.accounting import ACCOUNTANTS
from geofl.server.aggregators import AGGREGATORS
from geofl.server.defenses import DEFENSES
from geofl.server.weighting import WEIGHTINGS

__all__ = [
    "ACCOUNTANTS",
    "AGGREGATORS",
    "ANALYSES",
    "ATTACKS",
    "DATASETS",
    "DEFENSES",
    "LOCAL_TRAINERS",
    "MODELS",
    "NETWORK_MODELS",
    "PARTITIONERS",
    "RELEASE_STEPS",
    "SUBSCRIBERS",
    "TIERS",
    "WEIGHTINGS",
    "load_all",
]

#: Modules whose import registers implementations.
_PLUGIN_MODULES = (
    "geofl.data.synthetic",
    "geofl.data.eurosat",
    "geofl.data.ucmerced",
    "geofl.models.cnn",
    "geofl.models.resnet",
    "geofl.server.strategy",
    "geofl.server.robust",
    "geofl.server.consistency",
    "geofl.privacy.mechanisms",
    "geofl.attacks.inference",
)


def load_all() -> None:
    """Import every built-in plug-in module (idempotent)."""
    for name in _PLUGIN_MODULES:
        importlib.import_module(name)
