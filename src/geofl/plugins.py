"""Every registry in one place; :func:`load_all` imports the modules that fill them.

Plug-ins from other packages register themselves the same way: a package declares an entry
point in the ``geofl.plugins`` group naming a module, and :func:`load_all` imports it, e.g.
in its ``pyproject.toml``::

    [project.entry-points."geofl.plugins"]
    my_plugins = "my_package.geofl_plugins"

where ``my_package.geofl_plugins`` calls ``ALGORITHMS.register(...)`` and friends.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points

from geofl.algorithms import ALGORITHMS
from geofl.attacks.analyses import ANALYSES
from geofl.attacks.client import ATTACKS
from geofl.client.augment import AUGMENTATIONS
from geofl.client.release import RELEASE_STEPS
from geofl.client.trainer import LOCAL_TRAINERS
from geofl.data.base import DATASETS
from geofl.data.splitting.partition import PARTITIONERS
from geofl.events import SUBSCRIBERS
from geofl.models.base import MODELS
from geofl.network.links import NETWORK_MODELS
from geofl.privacy.accounting import ACCOUNTANTS
from geofl.server.aggregators import AGGREGATORS
from geofl.server.defenses import DEFENSES
from geofl.server.lr_schedule import LR_SCHEDULES
from geofl.server.sampling import SAMPLERS
from geofl.server.weighting import WEIGHTINGS
from geofl.tasks.base import TASKS

__all__ = [
    "ACCOUNTANTS",
    "AGGREGATORS",
    "ALGORITHMS",
    "ANALYSES",
    "ATTACKS",
    "AUGMENTATIONS",
    "DATASETS",
    "DEFENSES",
    "LOCAL_TRAINERS",
    "LR_SCHEDULES",
    "MODELS",
    "NETWORK_MODELS",
    "PARTITIONERS",
    "RELEASE_STEPS",
    "SAMPLERS",
    "SUBSCRIBERS",
    "TASKS",
    "WEIGHTINGS",
    "load_all",
]

#: Modules whose import registers implementations.
_PLUGIN_MODULES = (
    "geofl.tasks.classification",
    "geofl.data.synthetic.landcover",
    "geofl.data.synthetic.tabular",
    "geofl.data.agri.dataset",
    "geofl.data.agri.files",
    "geofl.data.synthetic.multilabel",
    "geofl.data.synthetic.sen12ms",
    "geofl.data.synthetic.bigearthnet",
    "geofl.data.synthetic.aerial",
    "geofl.data.readers.detection",
    "geofl.data.readers.eurosat",
    "geofl.data.readers.ucmerced",
    "geofl.data.readers.sen12ms",
    "geofl.data.readers.bigearthnet",
    "geofl.data.readers.sentinel2_npz",
    "geofl.models.cnn",
    "geofl.models.resnet",
    "geofl.models.detection.detectors",
    "geofl.algorithms.fedavg",
    "geofl.algorithms.scaffold",
    "geofl.algorithms.feddyn",
    "geofl.algorithms.fednova",
    "geofl.algorithms.emaprox",
    "geofl.algorithms.dpftrl",
    "geofl.algorithms.dual_shield",
    "geofl.algorithms.flame",
    "geofl.algorithms.backdoor_indicator",
    "geofl.server.robust",
    "geofl.server.consistency",
    "geofl.privacy.mechanisms",
    "geofl.privacy.adaptive",
    "geofl.client.spatial",
    "geofl.client.dpsgd",
    "geofl.attacks.inference",
    "geofl.attacks.inversion",
    "geofl.attacks.backdoor",
    "geofl.attacks.adaptive",
    "geofl.attacks.oda",
    "geofl.governance.subscriber",
    "geofl.tracking.subscriber",
)

#: Entry-point group through which other packages add plug-ins.
ENTRY_POINT_GROUP = "geofl.plugins"

log = logging.getLogger("geofl")
_loaded = False


def load_all() -> None:
    """Import every built-in plug-in module, then every ``geofl.plugins`` entry point.

    Idempotent. An entry point that fails to import is logged and skipped, so a broken
    third-party package cannot stop geofl from starting.
    """
    global _loaded
    for name in _PLUGIN_MODULES:
        importlib.import_module(name)
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as err:  # a third-party plug-in's own failure
            log.warning("plug-in entry point %s failed to load: %s", ep.name, err)
