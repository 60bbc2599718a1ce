"""Decoded or generated arrays → a cached :class:`~geofl.data.base.ArrayDataset`.

The generators (:mod:`geofl.data.synthetic.multilabel`, ``synthetic_sen12ms``,
``synthetic_bigearthnet``) and the per-patch loaders (:mod:`geofl.data.readers.sen12ms`,
:mod:`geofl.data.readers.bigearthnet`) all produce one dict of arrays (uint16 ``images``,
``labels`` and per-sample metadata) that is built once, stored under a key derived from
what it depends on, and read back in ``memory`` or ``mmap`` mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl.data.base import ArrayDataset, CacheMode, Inputs
from geofl.data.reflectance import SCALE, reflectance
from geofl.data.storage.cache import cache_key, cached_arrays
from geofl.data.storage.lazy import StoredRows
from geofl.data.storage.store import cached_store
from geofl.data.targets import TargetKind

__all__ = ["cached_dataset"]


def cached_dataset(
    name: str,
    version: str,
    spec: Mapping[str, Any],
    build: Callable[[], dict[str, np.ndarray]],
    *,
    classes: tuple[str, ...],
    bands: tuple[str, ...],
    metadata_keys: tuple[str, ...],
    target_kind: TargetKind,
    cache_dir: Path,
    cache_mode: CacheMode,
) -> ArrayDataset:
    """Build (once) and load the arrays of a dataset of uint16 reflectance x 10000.

    Args:
        name: Registry key (dataset name).
        version: Cache-key prefix; bump it when the arrays for one ``spec`` change.
        spec: What the arrays depend on (parameters, source fingerprint): the cache key.
        build: Produces ``images`` (uint16 ``[N, C, S, S]``), ``labels`` and metadata.
        classes: Class names.
        bands: Band names of the image channels.
        metadata_keys: Per-sample arrays exposed as metadata.
        target_kind: ``class`` (``labels`` int64 ``[N]``) or ``multi_hot`` (``[N, L]``).
        cache_dir: Directory of the decode-once cache.
        cache_mode: ``memory`` (arrays in RAM) or ``mmap`` (an on-disk store read per batch).

    Returns:
        Dataset with ``inputs`` ``[N, C, S, S]`` float32 reflectance (stored / 10000).
    """
    key = cache_key(version, dict(spec))
    images: Inputs
    if cache_mode == "mmap":
        meta = {"bands": bands, "classes": classes, "source": dict(spec)}
        arrays, _ = cached_store(cache_dir, key, lambda w: w.put_all(build()), meta)
        images = StoredRows(arrays["images"], scale=SCALE)
    else:
        arrays = cached_arrays(cache_dir, key, build)
        images = reflectance(arrays["images"])
    dtype = np.float32 if target_kind == "multi_hot" else np.int64
    return ArrayDataset(
        inputs=images,
        targets=torch.from_numpy(np.array(arrays["labels"], dtype=dtype)),
        classes=classes,
        bands=bands,
        metadata={k: np.array(arrays[k]) for k in metadata_keys},
        name=name,
        target_kind=target_kind,
    )
