"""Proxy regions for patches without coordinates: seeded k-means on image statistics.

Spatially modulated aggregation (001 Eq. 10–11) and the ``region`` / ``group`` partitioners
(:mod:`geofl.data.splitting.partition`) need each patch's place. A file of patches that carries no
coordinates, tile or city names (e.g. the Sentinel-2 informal-settlement patches, whose
``ids`` are just 0..N−1) gets a **proxy** instead, computed from the images only:

1. Per patch ``i`` a feature vector ``f_i``: the mean reflectance of every band
   (``[C]``) and, when red and NIR bands are present, the patch-mean NDVI
   (:func:`patch_ndvi`).
2. Each feature is standardised over all patches (z-score; constant features → 0).
3. Seeded k-means (k-means++ initialisation, Lloyd iterations until no assignment
   changes) groups the patches into ``k`` clusters.
4. Clusters are renumbered by increasing centroid NDVI (by the first feature without
   NDVI), ties by the remaining features, so ``region 0`` is the least vegetated.

The rule never reads labels, so the partition it induces is not chosen by the target;
it is a proxy for geography (patches of one scene look alike), **not** geography: two
distant places with similar surfaces share a region. Because informal settlements
differ in reflectance from their surroundings, regions are still label-skewed, as real
regions are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geofl.rng import numpy_generator

__all__ = ["kmeans", "kmeans_regions", "patch_features", "patch_ndvi"]

#: Red and NIR band names (Sentinel-2 B04; B08, else the narrow NIR band B8A).
RED_BANDS, NIR_BANDS = ("B04",), ("B08", "B8A")
_MAX_ITER = 300


def patch_ndvi(red: np.ndarray, nir: np.ndarray) -> np.ndarray:
    """Patch-mean NDVI = mean over pixels of (NIR − red) / (NIR + red), 0 where NIR + red ≤ 0.

    Args:
        red: ``[N, H, W]`` red reflectance (any common scale; NDVI is scale-free).
        nir: ``[N, H, W]`` NIR reflectance.

    Returns:
        ``[N]`` float64 mean NDVI per patch (001 §4.2, [31]).
    """
    r, n = red.astype(np.float64), nir.astype(np.float64)
    den = n + r
    v = np.divide(n - r, den, out=np.zeros_like(den), where=den > 0)
    return np.asarray(v.reshape(v.shape[0], -1).mean(axis=1))


def _red_nir(bands: Sequence[str]) -> tuple[int, int] | None:
    red = next((list(bands).index(b) for b in RED_BANDS if b in bands), None)
    nir = next((list(bands).index(b) for b in NIR_BANDS if b in bands), None)
    return None if red is None or nir is None else (red, nir)


def patch_features(images: np.ndarray, bands: Sequence[str]) -> np.ndarray:
    """Per-patch features of the region rule: band means, then mean NDVI if available.

    Args:
        images: ``[N, C, H, W]`` images (digital numbers or reflectance).
        bands: ``C`` band names; red B04 and NIR B08/B8A give the NDVI feature.

    Returns:
        ``[N, C]`` or ``[N, C + 1]`` float64 (the last column is mean NDVI).
    """
    means = images.mean(axis=(2, 3), dtype=np.float64)
    rn = _red_nir(bands)
    if rn is None:
        return np.asarray(means)
    ndvi = patch_ndvi(images[:, rn[0]], images[:, rn[1]])
    return np.concatenate([means, ndvi[:, None]], axis=1)


def _standardise(x: np.ndarray) -> np.ndarray:
    std = x.std(axis=0)
    return np.asarray((x - x.mean(axis=0)) / np.where(std > 0, std, 1.0))


def _sq_dist(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``[N, K]`` squared Euclidean distances of ``[N, D]`` points to ``[K, D]`` centres."""
    d2 = (x**2).sum(1)[:, None] - 2.0 * x @ c.T + (c**2).sum(1)[None]
    return np.asarray(np.maximum(d2, 0.0))


def _kmeanspp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each next centre drawn with probability ∝ D², ``[k, D]``."""
    centres = [x[int(rng.integers(x.shape[0]))]]
    d2 = _sq_dist(x, centres[0][None])[:, 0]
    for _ in range(1, k):
        total = d2.sum()
        i = int(rng.choice(x.shape[0], p=d2 / total)) if total > 0 else int(rng.integers(len(x)))
        centres.append(x[i])
        d2 = np.minimum(d2, _sq_dist(x, x[i][None])[:, 0])
    return np.stack(centres)


def kmeans(x: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded k-means (k-means++ start, Lloyd until assignments stop changing).

    Args:
        x: ``[N, D]`` float64 points, N ≥ k.
        k: Number of clusters.
        seed: Seed of the k-means++ draws (:func:`geofl.rng.numpy_generator`).

    Returns:
        ``(assign [N] int64, centres [k, D] float64)``; an emptied cluster keeps its
        previous centre.
    """
    rng = numpy_generator(seed, "regions", "kmeans++")
    centres = _kmeanspp(x, k, rng)
    assign = np.full(x.shape[0], -1, np.int64)
    for _ in range(_MAX_ITER):
        new = _sq_dist(x, centres).argmin(axis=1)
        if np.array_equal(new, assign):
            break
        assign = new
        counts = np.bincount(assign, minlength=k)
        sums = np.zeros_like(centres)
        np.add.at(sums, assign, x)
        centres = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centres)
    return assign, centres


def kmeans_regions(
    images: np.ndarray, bands: Sequence[str], num_regions: int, seed: int
) -> np.ndarray:
    """``[N]`` int64 proxy region of every patch (the rule of the module docstring).

    Args:
        images: ``[N, C, H, W]`` images (labels are never an input).
        bands: ``C`` band names.
        num_regions: Clusters k (clamped to N).
        seed: Seed of the k-means++ start.

    Returns:
        ``[N]`` int64 region ids ``0..k−1``, numbered by increasing centroid NDVI.
    """
    feats = _standardise(patch_features(images, bands))
    k = min(num_regions, feats.shape[0])
    assign, centres = kmeans(feats, k, seed)
    # Renumber by the last feature (NDVI when present), then the others: lexsort's last key
    # is the primary one.
    order = np.lexsort(centres.T)
    rank = np.empty(k, np.int64)
    rank[order] = np.arange(k)
    return np.asarray(rank[assign])
