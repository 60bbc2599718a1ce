"""Which server sides can run under secure aggregation (``privacy.secure_aggregation``).

Secure aggregation (SecAgg+, Bell et al. 2020, run by Flower's ``SecAggPlusWorkflow``)
gives the server the round's weighted sum Σ_k w_k Δ_k and Σ_k w_k, and nothing about any
single Δ_k: that is its whole guarantee. A server side that needs one update on its own —
to rank it (median, Krum, trimmed mean), measure it (norm bounds, FLAME's clustering,
CGF/DUAL-SHIELD's scores, consistency weights), test it (BackdoorIndicator) or keep state
per client (SCAFFOLD's control deltas, FedNova's τ_k) — cannot run on a sum, and a sum
cannot be made to carry it without giving the guarantee up. So the two cannot both hold;
:func:`check_secure_aggregation` refuses such a method in one line, and ``geofl config
validate``, ``geofl deploy`` and the deployment's server all call it.
"""

from __future__ import annotations

from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.errors import ConfigError

__all__ = ["SECAGG_ALGORITHMS", "SECAGG_WEIGHTINGS", "check_secure_aggregation"]

#: Algorithms whose server step needs only the round's weighted mean (FedAvg and FedProx:
#: the mean itself; FedAvgM/FedAdam/FedYogi/FedAdagrad: a server optimiser on it, Reddi
#: et al. 2021; DP-FTRL: the sum of clipped updates plus tree noise, Kairouz et al. 2021).
SECAGG_ALGORITHMS = ("fedavg", "fedprox", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "dp_ftrl")

#: Weightings a site can apply before the sum: from each client's released n_k, or 1.
SECAGG_WEIGHTINGS = ("data_size", "uniform")

#: Why a server side is refused (one line each; the default names the algorithm).
_REFUSED = {
    "scaffold": "SCAFFOLD's server averages each client's control delta beside Δw "
    "(Karimireddy et al. 2020, Alg. 1), an upload secure aggregation does not carry",
    "feddyn": "FedDyn's server state is updated from the individual drifts it receives "
    "(Acar et al. 2021, Alg. 1)",
    "fednova": "FedNova normalises each Δw by that client's local-step count τ_k (Wang et "
    "al. 2020)",
    "ema_prox": "ema_prox keeps per-client server state",
    "flame": "FLAME clusters the individual updates by cosine distance and clips each to "
    "the median norm (Nguyen et al. 2022)",
    "dual_shield": "DUAL-SHIELD (CGF) scores every individual update against a trusted history",
    "backdoor_indicator": "BackdoorIndicator tests every individual update on its indicator task",
}


def check_secure_aggregation(cfg: ExperimentConfig, method: MethodConfig, where: str) -> None:
    """Refuse a method whose server side needs individual updates when the config asks for
    secure aggregation (``privacy.secure_aggregation``; nothing to check otherwise).

    Args:
        cfg: The experiment.
        method: The method to check.
        where: Its config path, ``methods.<i>``.

    Raises:
        ConfigError: naming the first component that inspects individual updates.
    """
    if cfg.privacy.secure_aggregation is None:
        return
    off = "or drop privacy.secure_aggregation"
    name = method.algorithm.name
    if name not in SECAGG_ALGORITHMS:
        why = _REFUSED.get(name, f"{name!r} needs the individual updates")
        raise ConfigError(
            f"{where}.algorithm",
            f"{why}; secure aggregation shows the server only their sum: use one of "
            f"{list(SECAGG_ALGORITHMS)} {off}",
        )
    if method.aggregator.name != "mean":
        raise ConfigError(
            f"{where}.aggregator",
            f"{method.aggregator.name} compares the individual updates, which secure "
            f"aggregation hides (the server sees their sum): use mean {off}",
        )
    if method.defenses:
        raise ConfigError(
            f"{where}.defenses",
            f"{method.defenses[0].name} inspects each update, which secure aggregation "
            f"hides: clip on the clients (release l2_clip) instead {off}",
        )
    if method.weighting.name not in SECAGG_WEIGHTINGS:
        raise ConfigError(
            f"{where}.weighting",
            f"{method.weighting.name} weighs each update by its own content or metadata, "
            f"which secure aggregation hides: use one of {list(SECAGG_WEIGHTINGS)} {off}",
        )
    _check_transport(method, where, off)


def _check_transport(method: MethodConfig, where: str, off: str) -> None:
    """The network model and the 003 uplink/hierarchy act on individual uploads."""
    if method.network.name != "ideal":
        raise ConfigError(
            f"{where}.network",
            f"{method.network.name} drops individual uploads after they arrive; under "
            f"secure aggregation none arrives on its own: use ideal {off}",
        )
    for part in ("uplink", "hierarchy"):
        if getattr(method, part) is not None:
            raise ConfigError(
                f"{where}.{part}",
                f"the 003 {part} routes and combines individual uploads; a Flower "
                f"deployment with secure aggregation has neither: remove it {off}",
            )
