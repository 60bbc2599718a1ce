"""Global train/validation/test split (000 §4.1.1).

Validation and test sets are shared by all clients; only the train split is partitioned
across clients. The split is stratified by class so that small datasets keep every class in
every split, and seeded by ``(seed, "split")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from geofl.errors import ConfigError
from geofl.rng import numpy_generator

__all__ = ["Split", "SplitFractions", "stratified_split"]


class SplitFractions(Protocol):
    """Fractions of the whole dataset held out (e.g. the config's ``data.split``)."""

    @property
    def val(self) -> float: ...

    @property
    def test(self) -> float: ...


@dataclass(frozen=True)
class Split:
    """Index arrays (int64, sorted) into the full dataset."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


def stratified_split(labels: np.ndarray, params: SplitFractions, seed: int) -> Split:
    """Split sample indices per class into train/val/test with the given fractions.

    Per class c with n_c samples, ``round(n_c·test)`` go to test and ``round(n_c·val)`` to
    validation (each at least 1 when the fraction is positive and n_c ≥ 3), the rest to
    train.

    Args:
        labels: ``[N]`` int class labels.
        params: Split fractions.
        seed: Experiment seed; the permutation uses generator ``(seed, "split")``.

    Raises:
        ConfigError: naming ``data.split`` when the dataset is too small to split.
    """
    labels = np.asarray(labels)
    rng = numpy_generator(seed, "split")
    parts: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(idx.size)]
        n = idx.size
        n_test = round(n * params.test)
        n_val = round(n * params.val)
        if n >= 3:
            n_test = max(n_test, 1)
            n_val = max(n_val, 1) if params.val > 0 else 0
        if n_test + n_val >= n:
            n_test, n_val = min(n_test, max(n - 1, 0)), max(0, min(n_val, n - 1 - n_test))
        parts["test"].append(idx[:n_test])
        parts["val"].append(idx[n_test : n_test + n_val])
        parts["train"].append(idx[n_test + n_val :])
    out = {k: np.sort(np.concatenate(v)).astype(np.int64) for k, v in parts.items()}
    if out["train"].size == 0 or out["test"].size == 0:
        raise ConfigError("data.split", f"dataset of {labels.size} samples is too small to split")
    return Split(out["train"], out["val"], out["test"])
