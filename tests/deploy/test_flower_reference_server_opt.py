"""geofl's FedAdagrad / FedAdam / FedYogi server steps against Flower's strategies
(``flwr.server.strategy.FedAdagrad``, ``FedAdam``, ``FedYogi``) over several rounds on random
client weights. Both start from v₀ = 0 (geofl's ``v0: zero``; its default is Reddi et al.'s
τ²); Flower's FedAdagrad has no first-moment momentum (β₁ = 0), so geofl's is run with
β₁ = 0 there. Flower's FedAdam also multiplies η by √(1 − β₂^(t+1)) / (1 − β₁^(t+1)); the test sets
its η each round so that factor cancels, so what is compared is the moment recursions and
the step of Reddi et al. Alg. 2, exactly as both implement them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

strategy = pytest.importorskip("flwr.server.strategy")
common = pytest.importorskip("flwr.common")

from geofl.server.optimizers import AdaptiveParams, AdaptiveServerOptimizer  # noqa: E402

ETA, BETA1, BETA2, TAU = 0.05, 0.9, 0.99, 1e-3


class _Proxy:  # Flower only reads the FitRes half of each (proxy, result) pair
    cid = "0"


def _fit_res(weights: np.ndarray, n: int) -> object:
    return common.FitRes(
        status=common.Status(code=common.Code.OK, message=""),
        parameters=common.ndarrays_to_parameters([weights]),
        num_examples=n,
        metrics={},
    )


@pytest.mark.parametrize(
    ("kind", "cls"), [("adagrad", "FedAdagrad"), ("adam", "FedAdam"), ("yogi", "FedYogi")]
)
def test_adaptive_server_steps_match_flower(kind: str, cls: str) -> None:
    rng = np.random.default_rng(7)
    d, k = 129, 5
    w = rng.standard_normal(d)
    # Flower's FedAdagrad fixes β₁ = 0 (no first-moment momentum); geofl's takes β₁ as given
    beta1 = 0.0 if cls == "FedAdagrad" else BETA1
    betas = {} if cls == "FedAdagrad" else {"beta_1": BETA1, "beta_2": BETA2}
    flower = getattr(strategy, cls)(
        initial_parameters=common.ndarrays_to_parameters([w.copy()]), eta=ETA, tau=TAU, **betas
    )
    ours = AdaptiveServerOptimizer(
        kind,  # type: ignore[arg-type]
        AdaptiveParams(server_lr=ETA, beta1=beta1, beta2=BETA2, tau=TAU, v0="zero"),
    )
    g = torch.from_numpy(w.copy())
    for t in range(1, 5):
        clients = w + 0.1 * rng.standard_normal((k, d)) + 0.05 * t
        sizes = [int(n) for n in rng.integers(10, 100, size=k)]
        if cls == "FedAdam":  # cancel Flower's bias-corrected step size
            flower.eta = ETA * (1 - BETA1 ** (t + 1)) / math.sqrt(1 - BETA2 ** (t + 1))
        results = [(_Proxy(), _fit_res(c, n)) for c, n in zip(clients, sizes, strict=True)]
        params, _ = flower.aggregate_fit(t, results, [])
        (ref,) = common.parameters_to_ndarrays(params)
        alpha = np.asarray(sizes, dtype=np.float64) / sum(sizes)
        delta = torch.from_numpy(alpha @ (clients - g.numpy()))
        g = ours.step(g, delta)
        np.testing.assert_allclose(g.numpy(), ref, rtol=1e-9, atol=1e-9)
        w = ref
