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
    if (q is None or steps is None) and dataset_size is None:
        raise fail("--dataset-size: needed unless both --q and --steps are given")
    q_name = "--q" if q is not None else "--batch-size / --dataset-size"
    if q is None:  # B/n as dp_sgd_plan takes it, computed here so it can be checked
        q = 1.0 if batch_size >= (dataset_size or 1) else batch_size / (dataset_size or 1)
    bad = _bad_number(noise_multiplier, (q_name, q), delta)
    if bad is not None:
        raise fail(bad)
    plan_q, plan_steps = dp_sgd_plan(
        dataset_size or 1,
        LocalTrainParams(batch_size=batch_size, local_epochs=local_epochs, local_steps=steps),
        q,
    )
    bad = _bad_count(plan_steps * rounds)
    if bad is not None:
        raise fail(bad)
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


def _bad_number(sigmas: list[float], rate: tuple[str, float], delta: float) -> str | None:
    """Why σ, q (``rate``: the option it came from and its value, given or B/n) or δ is
    out of range (NaN and ±inf included), or None.

    σ must lie in :data:`~geofl.privacy.accounting.NOISE_MULTIPLIER_RANGE` and q be at
    least :data:`~geofl.privacy.accounting.MIN_SAMPLING_RATE`: a NaN σ would print ε = 0,
    and beyond these bounds the accountants divide by an underflowed σ², overflow or raise
    (PLD on a subnormal q), so such a value is refused rather than answered wrongly.
    """
    from geofl.privacy.accounting import MIN_SAMPLING_RATE, NOISE_MULTIPLIER_RANGE

    lo, hi = NOISE_MULTIPLIER_RANGE
    for z in sigmas:
        if not lo <= z <= hi:  # False for NaN
            return f"--sigma: must be a number in [{lo:g}, {hi:g}], got {z:g}"
    if not 0.0 < delta < 1.0:
        return f"--delta: must be in (0, 1), got {delta:g}"
    name, q = rate
    if not MIN_SAMPLING_RATE <= q <= 1.0:
        return f"{name}: q must be in [{MIN_SAMPLING_RATE:.3g}, 1], got {q:g}"
    return None


def _bad_count(count: int) -> str | None:
    """Why ``count`` DP-SGD steps are more than the accountants compose, or None."""
    from geofl.privacy.accounting import MAX_RELEASES

    if count > MAX_RELEASES:  # not printed: a product of huge ints may not print
        return f"--rounds × steps: more than {MAX_RELEASES} releases, the most accounted"
    return None
