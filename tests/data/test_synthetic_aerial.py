"""The synthetic NWPU-VHR-10-like scenes: seeded, cached, boxes on their objects, plausible
co-occurrence, and Dirichlet partitions over each image's dominant class."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geofl.data.splitting.partition import PARTITIONERS, make_partition
from geofl.data.synthetic.aerial import (
    AERIAL_CLASSES,
    SCENES,
    AerialParams,
    build_synthetic_aerial,
    generate_aerial,
    render_scene,
)
from geofl.data.targets import box_class_counts, label_codes

P = AerialParams(num_samples=60, size=96, seed=3)


def test_seeded_and_cached(tmp_path: Path) -> None:
    a = generate_aerial(P)
    b = generate_aerial(P)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = generate_aerial(P.model_copy(update={"seed": 4}))
    assert not np.array_equal(a["images"], c["images"])
    ds = build_synthetic_aerial(P, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("synthetic-aerial-v1-*.npz"))) == 1
    again = build_synthetic_aerial(P, cache_dir=tmp_path)
    assert ds.classes == AERIAL_CLASSES and ds.target_kind == "boxes"
    assert np.array_equal(ds.targets.numpy(), again.targets.numpy())
    assert ds.inputs.shape == (60, 3, 96, 96) and float(ds.inputs.max()) <= 1.0


def test_boxes_are_tight_inside_and_non_overlapping() -> None:
    for i in range(20):
        _, boxes, labels, _ = render_scene(P, i)
        assert len(boxes) == len(labels) and len(boxes) <= P.max_objects
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= P.size).all()
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
        for j in range(len(boxes)):
            for k in range(j):
                iw = min(boxes[j, 2], boxes[k, 2]) - max(boxes[j, 0], boxes[k, 0])
                ih = min(boxes[j, 3], boxes[k, 3]) - max(boxes[j, 1], boxes[k, 1])
                small = min(
                    np.prod(boxes[j, 2:] - boxes[j, :2]), np.prod(boxes[k, 2:] - boxes[k, :2])
                )
                assert max(iw, 0) * max(ih, 0) <= 0.1 * small + 1e-6


def test_cooccurrence_follows_scene_types() -> None:
    d = generate_aerial(AerialParams(num_samples=150, size=96, seed=0))
    counts = box_class_counts(d["boxes"], 10)
    scene = d["scene"]
    port, airport = SCENES.index("port"), SCENES.index("airport")
    harbor, ship, airplane = (AERIAL_CLASSES.index(c) for c in ("harbor", "ship", "airplane"))
    assert counts[scene == port, harbor].min() >= 1  # every port has a pier
    assert counts[scene != port, harbor].sum() == 0
    assert counts[scene == airport, airplane].min() >= 1
    ships_at_port = counts[scene == port, ship].sum()
    assert ships_at_port > 2 * counts[scene != port, ship].sum()  # ships gather at harbors
    assert (counts.sum(axis=0) > 0).all()  # every class occurs


def test_dirichlet_over_dominant_class_skews_clients() -> None:
    d = generate_aerial(AerialParams(num_samples=150, size=96, seed=0))
    dominant = label_codes(d["boxes"], "boxes", num_classes=10)

    def skew(name: str, params: dict[str, object]) -> float:
        """Mean total-variation distance of the clients' dominant-class mix to the pool's."""
        fn = PARTITIONERS.build(name, params)
        part = make_partition(fn, d["boxes"], {}, 4, 10, np.random.default_rng(0), kind="boxes")
        assert sorted(np.concatenate(part.indices).tolist()) == list(range(150))
        np.testing.assert_array_equal(
            part.histograms.sum(axis=0), box_class_counts(d["boxes"], 10).sum(axis=0)
        )
        pool = np.bincount(dominant, minlength=11) / dominant.size
        tv = [
            0.5 * np.abs(np.bincount(dominant[p], minlength=11) / p.size - pool).sum()
            for p in part.indices
        ]
        return float(np.mean(tv))

    assert skew("dirichlet", {"alpha": 0.1, "by": "label", "min_samples": 5}) > 2 * skew("iid", {})
