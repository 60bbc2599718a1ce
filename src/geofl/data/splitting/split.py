"""Global train/validation/test split (000 §4.1.1).

Validation and test sets are shared by all clients; only the train split is partitioned
across clients. The split is stratified by class so that small datasets keep every class in
every split, and seeded by ``(seed, "split")``.

With ``data.split.group`` naming a metadata key (e.g. ``source`` for tiles cut from one
image, ``block`` for weekly rows of one field), whole groups go to one split
(:func:`grouped_split`): samples that share a group are never on both sides of the
train/test boundary, at the price of stratification.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from geofl.errors import ConfigError
from geofl.rng import numpy_generator

__all__ = ["Split", "SplitFractions", "grouped_split", "make_split", "stratified_split"]


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


def grouped_split(groups: np.ndarray, params: SplitFractions, seed: int) -> Split:
    """Split whole groups: every sample of a group lands in the same split.

    Groups are shuffled with generator ``(seed, "split", "group")`` and taken in that order
    into test until it holds at least ``round(N·test)`` samples, then into validation until
    it holds ``round(N·val)``; the rest train. Sizes therefore overshoot the fractions by
    at most one group each.

    Args:
        groups: ``[N]`` group ids (any hashable dtype).
        params: Split fractions.
        seed: Experiment seed.

    Raises:
        ConfigError: naming ``data.split.group`` when there are too few groups to leave a
            non-empty train and test split.
    """
    groups = np.asarray(groups)
    uniq, inverse = np.unique(groups, return_inverse=True)
    order = numpy_generator(seed, "split", "group").permutation(uniq.size)
    sizes = np.bincount(inverse, minlength=uniq.size)[order]
    reach = np.cumsum(sizes)
    n = groups.size
    n_test = int(np.searchsorted(reach, max(1, round(n * params.test)))) + 1
    want_val = round(n * params.val)
    n_val = 0
    if want_val > 0:
        n_val = int(np.searchsorted(reach - reach[n_test - 1], want_val)) + 1 - n_test
    if n_test + n_val >= uniq.size:
        raise ConfigError(
            "data.split.group",
            f"{uniq.size} groups cannot fill test, validation and train; use more groups "
            "or smaller fractions",
        )
    split_of = np.zeros(uniq.size, dtype=np.int8)  # by shuffled position: 0 train 1 val 2 test
    split_of[:n_test] = 2
    split_of[n_test : n_test + n_val] = 1
    per_group = np.empty(uniq.size, dtype=np.int8)
    per_group[order] = split_of
    where = per_group[inverse]
    return Split(*(np.flatnonzero(where == k).astype(np.int64) for k in (0, 1, 2)))


def make_split(
    labels: np.ndarray,
    params: SplitFractions,
    seed: int,
    metadata: Mapping[str, np.ndarray] | None = None,
) -> Split:
    """The run's split: :func:`grouped_split` over ``metadata[params.group]`` when the
    config names a group key, else :func:`stratified_split` over ``labels``.

    Raises:
        ConfigError: naming ``data.split.group`` when the dataset has no such metadata.
    """
    key = getattr(params, "group", None)
    if key is None:
        return stratified_split(labels, params, seed)
    meta = metadata or {}
    if key not in meta:
        have = ", ".join(sorted(meta)) or "none"
        raise ConfigError(
            "data.split.group", f"the dataset has no metadata {key!r} (it has: {have})"
        )
    return grouped_split(np.asarray(meta[key]), params, seed)
