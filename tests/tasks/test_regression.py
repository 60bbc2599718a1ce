"""The regression task: train-only standardisation, metrics against scikit-learn, bins."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error
from tests.tasks.helpers import assert_same_metrics

from geofl.errors import ConfigError
from geofl.rng import torch_generator
from geofl.tasks import TASKS, common, regression
from geofl.tasks.regression import RegressionTask
from geofl.tasks.scoring import mse_mae_r2, mse_mae_r2_scalar


def _build(targets: torch.Tensor, **params: object) -> RegressionTask:
    task = TASKS.build("regression", params, num_classes=0, train_targets=targets)
    assert isinstance(task, RegressionTask)
    return task


def test_standardisation_by_hand_and_round_trip() -> None:
    task = _build(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert task.mean.tolist() == [2.5]
    assert task.std.tolist() == [pytest.approx(math.sqrt(1.25))]  # population std
    assert task.num_outputs == 1
    y = torch.tensor([-3.0, 0.0, 2.5, 100.0])
    z = task.standardise(y)
    assert z[:, 0].tolist() == pytest.approx([(v - 2.5) / math.sqrt(1.25) for v in y.tolist()])
    assert task.predict(z).shape == (4,)
    torch.testing.assert_close(task.predict(z), y)
    # the loss is the MSE in standardised units: output z + 1 everywhere → loss 1
    assert float(task.loss(z + 1, y)) == pytest.approx(1.0)
    assert task.loss_sum(z + 1, y) == pytest.approx(4.0)


def test_two_outputs_use_train_statistics_only() -> None:
    train = torch.tensor([[0.0, 10.0], [2.0, 30.0]])
    task = _build(train)
    assert task.mean.tolist() == [1.0, 20.0] and task.std.tolist() == [1.0, 10.0]
    out = torch.tensor([[1.0, -1.0]])
    assert task.predict(out).tolist() == [[2.0, 10.0]]


@pytest.mark.parametrize("seed", range(12))
def test_metrics_match_sklearn_over_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = int(rng.integers(1, 4))
    offset, scale = rng.choice([0.0, 1e4]), rng.choice([1e-2, 1.0, 50.0])
    train = offset + scale * rng.normal(size=(200, t))
    y = offset + scale * rng.normal(size=(int(rng.integers(2, 90)), t))
    flat = t == 1 and seed % 2 == 0
    task = _build(torch.from_numpy(train[:, 0] if flat else train).float())
    out = torch.from_numpy(rng.normal(size=(len(y), t))).float()
    target = torch.from_numpy(y[:, 0] if flat else y)

    acc = task.accumulator()
    for idx in torch.tensor_split(torch.arange(len(y)), 3):
        acc.update(out[idx], target[idx], task.loss_sum(out[idx], target[idx]))
    got = acc.compute()
    whole = task.accumulator()
    whole.update(out, target, task.loss_sum(out, target))
    assert_same_metrics(got, whole.compute())

    y_hat = out.double().numpy() * task.std.numpy() + task.mean.numpy()
    assert got["rmse"] == pytest.approx(root_mean_squared_error(y, y_hat))
    assert got["mae"] == pytest.approx(mean_absolute_error(y, y_hat))
    assert got["r2"] == pytest.approx(r2_score(y, y_hat), rel=1e-6)
    z = (y - task.mean.numpy()) / task.std.numpy()
    assert got["loss"] == pytest.approx(float(np.mean((out.double().numpy() - z) ** 2)), rel=1e-5)
    np.testing.assert_allclose(
        got.per_class["r2"], r2_score(y, y_hat, multioutput="raw_values"), rtol=1e-6
    )
    assert got.n == len(y) and got.notes == ()


def test_perfect_predictions_and_constant_split() -> None:
    task = _build(torch.tensor([-1.0, 1.0]))  # μ = 0, σ = 1: outputs are exact
    y = torch.tensor([5.0, 5.0, 5.0])
    acc = task.accumulator()
    acc.update(task.standardise(y), y, 0.0)
    m = acc.compute()
    assert (m["rmse"], m["mae"], m["r2"]) == (0.0, 0.0, 1.0)
    assert r2_score(y.numpy(), y.numpy()) == 1.0
    assert "constant in this split" in m.notes[0]
    single = task.accumulator()
    single.update(torch.zeros(1), torch.tensor([1.0]), 0.0)
    assert math.isnan(single.compute()["r2"]) and "fewer than 2" in single.compute().notes[0]


def test_quantile_bins_by_hand() -> None:
    task = _build(torch.arange(10.0), bins=5)
    # numpy linear quantiles of 0..9 at 0.2, 0.4, 0.6, 0.8
    assert task.edges.tolist() == pytest.approx([1.8, 3.6, 5.4, 7.2])
    assert task.label_summary(torch.arange(10.0)).tolist() == [2, 2, 2, 2, 2]
    # e_{k−1} ≤ y < e_k: an edge value falls in the upper bin; out-of-range values clip
    e = task.edges
    e3 = float(e[3])
    y = torch.tensor([-50.0, float(e[0]), np.nextafter(e3, 0.0), e3, 1e9], dtype=torch.float64)
    assert task.discrete_labels(y).tolist() == [0, 1, 3, 4, 4]
    two = _build(
        torch.tensor([[0.0, 5.0], [1.0, 6.0], [2.0, 7.0], [3.0, 9.0]]), bins=2, bin_output=1
    )
    assert two.edges.tolist() == [6.5]
    assert two.label_summary(torch.tensor([[0.0, 5.0], [0.0, 6.9], [0.0, 8.0]])).tolist() == [1, 2]


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (torch.tensor([0, 1, 2]), "integer targets [N] int64 given to the regression task"),
        (torch.zeros(3, 2), "targets [N, 2] float32 do not match the regression task's 1 output"),
        (torch.tensor([1.0, float("nan")]), "1 regression targets are NaN or infinite"),
    ],
)
def test_bad_targets_are_refused_in_one_line(targets: torch.Tensor, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _build(torch.tensor([1.0, 2.0])).check_targets(targets)
    assert err.value.path == "task.name" and message in str(err.value)


def test_builder_refuses_what_cannot_be_standardised() -> None:
    with pytest.raises(ConfigError, match=r"output\(s\) 1 constant in the training split"):
        _build(torch.tensor([[1.0, 3.0], [2.0, 3.0]]))
    with pytest.raises(ConfigError, match="at least 2 training samples"):
        _build(torch.tensor([1.0]))
    with pytest.raises(ConfigError, match="integer targets"):
        _build(torch.tensor([1, 2]))
    with pytest.raises(ConfigError, match=r"choose 0\.\.0") as err:
        _build(torch.tensor([1.0, 2.0]), bin_output=1)
    assert err.value.path == "task.params.bin_output"
    with pytest.raises(ConfigError, match="greater than or equal to 2"):
        TASKS.validate("regression", {"bins": 1})


def test_large_offset_and_shifted_split_keep_their_digits() -> None:
    """Targets at 1e8 ± 1 whose test split sits 5 train-σ off the train mean."""
    gen = torch_generator(0, "offset")
    train = 1e8 + torch.randn(500, dtype=torch.float64, generator=gen)
    task = _build(train)
    y = 1e8 + 5 + torch.randn(300, dtype=torch.float64, generator=gen)
    out = torch.randn(300, generator=gen)
    acc = task.accumulator()
    for idx in torch.tensor_split(torch.arange(300), 4):
        acc.update(out[idx], y[idx], 0.0)
    got = acc.compute()
    y_hat = out.double().numpy() * float(task.std) + float(task.mean)
    assert got["r2"] == pytest.approx(r2_score(y.numpy(), y_hat), rel=1e-9)
    assert got["rmse"] == pytest.approx(root_mean_squared_error(y.numpy(), y_hat), rel=1e-9)


def _float64_reference(
    task: RegressionTask, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """Running sums batch by batch in float64 torch, and the summed float32 ``loss_sum``."""
    t = task.num_outputs
    sums = torch.zeros(4, t, dtype=torch.float64)
    low = torch.full((t,), math.inf, dtype=torch.float64)
    high = torch.full((t,), -math.inf, dtype=torch.float64)
    loss = 0.0
    for out, y in batches:
        b = y.shape[0]
        loss += float(task.loss_sum(out, y))
        d = (y.reshape(b, -1).to(torch.float64) - task.mean) * (1.0 / task.std)
        e = d - out.reshape(b, -1).to(torch.float64)
        sums += torch.stack([d, d * d, e * e, e.abs()]).sum(dim=1)
        lo, hi = torch.aminmax(d, dim=0)
        low, high = torch.minimum(low, lo), torch.maximum(high, hi)
    return sums, low, high, loss


@pytest.mark.parametrize("flush", [None, 5000])
@pytest.mark.parametrize("seed", range(4))
def test_accumulator_sums_and_owned_loss_match_a_per_batch_reference(
    seed: int, flush: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The split-wide float64 pass gives the per-batch float64 sums to rounding and the
    range exactly; it owns the loss (a loss given to ``update`` is ignored), which is the
    summed float32 ``loss_sum`` to float32 rounding (ragged batches; with ``flush``,
    pending batches reduced every 5,000 entries)."""
    if flush is not None:
        monkeypatch.setattr(common, "FLUSH_ENTRIES", flush)
    gen = torch_generator(seed, "test_regression_blocks")
    t = 1 + seed % 3
    task = _build(300.0 + 25.0 * torch.randn(500, t, generator=gen))
    sizes = [4096, 3000, 4096, 17] if seed % 2 else [64, 64, 1, 63, 200]
    batches = [
        (torch.randn(b, t, generator=gen), 300.0 + 25.0 * torch.randn(b, t, generator=gen))
        for b in sizes
    ]
    acc = task.accumulator()
    assert acc.owns_loss
    for out, y in batches:
        acc.update(out, y, 1e9)
    got = acc._sums_now()
    want = _float64_reference(task, batches)
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-11, atol=1e-9)
    for a, b in zip(got[1:3], want[1:3], strict=True):
        assert np.array_equal(a, b.numpy())
    assert got[3] == pytest.approx(want[3], rel=1e-6)
    assert acc.compute()["loss"] == got[3] / sum(sizes)


@pytest.mark.parametrize("seed", range(4))
def test_metrics_do_not_depend_on_the_evaluation_batch_size(seed: int) -> None:
    """A split's batches are reduced together: the same metrics, to the bit, however the
    split is cut into batches (under the flush size)."""
    gen = torch_generator(seed, "test_regression_batching")
    t = 1 + seed % 3
    task = _build(40.0 + 5.0 * torch.randn(300, t, generator=gen))
    out, y = torch.randn(900, t, generator=gen), 41.0 + 5.0 * torch.randn(900, t, generator=gen)
    got = []
    for size in (900, 256, 5):
        acc = task.accumulator()
        for o, target in zip(out.split(size), y.split(size), strict=True):
            acc.update(o, target)
        got.append(acc.compute())
    assert got[0].values == got[1].values == got[2].values
    assert got[0].per_class == got[1].per_class == got[2].per_class


@pytest.mark.parametrize("seed", range(6))
def test_scalar_and_vector_final_arithmetic_agree_to_the_bit(seed: int) -> None:
    """A split's last step runs on Python floats for up to ``SCALAR_OUTPUTS`` outputs and
    on numpy vectors above: the same operations, so the same bits (constant outputs,
    perfect predictions, one sample, overflowing and NaN sums included)."""
    rng = np.random.default_rng(seed)
    t = 12
    task = _build(torch.from_numpy(rng.normal(size=(50, t)) * rng.uniform(0.01, 100, t)))
    for n in (1, 2, int(rng.integers(3, 10_000))):
        sums = np.abs(rng.normal(size=(4, t))) * 10.0 ** rng.integers(-3, 6, size=(4, t))
        sums[0] *= rng.choice([-1.0, 1.0], t)
        sums[:, 1] = [0.5, 0.25, 0.0, 0.3]  # perfect predictions
        sums[2, 2] = 0.0
        sums[:, 3] = [1e308, 1e308, 1e308, 1.0]  # overflow to inf
        sums[1, 4] = np.nan
        constant = rng.random(t) < 0.3
        scalar = mse_mae_r2_scalar(sums.tolist(), constant.tolist(), task._var_sigma, n)
        vector = mse_mae_r2(sums, constant, task._var_np, task._sigma_np, n)
        assert np.asarray(scalar).view(np.int64).tolist() == vector.view(np.int64).tolist()


def test_many_outputs_match_sklearn(monkeypatch: pytest.MonkeyPatch) -> None:
    """12 outputs take the vector path; forcing the scalar one changes no bit."""
    rng = np.random.default_rng(7)
    train, y = rng.normal(size=(100, 12)) * 5 + 40, rng.normal(size=(300, 12)) * 5 + 41
    task = _build(torch.from_numpy(train))
    out = torch.from_numpy(rng.normal(size=(300, 12))).float()
    got = []
    for scalar_outputs in (regression.SCALAR_OUTPUTS, 12):
        monkeypatch.setattr(regression, "SCALAR_OUTPUTS", scalar_outputs)
        acc = task.accumulator()
        for idx in torch.tensor_split(torch.arange(300), 3):
            acc.update(out[idx], torch.from_numpy(y)[idx])
        got.append(acc.compute())
    assert got[0].values == got[1].values and got[0].per_class == got[1].per_class
    y_hat = out.double().numpy() * task.std.numpy() + task.mean.numpy()
    assert got[0]["rmse"] == pytest.approx(root_mean_squared_error(y, y_hat))
    assert got[0]["r2"] == pytest.approx(r2_score(y, y_hat), rel=1e-9)
