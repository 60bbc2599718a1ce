"""What the server and every site build from the same experiment config.

A deployment runs one (method, seed) of an experiment config. The server and each site
load the config, the dataset, the seed's split and the method's partition exactly as the
simulator does (:mod:`geofl.engine.experiment`), so site ``k`` trains on the simulator's
client ``k`` data and the deployment reproduces the simulation. A site keeps only the
clients it hosts; the server uses the split's validation and test parts for evaluation.

The config's :func:`fingerprint` — one hash per section that changes a result — travels
with every request, so a site whose config differs (another model, task, method, …) is
refused with the sections named instead of training something else. With site-local
data (``data.sites``) a site's dataset definition is its own: only the sites' names and
client counts enter the fingerprint.

Randomness (``privacy.randomness``, :mod:`geofl.rng`): a deployment is ``secure`` unless
told otherwise — every party draws its noise and sampling from a secret it holds, so the
server cannot regenerate a site's DP noise (nor a client the server's). ``seeded`` (the
simulator's default, which reproduces the simulation bit for bit) needs an explicit
choice: the config's ``privacy.randomness: seeded`` or the ``randomness`` run/node config
key (``geofl deploy loopback --randomness seeded``), and logs a warning. The resolved mode
is written into the setup's config, so it enters the fingerprint: a site whose mode
differs from the server's is refused, and the server's ``config.yaml`` records it.

Secure aggregation (``privacy.secure_aggregation``, :mod:`geofl.deploy.secagg`) is
resolved the same way (the config's, or the ``secure-aggregation`` run/node config key)
and has its own fingerprint entry, so a site and a server that disagree on it are refused
with it named.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from geofl import plugins
from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.config.secagg import check_secure_aggregation
from geofl.config.training import SecureAggregationConfig
from geofl.data.splitting.partition import Partition
from geofl.data.splitting.split import make_split
from geofl.engine.components import PreparedData
from geofl.engine.experiment import (
    build_partition,
    load_dataset,
    method_stats_split,
    prepare_split,
    split_labels,
    task_info,
)
from geofl.errors import ConfigError, DeployError
from geofl.rng import RANDOMNESS_MODES, Randomness

__all__ = [
    "SEEDED_WARNING",
    "DeploySetup",
    "deploy_randomness",
    "fingerprint",
    "fingerprint_mismatch",
    "load_setup",
    "with_secure_aggregation",
]

log = logging.getLogger("geofl")

#: Logged (and printed by ``geofl deploy``) when a deployment runs seeded.
SEEDED_WARNING = (
    "privacy.randomness is seeded: every site's DP noise and batch sampling (and DP-FTRL's "
    "tree noise) derive from the seed in the config, so the server (and any client with the "
    "config) can regenerate and remove them — ε = ∞ against them; use secure outside "
    "reproducibility tests"
)

#: Config sections whose difference between server and a site changes the run.
FINGERPRINT_SECTIONS = ("data", "task", "model", "train", "federation", "privacy", "method")


@dataclass(frozen=True)
class DeploySetup:
    """One (method, seed) of an experiment, with its prepared data and partition (None
    with site-local data, ``data.sites``: each site prepares its own,
    :mod:`geofl.deploy.sitedata`)."""

    cfg: ExperimentConfig
    method: MethodConfig
    seed: int
    data: PreparedData | None
    partition: Partition | None


def pick_method(cfg: ExperimentConfig, name: str | None) -> MethodConfig:
    """The method called ``name`` (None: the config's only method).

    Raises:
        ConfigError: naming ``methods`` when it is absent or ambiguous.
    """
    if name is None or name == "":
        if len(cfg.methods) != 1:
            names = [m.name for m in cfg.methods]
            raise ConfigError("methods", f"name the method to deploy, one of {names}")
        return cfg.methods[0]
    for m in cfg.methods:
        if m.name == name:
            return m
    raise ConfigError(
        "methods", f"no method {name!r}; choose one of {[m.name for m in cfg.methods]}"
    )


def deploy_randomness(cfg: ExperimentConfig, override: str | None = None) -> Randomness:
    """The randomness mode of a deployment: ``override`` (a run or node config's
    ``randomness``) when given, else the config's ``privacy.randomness``, else ``secure``.

    Raises:
        ConfigError: naming ``randomness`` when ``override`` is not a mode.
    """
    if override:
        if override not in RANDOMNESS_MODES:
            raise ConfigError(
                "randomness", f"{override!r} is not a mode; use one of {list(RANDOMNESS_MODES)}"
            )
        return "seeded" if override == "seeded" else "secure"
    return cfg.privacy.randomness or "secure"


def _with_randomness(cfg: ExperimentConfig, mode: Randomness) -> ExperimentConfig:
    privacy = cfg.privacy.model_copy(update={"randomness": mode})
    return cfg.model_copy(update={"privacy": privacy})


def with_secure_aggregation(cfg: ExperimentConfig, on: bool) -> ExperimentConfig:
    """``cfg`` with ``privacy.secure_aggregation`` switched on (Flower's defaults) when
    ``on`` (a run/node config's ``secure-aggregation``, ``geofl deploy loopback --secagg``)
    and the config does not set it, every method checked for it.

    Raises:
        ConfigError: naming the first method component that needs individual updates
            (:func:`~geofl.config.secagg.check_secure_aggregation`).
    """
    if on and cfg.privacy.secure_aggregation is None:
        privacy = cfg.privacy.model_copy(update={"secure_aggregation": SecureAggregationConfig()})
        cfg = cfg.model_copy(update={"privacy": privacy})
    for i, m in enumerate(cfg.methods):
        check_secure_aggregation(cfg, m, f"methods.{i}")
    return cfg


def load_setup(
    config: str | Path,
    method: str | None,
    seed: int | None,
    randomness: str | None = None,
    secure_aggregation: bool = False,
) -> DeploySetup:
    """Load ``config`` and build the split and partition of (``method``, ``seed``) (with
    site-local data, ``data.sites``, the config only); ``privacy.randomness`` is resolved by
    :func:`deploy_randomness` (``randomness``: the run or node config's override), and
    ``secure_aggregation`` switches it on (:func:`with_secure_aggregation`).

    Raises:
        DeployError: when the config file is missing.
        ConfigError, DataError: as the simulator raises them (e.g. the dataset's files
            are missing); a method that needs individual updates under secure aggregation.
    """
    path = Path(config).expanduser()
    if not path.is_file():
        raise DeployError(
            f"experiment config {path} not found; give its path in the run/node config"
        )
    plugins.load_all()
    cfg = load_config(path)
    mode = deploy_randomness(cfg, randomness)
    if mode == "seeded":
        log.warning(SEEDED_WARNING)
    cfg = with_secure_aggregation(_with_randomness(cfg, mode), secure_aggregation)
    m = pick_method(cfg, method)
    s = cfg.seeds[0] if seed is None else int(seed)
    if cfg.data.sites is not None:  # site-local data: nothing to load here
        return DeploySetup(cfg, m, s, None, None)
    ds = load_dataset(cfg)
    task_info(cfg, ds)
    split = make_split(split_labels(ds), cfg.data.split, s, ds.metadata)
    data = prepare_split(ds, cfg, s, split, stats_from=method_stats_split(m))
    part = build_partition(cfg, m, ds, split.train, s)
    return DeploySetup(cfg, m, s, data, part)


def fingerprint(cfg: ExperimentConfig, method: MethodConfig, seed: int) -> dict[str, str]:
    """A short hash of every result-relevant config section, the seed, and the randomness
    mode in clear (when the config sets it; :func:`load_setup` always does)."""
    dump = cfg.model_dump(mode="json")
    dump["data"] = {k: v for k, v in dump["data"].items() if k not in ("cache", "cache_dir")}
    if dump["data"].get("sites") is not None:  # each site's definition (paths) is its own
        dump["data"]["sites"] = [
            {"name": s["name"], "clients": s["clients"]} for s in dump["data"]["sites"]
        ]
    dump["federation"] = {k: v for k, v in dump["federation"].items() if k != "workers"}
    dump["method"] = method.model_dump(mode="json")
    randomness = dump["privacy"].pop("randomness", None)  # its own entry, named on mismatch
    secagg = dump["privacy"].pop("secure_aggregation", None)  # so is secure aggregation
    out = {}
    for key in FINGERPRINT_SECTIONS:
        text = json.dumps(dump.get(key), sort_keys=True, separators=(",", ":"))
        out[key] = hashlib.sha256(text.encode()).hexdigest()[:16]
    out["seed"] = str(seed)
    if randomness is not None:
        out["randomness"] = str(randomness)
    if secagg is not None:
        out["secure_aggregation"] = json.dumps(secagg, sort_keys=True, separators=(",", ":"))
    return out


def fingerprint_mismatch(server: dict[str, str], site: dict[str, str]) -> list[str]:
    """The sections whose hashes differ (empty: the same run)."""
    return sorted(k for k in set(server) | set(site) if server.get(k) != site.get(k))
