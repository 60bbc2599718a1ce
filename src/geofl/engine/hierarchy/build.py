"""Build a run's scheduler: the synchronous loop, or the 003 hierarchy when the method has a
``hierarchy`` section (its fleet from the data's farm/tractor context, Alg. 2's clusters, the
contact plans of the tractors that drive them — the initial drivers' at once, a re-elected
driver's at its election); and carry the scheduler's state in checkpoints."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from geofl.config.hierarchy import HierarchyConfig, LeoConfig
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.config.validate import check_hierarchy_method, paper_geo
from geofl.data.splitting.partition import Partition
from geofl.engine.components import PreparedData, RunComponents
from geofl.engine.evaluation.heldout import evaluate
from geofl.engine.hierarchy.contacts import Contacts, DriverContacts, IdealContacts
from geofl.engine.hierarchy.geo import ComposedGeo, GeoStrategy, RobustAvgGeo
from geofl.engine.hierarchy.scheduler import HierarchicalScheduler
from geofl.engine.hierarchy.topology import Topology
from geofl.engine.scheduler import ClientRunner, SyncScheduler
from geofl.errors import ConfigError, HierarchyError, OrbitError
from geofl.hierarchy.clusters import capability_score, form_clusters
from geofl.hierarchy.fleet import REGION_CENTRES, Fleet, fleet_from_context
from geofl.hierarchy.geography import region_centres_of
from geofl.network.contacts import ephemeris
from geofl.network.orbits import Tle, parse_tles, walker_constellation
from geofl.network.stations import StationContacts
from geofl.server.strategy import ComposedStrategy

__all__ = [
    "build_scheduler",
    "fleet_of_run",
    "geo_strategy",
    "leo_contacts",
    "restore_scheduler",
    "scheduler_state",
]

#: Per-sample context columns the fleet is built from (the agri datasets record them).
FLEET_COLUMNS = ("farm", "region", "crop", "soil", "climate", "link_profile")

Scheduler = SyncScheduler | HierarchicalScheduler


def build_scheduler(
    cfg: ExperimentConfig,
    method: MethodConfig,
    seed: int,
    comps: RunComponents,
    data: PreparedData,
    partition: Partition,
    *,
    allowed: Callable[[int, int], bool],
    observe_layers: Sequence[tuple[str, int, int]] | None,
    runner: ClientRunner | None,
) -> Scheduler:
    """The method's scheduler (:class:`SyncScheduler` unless ``method.hierarchy`` is set).

    Raises:
        ConfigError: naming the field when the hierarchy cannot run this method.
    """
    hier = method.hierarchy
    if hier is None:
        return SyncScheduler(
            comps, seed=seed, allowed=allowed, observe_layers=observe_layers, runner=runner
        )
    _check_method(cfg, method, runner)
    fleet = fleet_of_run(data, partition, seed=seed)
    try:
        clusters = form_clusters(fleet, radius_km=hier.radius_km)
    except HierarchyError as err:
        raise ConfigError(f"methods.{method.name}.hierarchy", str(err)) from err
    rho = capability_score(fleet.capability)
    located = np.stack([fleet.lat, fleet.lon], 1)  # λ_i; station i = tractor i
    topo = Topology(
        clusters, rho, fleet.farm, fleet.context_bin, fleet.region, fleet.model_type, located
    )
    if hier.mode == "sync" or hier.leo.contacts == "ideal":
        contacts: Contacts = IdealContacts(hier.leo.slot_s, hier.leo.n)
    else:
        plans = leo_contacts(hier, located, rounds=cfg.federation.rounds, seed=seed)
        plans.prepare(clusters.driver)  # the initial drivers' plans, before the first round
        contacts = DriverContacts(plans)
    probe = _test_probe(cfg, comps, data) if hier.staleness_metric else None
    return HierarchicalScheduler(
        comps,
        hier,
        topo,
        contacts,
        seed=seed,
        allowed=allowed,
        probe=probe,
        geo=geo_strategy(method, comps),
    )


def geo_strategy(method: MethodConfig, comps: RunComponents) -> GeoStrategy:
    """The GEO step of ``method`` (:mod:`geofl.engine.hierarchy.geo`): the paper's RobustAvg
    when its server side is plain FedAvg (:func:`~geofl.config.validate.paper_geo`), else
    its own strategy over the regional models, staleness × fairness composed in.

    Raises:
        ConfigError: when the method's strategy has no tier to compose the weights into.
    """
    hier = method.hierarchy
    assert hier is not None
    if paper_geo(method):
        return RobustAvgGeo(
            kappa=hier.kappa,
            clip=hier.clip,
            trim_fraction=hier.trim_fraction,
            fairness=hier.fairness,
        )
    if not isinstance(comps.strategy, ComposedStrategy):
        raise ConfigError(
            "algorithm", f"{method.algorithm.name!r} cannot run at the GEO: use FedAvg's kin"
        )
    return ComposedGeo(comps.strategy, kappa=hier.kappa, fairness=hier.fairness)


def _test_probe(
    cfg: ExperimentConfig, comps: RunComponents, data: PreparedData
) -> tuple[str, Callable[[torch.Tensor], float]]:
    """The task's primary metric of a flat parameter vector on the test split (Table 10's
    metric per staleness bucket; the workspace is reloaded before every evaluation)."""
    name, task, ws = comps.task.primary_metric, comps.task, comps.workspace

    def probe(params: torch.Tensor) -> float:
        ws.load(params)
        got = evaluate(ws.module, data.test.inputs, data.test.targets, task, cfg.eval.batch_size)
        return float(got.values.get(name, math.nan))

    return name, probe


def _check_method(cfg: ExperimentConfig, method: MethodConfig, runner: ClientRunner | None) -> None:
    """The config-only refusals :func:`~geofl.config.validate.validate_config` makes too
    (one function, so ``config validate`` and ``run`` agree), then the one only a run
    knows: clients that run elsewhere (``runner``, e.g. Flower sites)."""
    index = next((str(i) for i, m in enumerate(cfg.methods) if m.name == method.name), None)
    check_hierarchy_method(cfg, method, f"methods.{index or method.name}")
    if runner is not None:
        raise ConfigError(
            "federation.workers",
            "the hierarchy runs client steps in this process (tractors hold different "
            "model versions): run it without remote clients",
        )


def fleet_of_run(data: PreparedData, partition: Partition, *, seed: int) -> Fleet:
    """The fleet of the run's clients: client k is tractor k, with the farm, region and
    context (crop, soil, climate, link profile) of its training rows and locations drawn
    around the regions' centres (:func:`~geofl.hierarchy.fleet.fleet_from_context`).

    Raises:
        ConfigError: when the data has no farm/tractor context or a client mixes farms.
    """
    meta = data.train.metadata
    missing = [c for c in FLEET_COLUMNS if c not in meta]
    if missing:
        raise ConfigError(
            "data.dataset",
            f"the hierarchy needs per-sample {missing} (farm/tractor context): use an agri "
            "dataset (synthetic_agri, agri)",
        )
    rows = np.concatenate([np.asarray(idx, dtype=np.int64) for idx in partition.indices])
    tractor = np.concatenate(
        [np.full(len(idx), k, dtype=np.int64) for k, idx in enumerate(partition.indices)]
    )
    col = {c: np.asarray(meta[c])[rows] for c in FLEET_COLUMNS}
    _, region = np.unique(col["region"], return_inverse=True)
    _, farm = np.unique(col["farm"], return_inverse=True)
    try:
        centres = REGION_CENTRES  # 003's three regions, unless the rows carry centres
        if "region_lat" in meta and "region_lon" in meta:
            centres = region_centres_of(
                region, np.asarray(meta["region_lat"])[rows], np.asarray(meta["region_lon"])[rows]
            )
        return fleet_from_context(
            tractor,
            farm,
            region,
            col["crop"],
            col["soil"],
            col["climate"],
            col["link_profile"],
            seed=seed,
            region_centres=centres,
        )
    except HierarchyError as err:
        raise ConfigError(
            "partition", f"{err} (the hierarchy needs one tractor per client: group by tractor)"
        ) from err


def leo_contacts(
    cfg: HierarchyConfig, locations: np.ndarray, *, rounds: int, seed: int
) -> StationContacts:
    """Contact plans of the tractors at ``locations`` (``[T, 2]`` lat, lon; station i =
    tractor i, the pass-drop key) over the run's simulated time plus one round (downlinks
    of the last model), from the configured TLEs: the satellites are propagated once here,
    a tractor's plan is computed when it is first asked for (:class:`StationContacts`).

    Raises:
        ConfigError: naming ``hierarchy.leo.tle_file`` on a malformed TLE.
    """
    leo = cfg.leo
    n_slots = math.ceil((rounds + 1) * cfg.round_s / leo.slot_s)
    eph = ephemeris(_tles(leo), start=leo.epoch, n_slots=n_slots, slot_s=leo.slot_s)
    return StationContacts(
        eph,
        locations,
        elevation_mask_deg=leo.elevation_mask_deg,
        p_leo_fail=leo.p_leo_fail,
        seed=seed,
    )


def _tles(leo: LeoConfig) -> list[Tle]:
    if leo.tle_file is None:
        return walker_constellation(
            n_leo=leo.n,
            planes=leo.planes,
            altitude_km=leo.altitude_km,
            inclination_deg=leo.inclination_deg,
            epoch=leo.epoch,
            geo_longitude_deg=leo.geo_longitude_deg,
        )
    try:
        return parse_tles(leo.tle_file.read_text(), source=str(leo.tle_file))
    except (OrbitError, UnicodeDecodeError) as err:
        raise ConfigError("hierarchy.leo.tle_file", str(err)) from err


def scheduler_state(scheduler: Scheduler) -> dict[str, Any]:
    """What a checkpoint carries of the scheduler (the hierarchy's queue, buffers, model
    versions and drivers; nothing for the synchronous loop)."""
    if isinstance(scheduler, HierarchicalScheduler):
        return {"hierarchy": scheduler.state_dict()}
    return {}


def restore_scheduler(scheduler: Scheduler, ckpt: dict[str, Any]) -> None:
    """Restore :func:`scheduler_state` from a checkpoint."""
    if isinstance(scheduler, HierarchicalScheduler) and "hierarchy" in ckpt:
        scheduler.load_state_dict(ckpt["hierarchy"])
