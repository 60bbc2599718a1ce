"""Loading experiment configs: presets or YAML files, ``--set`` overrides, validation.

Every error is a one-line :class:`~geofl.errors.ConfigError` naming the field path.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from geofl.config.schema import Component, ExperimentConfig, MethodConfig
from geofl.errors import ConfigError
from geofl.registry import Registry, format_validation_error

__all__ = [
    "apply_override",
    "list_presets",
    "load_config",
    "load_raw",
    "preset_path",
    "validate_config",
]


def list_presets() -> dict[str, str]:
    """Preset name → its description (first line)."""
    out: dict[str, str] = {}
    for entry in sorted(resources.files("geofl.config.presets").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            raw = yaml.safe_load(entry.read_text(encoding="utf-8")) or {}
            out[entry.name[: -len(".yaml")]] = str(raw.get("description", "")).strip()
    return out


def preset_path(name: str) -> Path:
    """Path of a shipped preset."""
    return Path(str(resources.files("geofl.config.presets").joinpath(f"{name}.yaml")))


def load_raw(source: str | Path) -> dict[str, Any]:
    """Parse a preset name or a YAML file into a dict (no validation yet)."""
    path = Path(source)
    if not path.suffix and str(source) in list_presets():
        path = preset_path(str(source))
    if not path.exists():
        presets = ", ".join(list_presets())
        raise ConfigError("config", f"{source!s} is neither a preset ({presets}) nor a file")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError("config", f"{path} is not valid YAML: {err}".splitlines()[0]) from None
    if not isinstance(raw, dict):
        raise ConfigError("config", f"{path} must hold a mapping at the top level")
    return raw


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply ``path.to.field=value`` in place; the value is parsed as YAML.

    List items are addressed by index (``methods.1.partition.alpha=0.5``) or, for
    ``methods``, by method name (``methods.fedavg-iid.partition.alpha=0.5``).
    """
    if "=" not in assignment:
        raise ConfigError("--set", f"{assignment!r} must look like path.to.field=value")
    path, _, text = assignment.partition("=")
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise ConfigError("--set", f"{assignment!r} names no field")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    node: Any = raw
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        where = ".".join(keys[: depth + 1])
        if isinstance(node, list):
            idx = _list_index(node, key, where)
            if last:
                node[idx] = value
            else:
                node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        else:
            raise ConfigError(where, f"cannot set a field inside a {type(node).__name__}")


def _list_index(node: list[Any], key: str, where: str) -> int:
    if key.lstrip("-").isdigit():
        idx = int(key)
        if not -len(node) <= idx < len(node):
            raise ConfigError(where, f"index {idx} out of range (list has {len(node)} items)")
        return idx
    for i, item in enumerate(node):
        if isinstance(item, dict) and item.get("name") == key:
            return i
    raise ConfigError(where, f"no list item named {key!r}")


def load_config(
    source: str | Path, overrides: Iterable[str] = (), seeds: list[int] | None = None
) -> ExperimentConfig:
    """Load, override and fully validate an experiment config.

    Args:
        source: Preset name or YAML path.
        overrides: ``path=value`` assignments, applied in order.
        seeds: Replaces ``seeds`` when given.

    Raises:
        ConfigError: naming the first invalid field.
    """
    raw = load_raw(source)
    for assignment in overrides:
        apply_override(raw, assignment)
    if seeds is not None:
        raw["seeds"] = seeds
    try:
        cfg = ExperimentConfig.model_validate(raw)
    except ValidationError as err:
        raise format_validation_error(err) from None
    validate_config(cfg)
    return cfg


def validate_config(cfg: ExperimentConfig) -> None:
    """Check registry keys and plug-in parameters, and cross-field constraints."""
    from geofl import plugins

    plugins.load_all()
    _check(plugins.DATASETS, cfg.data.dataset, cfg.data.params, "data.params", "data.dataset")
    _check(plugins.MODELS, cfg.model.name, cfg.model.params, "model.params", "model.name")
    for i, m in enumerate(cfg.methods):
        p = f"methods.{i}"
        _component(plugins.PARTITIONERS, m.partition, f"{p}.partition")
        _component(plugins.LOCAL_TRAINERS, m.trainer, f"{p}.trainer")
        _component(plugins.WEIGHTINGS, m.weighting, f"{p}.weighting")
        _component(plugins.AGGREGATORS, m.aggregator, f"{p}.aggregator")
        _component(plugins.NETWORK_MODELS, m.network, f"{p}.network")
        for j, s in enumerate(m.release):
            _component(plugins.RELEASE_STEPS, s, f"{p}.release.{j}")
        for j, d in enumerate(m.defenses):
            _component(plugins.DEFENSES, d, f"{p}.defenses.{j}")
        if m.attack is not None:
            _component(plugins.ATTACKS, m.attack, f"{p}.attack")
            bad = [c for c in m.attack.params.get("clients", []) if c >= cfg.federation.num_clients]
            if bad:
                raise ConfigError(
                    f"{p}.attack.clients",
                    f"client ids {bad} do not exist (federation.num_clients="
                    f"{cfg.federation.num_clients})",
                )
        _check_krum(cfg, m, p)
        _check_noise_and_norm(cfg, m, p)
    _component(plugins.ACCOUNTANTS, cfg.privacy.accountant, "privacy.accountant")
    for i, a in enumerate(cfg.analyses):
        _component(plugins.ANALYSES, a, f"analyses.{i}")
        _check_attack(cfg, a, f"analyses.{i}")
    _check_governance(cfg)
    n = cfg.data.params.get("num_samples")
    if isinstance(n, int):
        n_train = int(n * (1 - cfg.data.split.val - cfg.data.split.test))
        if cfg.federation.num_clients > n_train:
            raise ConfigError(
                "federation.num_clients",
                f"{cfg.federation.num_clients} clients but only ~{n_train} training samples; "
                "use fewer clients or raise data.params.num_samples",
            )


def _check_krum(cfg: ExperimentConfig, m: MethodConfig, path: str) -> None:
    """Krum needs K > 2f + 2 updates per round (Blanchard et al. 2017): check it up front."""
    if m.aggregator.name not in ("krum", "multi_krum"):
        return
    f = int(m.aggregator.params.get("num_byzantine", 1))
    fed = cfg.federation
    k = max(1, round(fed.participation * fed.num_clients))
    if not k > 2 * f + 2:
        raise ConfigError(
            f"{path}.aggregator.num_byzantine",
            f"Krum needs more than 2f+2 = {2 * f + 2} updates per round but only {k} clients "
            "take part; lower num_byzantine or raise federation.num_clients/participation",
        )
    sel = int(m.aggregator.params.get("num_selected", 1))
    if sel > k - f:
        raise ConfigError(
            f"{path}.aggregator.num_selected",
            f"Multi-Krum can select at most K − f = {k - f} of the {k} updates per round",
        )


#: Release steps that add Gaussian noise to the whole flat vector.
_NOISE_STEPS = ("gaussian", "risk_aware")


def _check_noise_and_norm(cfg: ExperimentConfig, m: MethodConfig, path: str) -> None:
    """Noise on Δw also hits float buffers; BatchNorm running variances could go negative."""
    noisy = [i for i, s in enumerate(m.release) if s.name in _NOISE_STEPS]
    if noisy and cfg.model.params.get("norm") == "batch":
        raise ConfigError(
            f"{path}.release.{noisy[0]}",
            "noise release steps perturb BatchNorm running statistics too; use "
            "model.params.norm=group (the default) with noise",
        )


def _check_attack(cfg: ExperimentConfig, a: Component, path: str) -> None:
    """The attack needs the server's recorded view and enough rounds for one window."""
    if a.name != "attribute_inference":
        return
    if not cfg.eval.observe_updates:
        raise ConfigError(
            path, "attribute_inference needs eval.observe_updates: true (the server's view)"
        )
    names = {m.name for m in cfg.methods}
    unknown = sorted(set(a.params.get("methods") or []) - names)
    if unknown:
        raise ConfigError(
            f"{path}.methods", f"unknown methods {unknown}; choose from {sorted(names)}"
        )
    window = int(a.params.get("window", 5))
    if window > cfg.federation.rounds:
        raise ConfigError(
            f"{path}.window",
            f"window={window} exceeds federation.rounds={cfg.federation.rounds}; lower it",
        )


def _check_governance(cfg: ExperimentConfig) -> None:
    """Governed nodes must exist, validators must be governed, seats must be fillable."""
    g = cfg.governance
    if g is None:
        return
    k = cfg.federation.num_clients
    nodes = g.nodes if g.nodes is not None else list(range(k))
    bad = sorted(n for n in nodes if not 0 <= n < k)
    if bad:
        raise ConfigError("governance.nodes", f"clients {bad} do not exist (K={k})")
    validators = g.validators if g.validators is not None else nodes
    outside = sorted(set(validators) - set(nodes))
    if outside:
        raise ConfigError("governance.validators", f"{outside} are not governed nodes {nodes}")
    if len(set(validators)) < g.committee.size:
        raise ConfigError(
            "governance.committee.size",
            f"{g.committee.size} seats but only {len(set(validators))} validators",
        )
    names = {m.name for m in cfg.methods}
    unknown = sorted(set(g.methods or []) - names)
    if unknown:
        raise ConfigError("governance.methods", f"unknown methods {unknown}")


def _check(reg: Registry[Any], key: str, params: dict[str, Any], path: str, key_path: str) -> None:
    reg.entry(key, path=key_path)
    reg.validate(key, params, path=path)


def _component(reg: Registry[Any], comp: Component, path: str) -> None:
    reg.entry(comp.name, path=f"{path}.name")
    reg.validate(comp.name, comp.params, path=path)
