"""``geofl epsilon`` on hostile numbers (issue 31 item 9): exit 0 with an ε, or exit 2 with
one ``error:`` line — never a traceback, and never an ε for a NaN σ.

Every option is drawn from ordinary values mixed with the edges of its type: NaN, ±inf,
0, negative, subnormal, 1e±300, the bounds of
:data:`~geofl.privacy.accounting.NOISE_MULTIPLIER_RANGE` and huge integers.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from geofl.cli import app

runner = CliRunner()

EDGES = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 5e-324, 1e-300, 1e-160, 1e-150]
EDGES += [1e-6, 0.5, 1.0, 1.5, 1e6, 1e150, 1e160, 1e300]
FLOATS = st.sampled_from(EDGES) | st.floats(allow_nan=True, allow_infinity=True)
SIGMAS = st.sampled_from(EDGES) | st.floats(1e-3, 1e3)
RATES = st.sampled_from([*EDGES, 1e-9, 0.01, 0.999999]) | st.floats(0.0, 1.0)
INTS = st.sampled_from([-1, 0, 1, 2, 64, 10**6, 2**31, 2**63 - 1, 2**63, 10**30])


def _invoke(args: list[str]) -> Result:
    return runner.invoke(app, ["epsilon", *args])


def _assert_answered_or_refused(result: Result, sigmas: list[float]) -> None:
    out = result.output  # an uncaught exception would be exit code 1 here
    assert result.exit_code in (0, 2), (result.exit_code, out, repr(result.exception))
    assert "Traceback" not in out, out
    if result.exit_code == 2:  # geofl's one error line, or click's usage error for an int
        lines = [line for line in out.splitlines() if line.strip()]
        ours = len(lines) == 1 and lines[0].startswith("error: ")
        assert ours or ("Invalid value" in out and lines[0].startswith("Usage:")), out
    else:
        assert not any(math.isnan(z) for z in sigmas), out  # NaN σ must be refused
        assert "ε" in out


FUZZ = settings(
    deadline=None,
    max_examples=60,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FUZZ
@given(
    sigmas=st.lists(SIGMAS, min_size=1, max_size=2),
    q=st.none() | RATES,
    steps=st.none() | INTS,
    rounds=st.none() | INTS,
    delta=st.none() | FLOATS,
    dataset_size=st.none() | INTS,
    batch_size=st.none() | INTS,
    accountant=st.sampled_from(["rdp", "pld"]),
)
def test_epsilon_answers_or_refuses_in_one_line(
    sigmas: list[float],
    q: float | None,
    steps: int | None,
    rounds: int | None,
    delta: float | None,
    dataset_size: int | None,
    batch_size: int | None,
    accountant: str,
) -> None:
    args = [a for z in sigmas for a in ("--sigma", repr(z))]
    for name, value in (
        ("--q", q),
        ("--steps", steps),
        ("--rounds", rounds),
        ("--delta", delta),
        ("--dataset-size", dataset_size),
        ("--batch-size", batch_size),
    ):
        if value is not None:
            args += [name, repr(value)]
    _assert_answered_or_refused(_invoke([*args, "--accountant", accountant]), sigmas)


@pytest.mark.parametrize("sigma", ["nan", "NaN", "inf", "-inf", "0", "-1", "1e-300", "1e300"])
def test_a_sigma_outside_the_accountants_range_is_refused(sigma: str) -> None:
    result = _invoke(["--sigma", sigma, "--q", "0.01", "--steps", "100"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --sigma:") and result.output.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--q", "1e-310", "--steps", "10", "--accountant", "pld"], "--q: q must be in"),
        (["--q", "nan", "--steps", "10"], "--q:"),
        (["--q", "0.1", "--steps", "10", "--delta", "nan"], "--delta:"),
        (["--q", "0.1", "--steps", "10", "--delta", "inf"], "--delta:"),
        (["--dataset-size", str(10**400), "--batch-size", "1"], "--batch-size / --dataset-size"),
        (["--q", "0.1", "--steps", str(10**30), "--rounds", str(10**30)], "--rounds × steps"),
    ],
)
def test_other_numbers_out_of_the_accountants_range_are_refused(
    args: list[str], needle: str
) -> None:
    result = _invoke(["--sigma", "1", *args, "--accountant", "pld"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {needle}"), result.output
    assert result.output.count("\n") == 1, result.output


def test_sigma_at_the_ends_of_the_range_is_answered() -> None:
    for sigma, eps in (("1e150", "0"), ("1e-150", "5.25e+301")):
        result = _invoke(["--sigma", sigma, "--q", "0.01", "--steps", "100"])
        assert result.exit_code == 0, result.output
        assert f"│ {eps} │" in result.output, result.output
