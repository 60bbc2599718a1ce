"""Update validation: every part of an untrusted update is type-checked, nothing raises."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from geofl.server.validate import MAX_NUM_SAMPLES, validate_header, validate_update
from geofl.update import ClientUpdate, UpdateMeta

D = 4
F32_MAX = float(torch.finfo(torch.float32).max)


def _update(delta: Any = None, tensors: Any = None, **meta: Any) -> ClientUpdate:
    fields: dict[str, Any] = {"client_id": 0, "num_samples": 5, "round": 1, **meta}
    return ClientUpdate(
        torch.zeros(D) if delta is None else delta, UpdateMeta(**fields), tensors=tensors or {}
    )


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_an_honest_update_with_numpy_metadata_is_accepted() -> None:
    update = _update(
        num_samples=np.int64(7),
        label_histogram=np.array([1, 0, 6]),
        train_loss=np.float32(0.5),
        train_metrics={"accuracy": math.nan},
        steps=np.int32(3),
        bytes_sent=16,
        scalars={"a_norm": np.float64(2.0), "other": -(10**9)},
    )
    assert validate_update(update, D, scalar_names=("a_norm",), num_classes=3) is None
    assert validate_header(update.meta) is None


@pytest.mark.parametrize(
    ("n", "reason"),
    [
        (0, "num_samples=0 must be positive"),
        (math.nan, "num_samples=nan is not a finite number"),
        (10**400, "is not a finite number"),
        (True, "num_samples=True is not a finite number"),
        ("5", "num_samples='5' is not a finite number"),
        (2.5, "num_samples=2.5 is not a whole number"),
        (MAX_NUM_SAMPLES * 2, f"exceeds {MAX_NUM_SAMPLES}"),
    ],
)
def test_num_samples_must_be_a_whole_positive_count(n: Any, reason: str) -> None:
    got = validate_update(_update(num_samples=n), D)
    assert got is not None and reason in got and "\n" not in got


def test_num_samples_float_of_a_whole_count_and_the_bound_are_accepted() -> None:
    assert validate_update(_update(num_samples=3.0), D) is None
    assert validate_update(_update(num_samples=MAX_NUM_SAMPLES), D) is None


def test_delta_float64_must_fit_float32() -> None:
    fits = torch.tensor([F32_MAX, -F32_MAX, 0.0, 1.0], dtype=torch.float64)
    assert validate_update(_update(delta=fits), D) is None
    over = fits.clone()
    over[2] = -1e39
    reason = validate_update(_update(delta=over), D)
    assert reason is not None and "delta" in reason and "float32" in reason


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.to_sparse(),
        lambda t: t.reshape(1, D).to_sparse_csr(),
        lambda t: torch.empty(D, device="meta"),
    ],
    ids=["sparse_coo", "sparse_csr", "meta-device"],
)
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
def test_non_dense_tensors_are_rejected(make: Any) -> None:
    odd = make(torch.ones(D))
    reason = validate_update(_update(delta=odd), D)
    assert reason is not None and reason.startswith("delta has")
    extra = _update(tensors={"control_delta": odd})
    reason = validate_update(extra, D, ("control_delta",))
    assert reason is not None and reason.startswith("control_delta has")


def test_upload_names_must_be_strings() -> None:
    update = _update(tensors={"control_delta": torch.zeros(D), 0: torch.zeros(D)})
    assert validate_update(update, D, ("control_delta",)) == (
        "uploaded tensors have non-string names 0"
    )


@pytest.mark.parametrize(
    ("scalars", "word"),
    [
        (None, "metadata scalars are NoneType"),
        ({1: 1.0}, "metadata scalar name 1 is not a string"),
        ({"a_norm": 10**400}, "metadata scalar a_norm="),
        ({"a_norm": True}, "metadata scalar a_norm=True is not a finite number"),
        ({"x": _BadRepr()}, "metadata scalar x=<_BadRepr> is not a finite number"),
        ({}, "metadata scalar a_norm=None must be present and positive"),
    ],
)
def test_malformed_scalars_get_a_reason(scalars: Any, word: str) -> None:
    reason = validate_update(_update(scalars=scalars), D, scalar_names=("a_norm",))
    assert reason is not None and word in reason


def test_huge_values_are_shown_briefly_on_one_line() -> None:
    reason = validate_update(_update(num_samples=10**5000), D)  # repr() itself refuses it
    assert reason is not None and reason.startswith("num_samples=") and len(reason) < 100
    reason = validate_update(_update(scalars={"a\nb": "x" * 1000}), D)
    assert reason is not None and "\n" not in reason and len(reason) < 100


@pytest.mark.parametrize(
    ("hist", "reason"),
    [
        ([[1, 2], [3]], "label_histogram is a list that is not an array of counts"),
        (np.array([1 + 0j, 2]), "label_histogram has shape (2,) and dtype complex128"),
        (np.array([True, False]), "label_histogram has shape (2,) and dtype bool"),
        (np.ones(4), "label_histogram has 4 classes, expected 3"),
        (np.array([2**62, 2**62, 2**62]), None),  # the int64 sum wraps; float64 does not
        (np.full(3, 1e308), "label_histogram counts sum beyond the float64 range"),
        (torch.ones(3, requires_grad=True), "label_histogram is a Tensor"),
    ],
)
def test_label_histogram_checks(hist: Any, reason: str | None) -> None:
    got = validate_update(_update(label_histogram=hist), D, num_classes=3)
    assert got == reason or (reason is not None and got is not None and got.startswith(reason))


def test_without_num_classes_any_length_is_accepted() -> None:
    assert validate_update(_update(label_histogram=np.ones(7)), D) is None


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("client_id", -1),
        ("client_id", 2**63),
        ("client_id", 1.0),
        ("round", None),
        ("steps", True),
        ("bytes_sent", "16"),
    ],
)
def test_header_fields_must_be_int64_counts(field_name: str, value: Any) -> None:
    update = _update(**{field_name: value})
    reason = validate_update(update, D)
    assert reason is not None and reason.startswith(f"metadata {field_name}=")
    assert validate_header(update.meta) == reason


@pytest.mark.parametrize("value", ["low", None, 10**400, [0.1]])
def test_loss_and_accuracy_must_be_numbers(value: Any) -> None:
    reason = validate_update(_update(train_loss=value), D)
    assert reason is not None and reason.startswith("metadata train_loss=")
    reason = validate_update(_update(train_metrics={"accuracy": value}), D)
    assert reason is not None and reason.startswith("metadata train_metrics['accuracy']=")


@pytest.mark.parametrize("metrics", [[0.5], None, {1: 0.5}])
def test_train_metrics_must_map_names_to_numbers(metrics: Any) -> None:
    reason = validate_update(_update(train_metrics=metrics), D)
    assert reason is not None and reason.startswith("metadata train_metrics")


def test_missing_metadata() -> None:
    update = ClientUpdate(torch.zeros(D), None)  # type: ignore[arg-type]
    assert validate_update(update, D) == "meta is NoneType, expected UpdateMeta"
    assert validate_header(None) == "meta is NoneType, expected UpdateMeta"


def test_l2_norms_are_exact_where_a_float32_reduction_overflows_or_underflows() -> None:
    from geofl.server.validate import l2_norms

    x = torch.zeros(4, D)
    x[0], x[1], x[2] = 1e30, 1e-25, torch.tensor([3.0, 4.0, 0.0, 0.0])
    assert torch.linalg.vector_norm(x, dim=1)[:2].tolist() == [math.inf, 0.0]  # the defect
    norms = l2_norms(x)
    assert norms.dtype == torch.float64
    assert norms.tolist() == pytest.approx([2e30, 2e-25, 5.0, 0.0], rel=1e-7)
    assert l2_norms(torch.full((D,), F32_MAX)).tolist() == pytest.approx([2 * F32_MAX])
    assert math.isnan(float(l2_norms(torch.tensor([1e30, math.nan]))[0]))


def test_an_update_scaled_by_1e30_is_valid_and_its_norm_finite() -> None:
    from geofl.server.validate import l2_norms

    delta = torch.full((D,), 0.01) * 1e30
    assert validate_update(_update(delta), D) is None  # the robust aggregators' business
    assert math.isfinite(float(l2_norms(delta)[0]))
