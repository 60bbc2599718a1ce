"""Checking a parsed config against the plug-in registries (keys, parameters, each plug-in's
own cross-field checks) and the few rules that span sections.

Every error is a one-line :class:`~geofl.errors.ConfigError` naming the field path.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from geofl.config.schema import MAX_COUNT, Component, ExperimentConfig, MethodConfig
from geofl.config.secagg import check_secure_aggregation
from geofl.device import check_device
from geofl.errors import ConfigError
from geofl.registry import CheckContext, Registry, printable, require_extra

__all__ = [
    "GEO_ALGORITHMS",
    "PAPER_GEO_ALGORITHMS",
    "check_cache_mode",
    "check_hierarchy_method",
    "clients_per_round",
    "paper_geo",
    "validate_config",
]


def clients_per_round(cfg: ExperimentConfig) -> int | None:
    """Updates each round trains when the sampler fixes the count (fixed), else None."""
    fed = cfg.federation
    if fed.sampling.name != "fixed":
        return None
    return max(1, round(fed.participation * fed.num_clients))


def _method_components(
    m: MethodConfig, path: str
) -> list[tuple[str, Registry[Any], Component, str]]:
    """(role, registry, component, config path) of every plug-in a method names."""
    from geofl import plugins

    out: list[tuple[str, Registry[Any], Component, str]] = [
        ("partition", plugins.PARTITIONERS, m.partition, f"{path}.partition"),
        ("algorithm", plugins.ALGORITHMS, m.algorithm, f"{path}.algorithm"),
        ("trainer", plugins.LOCAL_TRAINERS, m.trainer, f"{path}.trainer"),
        ("weighting", plugins.WEIGHTINGS, m.weighting, f"{path}.weighting"),
        ("aggregator", plugins.AGGREGATORS, m.aggregator, f"{path}.aggregator"),
        ("network", plugins.NETWORK_MODELS, m.network, f"{path}.network"),
    ]
    out += [
        ("release", plugins.RELEASE_STEPS, s, f"{path}.release.{j}")
        for j, s in enumerate(m.release)
    ]
    out += [
        ("defense", plugins.DEFENSES, d, f"{path}.defenses.{j}") for j, d in enumerate(m.defenses)
    ]
    if m.attack is not None:
        out.append(("attack", plugins.ATTACKS, m.attack, f"{path}.attack"))
    return out


def validate_config(cfg: ExperimentConfig) -> None:
    """Check every plug-in's key and parameters, then its own checks against the rest.

    Cross-field rules live with the plug-in that needs them (Krum's K > 2f + 2 in the
    aggregator, SCAFFOLD's linear aggregator in the algorithm, …) as registry checks; this
    function only walks the config and hands each one its context.
    """
    from geofl import plugins

    plugins.load_all()
    exp = cfg.model_dump(mode="json")
    per_round = clients_per_round(cfg)
    top = CheckContext(path="", experiment=exp, clients_per_round=per_round)
    if cfg.data.sites is None:
        _check(plugins.DATASETS, cfg.data.dataset, cfg.data.params, "data.params", "data.dataset")
    else:
        _check_sites(cfg)
    _check(plugins.MODELS, cfg.model.name, cfg.model.params, "model.params", "model.name")
    _component(plugins.TASKS, cfg.task, replace(top, path="task"))
    _component(plugins.SAMPLERS, cfg.federation.sampling, replace(top, path="federation.sampling"))
    _component(plugins.ACCOUNTANTS, cfg.privacy.accountant, replace(top, path="privacy.accountant"))
    for j, aug in enumerate(cfg.train.augment):
        _component(plugins.AUGMENTATIONS, aug, replace(top, path=f"train.augment.{j}"))
    if cfg.train.lr_schedule is not None:
        path = "train.lr_schedule"
        _component(plugins.LR_SCHEDULES, cfg.train.lr_schedule, replace(top, path=path))
    _check_eval_metrics(cfg)
    for i, m in enumerate(cfg.methods):
        comps = _method_components(m, f"methods.{i}")
        traits: dict[str, frozenset[str]] = {}
        for role, reg, comp, path in comps:
            reg.entry(comp.name, path=f"{path}.name")
            traits[role] = traits.get(role, frozenset()) | reg.traits(comp.name)
        ctx = replace(top, method=exp["methods"][i], traits=traits)
        for _role, reg, comp, path in comps:
            _component(reg, comp, replace(ctx, path=path))
        for j, aug in enumerate(m.augment or []):
            _component(plugins.AUGMENTATIONS, aug, replace(top, path=f"methods.{i}.augment.{j}"))
    for i, m in enumerate(cfg.methods):
        check_hierarchy_method(cfg, m, f"methods.{i}")
        check_secure_aggregation(cfg, m, f"methods.{i}")
    check_cache_mode(cfg)
    check_run_device(cfg)
    for i, a in enumerate(cfg.analyses):
        _component(plugins.ANALYSES, a, replace(top, path=f"analyses.{i}"))
    if cfg.governance is not None:
        plugins.SUBSCRIBERS.check("governance", cfg.governance, replace(top, path="governance"))
    if cfg.tracking is not None:
        tracking = cfg.tracking.model_dump()
        plugins.SUBSCRIBERS.check("tracking", tracking, replace(top, path="tracking"))
    _check_sample_count(cfg)


#: Algorithms whose server side is FedAvg's: with aggregator ``mean`` and no defenses the
#: GEO runs the paper's step (003 §2.2.5: staleness × fairness weights, RobustAvg).
PAPER_GEO_ALGORITHMS = ("fedavg", "fedprox", "ema_prox")

#: Algorithms whose server side runs at the GEO over the regional models
#: (:class:`geofl.engine.hierarchy.geo.ComposedGeo`): their server state is a function of
#: the aggregates they receive (a server optimiser's moments, FLAME's clustering, the
#: indicator task, DUAL-SHIELD's trusted history and reputations — per LEO), so staleness
#: only changes the weights they get, which Eq. 8 sets.
GEO_ALGORITHMS = (
    *PAPER_GEO_ALGORITHMS,
    "fedavgm",
    "fedadam",
    "fedyogi",
    "fedadagrad",
    "dual_shield",
    "flame",
    "backdoor_indicator",
)

#: Server sides with no meaning at the GEO, and why (one line each).
_GEO_REFUSED = {
    "scaffold": "SCAFFOLD's control variates assume every client trains from the current "
    "model and server variate (Karimireddy et al. 2020, Alg. 1); tractors train from stale "
    "versions and the tiers carry no control deltas",
    "feddyn": "FedDyn's server state h sums every client's drift from the same w^t (Acar et "
    "al. 2021, Alg. 1); under staleness the drifts start from different versions",
    "fednova": "FedNova normalises by each client's local-step count τ_k (Wang et al. 2020); "
    "the tiers' averages carry no τ",
    "dp_ftrl": "DP-FTRL's tree noise is calibrated to one sum of clipped client updates per "
    "round (Kairouz et al. 2021); the GEO sees regional averages of stale rounds",
}

#: Weightings that read per-client metadata the regional models do not carry.
_GEO_WEIGHTINGS = ("data_size", "uniform")


def paper_geo(method: MethodConfig) -> bool:
    """Whether the GEO runs the paper's step (RobustAvg with ``hierarchy.clip`` and
    ``trim_fraction``): the method's server side is plain FedAvg; else the method's own
    strategy runs at the GEO."""
    return (
        method.algorithm.name in PAPER_GEO_ALGORITHMS
        and method.aggregator.name == "mean"
        and not method.defenses
    )


def check_hierarchy_method(cfg: ExperimentConfig, method: MethodConfig, where: str) -> None:
    """Refuse what the 003 hierarchy cannot run (``method.hierarchy`` set), from the config
    alone: a server side with no meaning at the GEO (``_GEO_REFUSED``, or a weighting that
    needs per-client metadata), DUAL-SHIELD where its per-LEO reputations cannot exist or
    feed ADP, or Krum with fewer LEOs than it needs. (``federation.workers`` > 1 is
    fine: each worker job carries the model version its tractor holds.)
    ``geofl run`` (via :func:`geofl.engine.hierarchy.build.build_scheduler`) and
    ``config validate`` both call this, so they refuse alike.

    Args:
        cfg: The experiment (for ``num_clients``).
        method: The method to check.
        where: Its config path, ``methods.<i>``.

    Raises:
        ConfigError: naming the field; also when orbit contacts lack the ``space`` extra.
    """
    hier = method.hierarchy
    if hier is None:
        return
    name = method.algorithm.name
    if name not in GEO_ALGORITHMS:
        why = _GEO_REFUSED.get(name, f"{name!r} has no server side defined at the GEO")
        raise ConfigError(f"{where}.algorithm", f"{why}: use one of {list(GEO_ALGORITHMS)}")
    if not paper_geo(method):
        _check_geo_strategy(cfg, method, where)
    for tier in ("driver_aggregator", "leo_aggregator"):
        combiner = getattr(hier, tier)
        if combiner is not None:
            _check_tier_combiner(combiner, f"{where}.hierarchy.{tier}")
    if hier.leo.contacts == "orbit":  # sgp4 propagates the TLEs
        require_extra("space", f"{where}.hierarchy.leo.contacts", "or set it to ideal")


#: Combiners a driver or a LEO can use: a cluster or a pass may hold a single model, so
#: nothing that needs a minimum count (Krum's K > 2f + 2).
TIER_COMBINERS = ("mean", "median", "trimmed_mean", "robust_avg")


def _check_tier_combiner(combiner: Component, where: str) -> None:
    """A driver's or LEO's combiner: one of :data:`TIER_COMBINERS`, its parameters valid."""
    from geofl import plugins

    plugins.load_all()
    if combiner.name not in TIER_COMBINERS:
        raise ConfigError(
            f"{where}.name",
            f"{combiner.name!r} cannot combine at a driver or LEO (a cluster or pass may hold "
            f"one model): use one of {list(TIER_COMBINERS)}",
        )
    plugins.AGGREGATORS.validate(combiner.name, combiner.params, path=where)


def _check_geo_strategy(cfg: ExperimentConfig, method: MethodConfig, where: str) -> None:
    """The method's own server side at the GEO: its rows are the regional models, one per
    relaying LEO (client id = LEO id)."""
    hier = method.hierarchy
    assert hier is not None
    robust = sorted({"clip", "trim_fraction"} & hier.model_fields_set)
    if robust:
        raise ConfigError(
            f"{where}.hierarchy.{robust[0]}",
            "RobustAvg's C and β belong to the paper's GEO (plain FedAvg methods); this "
            "method's own server side runs at the GEO: drop them, or use aggregator: "
            "{name: robust_avg, clip: …, trim_fraction: …}",
        )
    if method.weighting.name not in _GEO_WEIGHTINGS:
        raise ConfigError(
            f"{where}.weighting",
            f"{method.weighting.name!r} reads per-client metadata the regional models do not "
            f"carry; at the GEO use one of {list(_GEO_WEIGHTINGS)} (staleness × fairness "
            "multiply it)",
        )
    if method.algorithm.name == "dual_shield":
        if hier.leo.n > cfg.federation.num_clients:
            raise ConfigError(
                f"{where}.hierarchy.leo.n",
                f"DUAL-SHIELD at the GEO keeps one reputation per LEO, {hier.leo.n} LEOs > "
                f"{cfg.federation.num_clients} reputation slots: use at most num_clients LEOs",
            )
        if any(r.name == "adaptive_dp" for r in method.release):
            raise ConfigError(
                f"{where}.release",
                "adaptive_dp scales a client's noise by its reputation, but at the GEO "
                "DUAL-SHIELD's reputations are per LEO, not per tractor: drop adaptive_dp",
            )
    if method.aggregator.name == "krum":
        f = int(method.aggregator.params.get("num_byzantine", 1))
        if hier.leo.n <= 2 * f + 2:
            raise ConfigError(
                f"{where}.aggregator",
                f"Krum at the GEO combines at most {hier.leo.n} regional models (one per "
                f"LEO) and needs more than 2f + 2 = {2 * f + 2}: lower f or add LEOs",
            )


def check_run_device(cfg: ExperimentConfig) -> None:
    """The config's ``device`` exists here and every method can train on it."""
    custom = [m.trainer.name for m in cfg.methods if m.trainer.name != "local_sgd"]
    check_device(
        cfg.device,
        trainers=custom,
        workers=cfg.federation.workers,
        batched=cfg.federation.batch_clients == "auto",
    )


def check_cache_mode(cfg: ExperimentConfig) -> None:
    """Refuse ``data.cache: mmap`` for a dataset whose builder has no memory-mapped store
    (no ``cache_mode`` argument); the run builds the dataset through the same check.

    Raises:
        ConfigError: naming ``data.cache``.
    """
    import inspect

    from geofl import plugins

    if cfg.data.cache == "memory" or cfg.data.sites is not None:
        return
    factory = plugins.DATASETS.entry(cfg.data.dataset, path="data.dataset").factory
    if "cache_mode" not in inspect.signature(factory).parameters:
        raise ConfigError(
            "data.cache",
            f"dataset {cfg.data.dataset!r} has no memory-mapped store; use data.cache: memory",
        )


def _check_eval_metrics(cfg: ExperimentConfig) -> None:
    """Refuse a metric name in ``eval`` that the task does not report (one line).

    Tasks state their metrics with :func:`~geofl.tasks.base.declare_metrics`; for a task
    that states none (a third-party plug-in) the run checks the names when it starts.
    """
    from geofl.tasks.base import TASK_METRICS

    declared = TASK_METRICS.get(cfg.task.name)
    if declared is None:
        return
    ev = cfg.eval
    named = [
        ("eval.select_by", ev.select_by),
        ("eval.early_stopping.metric", ev.early_stopping.metric if ev.early_stopping else None),
        ("eval.target.metric", ev.target.metric if ev.target else None),
    ]
    for path, metric in named:
        if metric is not None and metric not in declared:
            raise ConfigError(
                path,
                f"task {cfg.task.name} reports no metric {printable(metric)!r}; "
                f"choose one of: {', '.join(declared)}",
            )


def _check_sites(cfg: ExperimentConfig) -> None:
    """Site-local data (``data.sites``): every site's dataset definition that is given,
    clients numbered site by site, and only what runs without a server-side dataset.

    Raises:
        ConfigError: naming the field.
    """
    from geofl import plugins

    sites = cfg.data.sites or []
    for i, site in enumerate(sites):
        if site.dataset is not None:
            path = f"data.sites.{i}"
            _check(plugins.DATASETS, site.dataset, site.params, f"{path}.params", f"{path}.dataset")
    hosted = sum(s.clients for s in sites)
    if hosted != cfg.federation.num_clients:
        raise ConfigError(
            "federation.num_clients",
            f"{cfg.federation.num_clients}, but data.sites host {hosted} clients "
            "(Σ data.sites.<i>.clients); make them equal",
        )
    central = "needs a dataset the server holds; not available with data.sites"
    if cfg.eval.group_by is not None:
        raise ConfigError("eval.group_by", central)
    if cfg.analyses:
        raise ConfigError("analyses", central)
    for i, m in enumerate(cfg.methods):
        for key in ("attack", "uplink", "hierarchy"):
            if getattr(m, key) is not None:
                raise ConfigError(f"methods.{i}.{key}", central)


def _check_sample_count(cfg: ExperimentConfig) -> None:
    """Refuse more clients than training samples, and sample counts beyond MAX_COUNT."""
    from geofl import plugins

    if cfg.data.sites is not None:
        return
    params = plugins.DATASETS.validate(cfg.data.dataset, cfg.data.params, path="data.params")
    n = getattr(params, "num_samples", None)  # validated: 1e9 in YAML is the int 10**9
    if not isinstance(n, int) or isinstance(n, bool):
        return
    if n > MAX_COUNT:  # n * (1 - val - test) below would overflow a float
        raise ConfigError("data.params.num_samples", f"must be at most {MAX_COUNT}; give fewer")
    n_train = int(n * (1 - cfg.data.split.val - cfg.data.split.test))
    if cfg.federation.num_clients > n_train:
        raise ConfigError(
            "federation.num_clients",
            f"{cfg.federation.num_clients} clients but only ~{n_train} training samples; "
            "use fewer clients or raise data.params.num_samples",
        )


def _check(reg: Registry[Any], key: str, params: dict[str, Any], path: str, key_path: str) -> None:
    reg.entry(key, path=key_path)
    reg.validate(key, params, path=path)


def _component(reg: Registry[Any], comp: Component, ctx: CheckContext) -> None:
    reg.check(comp.name, comp.params, ctx)
