"""Helpers of the task tests."""

from __future__ import annotations

import numpy as np

from geofl.tasks import SplitMetrics


def assert_same_metrics(a: SplitMetrics, b: SplitMetrics, rtol: float = 1e-6) -> None:
    """Equal up to float summation order (NaN equals NaN)."""
    assert a.values.keys() == b.values.keys()
    np.testing.assert_allclose(list(a.values.values()), list(b.values.values()), rtol=rtol)
    assert a.per_class.keys() == b.per_class.keys()
    for key in a.per_class:
        np.testing.assert_allclose(a.per_class[key], b.per_class[key], rtol=rtol, err_msg=key)
    assert (a.n, a.notes) == (b.n, b.notes)
