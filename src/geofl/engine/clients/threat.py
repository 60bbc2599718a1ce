"""The data-poisoning threat of a run (004 §2.3): its attack, built for the run's seed and data.

Kept apart from :mod:`geofl.engine.components` so that the experiment driver can build
every method's attack on the whole dataset, and refuse one that does not fit it, before
anything is written.
"""

from __future__ import annotations

import inspect
from typing import Any

from geofl.attacks.client import ATTACKS, AttackContext
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.data.base import ArrayDataset

__all__ = ["build_attack", "check_attack_inputs"]


def build_attack(
    cfg: ExperimentConfig, method: MethodConfig, seed: int, train: ArrayDataset
) -> Any:
    """The method's malicious behaviour (or None).

    A factory with a ``ctx`` keyword gets the run's seed, K, the inputs' shape and the train
    split's class counts (:class:`~geofl.attacks.client.AttackContext`); one without it
    (``scaling``, a third-party behaviour) is built from its parameters alone, as before.

    Raises:
        ConfigError: naming ``methods.<i>.attack…`` when it does not fit the data.
    """
    if method.attack is None:
        return None
    counts: tuple[int, ...] = ()
    if train.target_kind in ("class", "binary", "boxes"):  # attacks check the task at load
        counts = tuple(int(c) for c in train.label_histogram())  # samples / objects per class
    ctx = AttackContext(
        seed,
        cfg.federation.num_clients,
        tuple(int(d) for d in train.inputs.shape[1:]),
        counts,
        path=f"methods.{cfg.methods.index(method)}.attack",
    )
    factory = ATTACKS.entry(method.attack.name).factory
    kwargs = {"ctx": ctx} if "ctx" in inspect.signature(factory).parameters else {}
    return ATTACKS.build(method.attack.name, method.attack.params, **kwargs)


def check_attack_inputs(cfg: ExperimentConfig, ds: ArrayDataset, seed: int) -> None:
    """Build every method's attack on the whole dataset, to refuse one that does not fit
    it (a trigger on tabular inputs or off the image, a target class that does not exist)
    before anything is written.

    Raises:
        ConfigError: naming ``methods.<i>.attack…``.
    """
    for method in cfg.methods:
        build_attack(cfg, method, seed, ds)
