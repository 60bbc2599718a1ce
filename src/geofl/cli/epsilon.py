"""``geofl epsilon``: ε(δ) of DP-SGD settings, before running anything (001 §4.4, §6.1.2).

The same accountant a run uses (:func:`geofl.privacy.budget.ledger_epsilon`): a client
that takes part in ``rounds`` rounds, each ``steps`` DP-SGD steps on Poisson batches with
rate q and noise multiplier σ, releases ``SelfComposed(PoissonSampled(q, Gaussian(σ)),
rounds·steps)``. Give q and the steps directly, or a client's dataset size, batch size and
local epochs (q = B/n, steps = E·round(n/B), as the ``dp_sgd`` trainer plans them).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from geofl.cli.common import fail

__all__ = ["epsilon_cmd"]


def epsilon_cmd(
    noise_multiplier: Annotated[list[float], typer.Option("--sigma", help="σ (repeatable).")],
    rounds: Annotated[int, typer.Option(min=1, help="Rounds the client takes part in.")] = 1,
    q: Annotated[float | None, typer.Option(help="Poisson sampling rate q (else B/n).")] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="DP-SGD steps per round (else E·round(n/B)).")
    ] = None,
    dataset_size: Annotated[int | None, typer.Option(min=1, help="n, local examples.")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="B (expected batch).")] = 64,
    local_epochs: Annotated[int, typer.Option(min=1, help="E.")] = 1,
    delta: Annotated[float, typer.Option(help="δ.")] = 1e-5,
    accountant: Annotated[str, typer.Option(help="rdp or pld.")] = "rdp",
    orders: Annotated[
        str, typer.Option(help="RDP orders: dp_accounting or tf_privacy (001 §6.1.2).")
    ] = "dp_accounting",
) -> None:
    """Print ε(δ) of a client's DP-SGD participation for each σ."""
    from geofl.client.dpsgd import dp_sgd_plan
    from geofl.client.trainer import LocalTrainParams
    from geofl.errors import GeoflError
    from geofl.privacy.budget import ledger_epsilon

    if accountant not in ("rdp", "pld"):
        raise fail(f"--accountant: must be rdp or pld, got {accountant!r}")
    if orders not in ("dp_accounting", "tf_privacy"):
        raise fail(f"--orders: must be dp_accounting or tf_privacy, got {orders!r}")
    if not 0.0 < delta < 1.0:
        raise fail(f"--delta: must be in (0, 1), got {delta:g}")
    if q is not None and not 0.0 < q <= 1.0:
        raise fail(f"--q: must be in (0, 1], got {q:g}")
    if any(z <= 0.0 for z in noise_multiplier):
        raise fail("--sigma: every noise multiplier must be > 0")
    if (q is None or steps is None) and dataset_size is None:
        raise fail("--dataset-size: needed unless both --q and --steps are given")
    plan_q, plan_steps = dp_sgd_plan(
        dataset_size or 1,
        LocalTrainParams(batch_size=batch_size, local_epochs=local_epochs, local_steps=steps),
        q,
    )
    table = Table(
        title=f"ε(δ = {delta:g}), {accountant}, q = {plan_q:.6g}, "
        f"{plan_steps} steps × {rounds} rounds"
    )
    table.add_column("σ", justify="right")
    table.add_column("ε", justify="right")
    params = {"orders": orders} if accountant == "rdp" else {}
    for z in noise_multiplier:
        spec = {
            "mechanism": "poisson_gaussian",
            "noise_multiplier": z,
            "sampling_probability": plan_q,
            "count": plan_steps * rounds,
        }
        try:
            eps = ledger_epsilon([spec], accountant=accountant, params=params, delta=delta)
        except GeoflError as err:
            raise fail(str(err)) from None
        table.add_row(f"{z:g}", f"{eps:.4g}")
    Console().print(table)  # the answer goes to stdout
