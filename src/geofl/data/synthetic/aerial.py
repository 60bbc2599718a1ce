"""Seeded synthetic aerial scenes with NWPU VHR-10's ten object classes (paper 004 §3).

NWPU VHR-10 (Cheng et al. 2014) holds 650 positive very-high-resolution (0.5–2 m) images
of ten classes. These scenes imitate what a detector has to learn from it — class shapes,
sizes relative to the image, and which classes occur together — not its pixels:

==================  ===========================================  ======================
scene               objects (co-occurrence)                      background
==================  ===========================================  ======================
``port``            harbors (piers) on the coast, ships on the   sea / land split by a
                    water near the piers, vehicles on land       straight coastline
``airport``         airplanes (fuselage, wings, tail) parked     tarmac
                    apart, vehicles
``sports``          ground track field, baseball diamonds,       grass and roads
                    tennis courts (in rows), basketball courts
``industrial``      storage tanks in clusters, vehicles          bare soil / concrete
``river``           bridges across a river, vehicles on land,    land and a river band
                    the odd ship on the river
==================  ===========================================  ======================

Sizes (pixels at ``size = 256``; by default scaled with ``size``): airplane 24–40 span,
ship 14–30 × 4–7, storage tank 10–22 diameter, baseball diamond 30–46, tennis court 9×18,
basketball court 13×22, ground track field 70–100 × 40–56, harbor pier 24–48 × 6–10, bridge
river width + 8 × 6–10, vehicle 5×9. ``object_scale`` sets another multiplier (1: these
sizes on a smaller canvas, i.e. a crop of a 256 px scene rather than the whole scene
resampled). Objects are painted as masks (rotated where the real ones are: ships,
airplanes, vehicles) and each box is its mask's tight extent, so boxes and pixels agree
exactly. Placement rejects overlaps above 10 % of the smaller box.

Every image draws from its own generator ``(seed, "synthetic_aerial", image)``; the arrays
are cached under a key of the parameters (:func:`~geofl.data.storage.cache.cached_arrays`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import DATASETS, ArrayDataset
from geofl.data.storage.cache import cache_key, cached_arrays
from geofl.rng import numpy_generator

__all__ = [
    "AERIAL_CLASSES",
    "SCENES",
    "AerialParams",
    "build_synthetic_aerial",
    "generate_aerial",
    "render_scene",
]

#: NWPU VHR-10's classes, in its label order (1–10 there, 0–9 here).
AERIAL_CLASSES: tuple[str, ...] = (
    "airplane",
    "ship",
    "storage_tank",
    "baseball_diamond",
    "tennis_court",
    "basketball_court",
    "ground_track_field",
    "harbor",
    "bridge",
    "vehicle",
)
SCENES: tuple[str, ...] = ("port", "airport", "sports", "industrial", "river")
AIRPLANE, SHIP, TANK, BASEBALL, TENNIS, BASKETBALL, TRACK, HARBOR, BRIDGE, VEHICLE = range(10)

Rgb = tuple[float, float, float]
_WATER: Rgb = (0.10, 0.20, 0.30)
_LAND: Rgb = (0.42, 0.40, 0.33)
_GRASS: Rgb = (0.28, 0.42, 0.22)
_TARMAC: Rgb = (0.45, 0.45, 0.45)
_SOIL: Rgb = (0.55, 0.48, 0.38)


class AerialParams(BaseModel):
    """Parameters of ``synthetic_aerial``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_samples: int = Field(600, gt=0, le=100_000, description="Number of scenes.")
    size: int = Field(128, ge=64, le=1024, description="Scene side length in pixels.")
    object_scale: float | None = Field(
        None,
        gt=0.1,
        le=8.0,
        description="object size multiplier; null: size / 256 (a 256 px scene, resampled)",
    )
    seed: int = Field(0, description="Seed of all random draws.")
    max_objects: int = Field(24, ge=1, le=200, description="Most objects per scene.")
    noise_std: float = Field(0.02, ge=0, le=0.5, description="Pixel noise std (0..1 scale).")
    scene_weights: tuple[float, float, float, float, float] = Field(
        (1.0, 1.0, 1.0, 1.0, 1.0), description="Relative frequency of the scene types"
    )


class _Canvas:
    """An RGB image being painted and the boxes of the objects on it."""

    def __init__(
        self, size: int, rng: np.random.Generator, max_objects: int, scale: float | None
    ) -> None:
        self.s = size
        self.k = size / 256.0 if scale is None else scale
        self.rng = rng
        self.max_objects = max_objects
        self.img = np.zeros((3, size, size), np.float32)
        self.yy, self.xx = np.mgrid[0:size, 0:size].astype(np.float32)
        self.boxes: list[tuple[float, float, float, float]] = []
        self.labels: list[int] = []

    def fill(self, mask: np.ndarray, rgb: Rgb, jitter: float = 0.03) -> None:
        col = np.asarray(rgb, np.float32) + self.rng.normal(0, jitter, 3).astype(np.float32)
        self.img[:, mask] = col[:, None]

    def background(self, rgb: Rgb) -> None:
        self.fill(np.ones((self.s, self.s), bool), rgb)
        g = self.rng.normal(0, 0.04, (3, 9, 9)).astype(np.float32)
        up = np.kron(g, np.ones((1, self.s // 8 + 1, self.s // 8 + 1), np.float32))
        self.img += up[:, : self.s, : self.s]

    def rect(self, cx: float, cy: float, length: float, width: float, angle: float) -> np.ndarray:
        u, v = self._uv(cx, cy, angle)
        mask: np.ndarray = (np.abs(u) <= length / 2) & (np.abs(v) <= width / 2)
        return mask

    def _uv(self, cx: float, cy: float, angle: float) -> tuple[np.ndarray, np.ndarray]:
        c, s = np.cos(angle), np.sin(angle)
        dx, dy = self.xx - cx, self.yy - cy
        return dx * c + dy * s, -dx * s + dy * c

    def free(self, box: tuple[float, float, float, float]) -> bool:
        """Whether ``box`` lies in the image and overlaps no placed box by > 10 %."""
        x1, y1, x2, y2 = box
        if x1 < 0 or y1 < 0 or x2 > self.s or y2 > self.s:
            return False
        for b in self.boxes:
            iw = min(x2, b[2]) - max(x1, b[0])
            ih = min(y2, b[3]) - max(y1, b[1])
            if iw > 0 and ih > 0:
                small = min((x2 - x1) * (y2 - y1), (b[2] - b[0]) * (b[3] - b[1]))
                if iw * ih > 0.1 * small:
                    return False
        return True

    def place(self, label: int, mask: np.ndarray, paint: list[tuple[np.ndarray, Rgb]]) -> bool:
        """Paint an object whose extent is ``mask`` if its box is free; record the box."""
        if len(self.boxes) >= self.max_objects or not mask.any():
            return False
        ys, xs = np.nonzero(mask)
        box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
        if not self.free(box):
            return False
        for m, rgb in paint:
            self.fill(m, rgb)
        self.boxes.append(box)
        self.labels.append(label)
        return True

    def uniform(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))


def _try(c: _Canvas, n: int, draw: object, *args: object) -> None:
    """Place up to ``n`` objects with ``draw(c, *args) -> bool``, 6 attempts each."""
    for _ in range(n):
        for _ in range(6):
            if draw(c, *args):  # type: ignore[operator]
                break


def _vehicle(c: _Canvas, region: np.ndarray | None = None) -> bool:
    cx, cy = c.uniform(4, c.s - 4), c.uniform(4, c.s - 4)
    if region is not None and not region[int(cy), int(cx)]:
        return False
    ang = float(c.rng.choice([0.0, np.pi / 2])) + c.uniform(-0.2, 0.2)
    m = c.rect(cx, cy, max(9 * c.k, 4.0), max(5 * c.k, 2.5), ang)
    colour = tuple(c.rng.choice([0.15, 0.8, 0.6], 3).tolist())
    return c.place(VEHICLE, m, [(m, colour)])


def _ship(c: _Canvas, water: np.ndarray, near: tuple[float, float] | None) -> bool:
    if near is None:
        cx, cy = c.uniform(0, c.s), c.uniform(0, c.s)
    else:
        cx, cy = near[0] + c.uniform(-30, 30) * c.k, near[1] + c.uniform(-30, 30) * c.k
    if not (0 <= cx < c.s and 0 <= cy < c.s) or not water[int(cy), int(cx)]:
        return False
    length, width, ang = c.uniform(14, 30) * c.k, c.uniform(4, 7) * c.k, c.uniform(0, np.pi)
    u, v = c._uv(cx, cy, ang)
    taper = np.clip((length / 2 - u) / max(width, 1.0), 0.0, 1.0)  # pointed bow
    m = (np.abs(u) <= length / 2) & (np.abs(v) <= width / 2 * taper) & water
    deck = m & (np.abs(v) <= width / 4)
    return c.place(SHIP, m, [(m, (0.85, 0.85, 0.82)), (deck, (0.55, 0.55, 0.6))])


def _scene_port(c: _Canvas) -> None:
    vertical = bool(c.rng.integers(2))
    coast = c.uniform(0.35, 0.6) * c.s
    coord = c.xx if vertical else c.yy
    water = coord > coast
    c.background(_LAND)
    c.fill(water, _WATER, 0.02)
    piers: list[tuple[float, float]] = []
    for _ in range(int(c.rng.integers(1, 4))):
        for _ in range(6):
            t, length, width = (
                c.uniform(0.1, 0.9) * c.s,
                c.uniform(24, 48) * c.k,
                c.uniform(6, 10) * c.k,
            )
            mid = coast + length / 2 - 2
            cx, cy = (mid, t) if vertical else (t, mid)
            m = c.rect(cx, cy, length, width, 0.0 if vertical else np.pi / 2)
            if c.place(HARBOR, m, [(m, (0.62, 0.6, 0.56))]):
                piers.append(
                    (cx + (length if vertical else 0) * 0.3, cy + (0 if vertical else length) * 0.3)
                )
                break
    for p in piers:
        _try(c, int(c.rng.integers(1, 4)), _ship, water, p)
    _try(c, int(c.rng.integers(0, 4)), _vehicle, ~water)


def _airplane(c: _Canvas) -> bool:
    span = c.uniform(24, 40) * c.k
    cx, cy, ang = c.uniform(0, c.s), c.uniform(0, c.s), c.uniform(0, 2 * np.pi)
    u, v = c._uv(cx, cy, ang)
    body = (np.abs(u) <= span / 2) & (np.abs(v) <= span / 14 + 0.6)
    wing = (np.abs(u + span * 0.05) <= span / 9 + 0.6) & (np.abs(v) <= span / 2)
    tail = (np.abs(u - span * 0.42) <= span / 16 + 0.6) & (np.abs(v) <= span / 5)
    m = body | wing | tail
    return c.place(AIRPLANE, m, [(m, (0.88, 0.88, 0.9))])


def _scene_airport(c: _Canvas) -> None:
    c.background(_TARMAC)
    strip = np.abs(c.yy - c.uniform(0.2, 0.8) * c.s) < 10 * c.k
    c.fill(strip, (0.3, 0.3, 0.3), 0.01)
    _try(c, int(c.rng.integers(2, 7)), _airplane)
    _try(c, int(c.rng.integers(0, 5)), _vehicle, None)


def _court(c: _Canvas, label: int, dims: tuple[float, float], colour: Rgb) -> bool:
    length, width = dims[0] * c.k, dims[1] * c.k
    cx, cy = c.uniform(0, c.s), c.uniform(0, c.s)
    ang = float(c.rng.choice([0.0, np.pi / 2]))
    m = c.rect(cx, cy, length, width, ang)
    inner = c.rect(cx, cy, length - 2.5, width - 2.5, ang)
    net = m & (np.abs(c._uv(cx, cy, ang)[0]) < 0.6)
    return c.place(label, m, [(m, (0.95, 0.95, 0.95)), (inner, colour), (net, (0.95, 0.95, 0.95))])


def _baseball(c: _Canvas) -> bool:
    r = c.uniform(30, 46) * c.k
    cx, cy, ang = c.uniform(0, c.s), c.uniform(0, c.s), c.uniform(0, 2 * np.pi)
    u, v = c._uv(cx, cy, ang)
    rad, theta = np.hypot(u, v), np.arctan2(v, u)
    fan = (rad <= r) & (np.abs(theta) <= np.pi / 4)
    infield = (np.abs(u - v) + np.abs(u + v) <= 0.8 * r) & (u >= 0)
    return c.place(BASEBALL, fan, [(fan, (0.3, 0.5, 0.25)), (fan & infield, (0.62, 0.45, 0.3))])


def _track(c: _Canvas) -> bool:
    length, width = c.uniform(70, 100) * c.k, c.uniform(40, 56) * c.k
    cx, cy = c.uniform(0, c.s), c.uniform(0, c.s)
    ang = float(c.rng.choice([0.0, np.pi / 2]))
    u, v = c._uv(cx, cy, ang)
    straight = length / 2 - width / 2
    d = np.hypot(np.clip(np.abs(u) - straight, 0, None), v)  # stadium distance
    m = d <= width / 2
    ring = m & (d >= width / 2 - 5 * c.k)
    return c.place(TRACK, m, [(m, (0.25, 0.55, 0.25)), (ring, (0.7, 0.3, 0.25))])


def _scene_sports(c: _Canvas) -> None:
    c.background(_GRASS)
    road = np.abs(c.xx - c.uniform(0.1, 0.9) * c.s) < 4 * c.k
    c.fill(road, (0.35, 0.35, 0.35), 0.01)
    if c.rng.random() < 0.7:
        _try(c, 1, _track)
    _try(c, int(c.rng.integers(0, 3)), _baseball)
    _try(c, int(c.rng.integers(0, 6)), _court, TENNIS, (18.0, 9.0), (0.2, 0.45, 0.55))
    _try(c, int(c.rng.integers(0, 3)), _court, BASKETBALL, (22.0, 13.0), (0.75, 0.5, 0.3))
    _try(c, int(c.rng.integers(0, 3)), _vehicle, road)


def _tank(c: _Canvas, centre: tuple[float, float]) -> bool:
    d = c.uniform(10, 22) * c.k
    cx, cy = centre[0] + c.uniform(-35, 35) * c.k, centre[1] + c.uniform(-35, 35) * c.k
    r = np.hypot(c.xx - cx, c.yy - cy)
    m = r <= d / 2
    top = r <= d / 2 - max(1.5, d / 8)
    return c.place(TANK, m, [(m, (0.55, 0.55, 0.55)), (top, (0.9, 0.9, 0.88))])


def _scene_industrial(c: _Canvas) -> None:
    c.background(_SOIL)
    for _ in range(int(c.rng.integers(1, 3))):
        centre = (c.uniform(0.2, 0.8) * c.s, c.uniform(0.2, 0.8) * c.s)
        _try(c, int(c.rng.integers(3, 9)), _tank, centre)
    _try(c, int(c.rng.integers(0, 5)), _vehicle, None)


def _scene_river(c: _Canvas) -> None:
    c.background(_LAND)
    centre, half = c.uniform(0.3, 0.7) * c.s, c.uniform(10, 18) * c.k
    water = np.abs(c.yy - centre) < half
    c.fill(water, _WATER, 0.02)
    for _ in range(int(c.rng.integers(1, 3))):
        for _ in range(6):
            width, cx = c.uniform(6, 10) * c.k, c.uniform(0.1, 0.9) * c.s
            m = c.rect(cx, centre, 2 * half + 8 * c.k, width, np.pi / 2)
            if c.place(BRIDGE, m, [(m, (0.6, 0.58, 0.55))]):
                break
    if c.rng.random() < 0.3:
        _try(c, 1, _ship, water, None)
    _try(c, int(c.rng.integers(0, 5)), _vehicle, ~water)


_PAINTERS = (_scene_port, _scene_airport, _scene_sports, _scene_industrial, _scene_river)


def render_scene(
    params: AerialParams, index: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Scene ``index``: uint8 ``[3, S, S]`` RGB, ``[n, 4]`` float32 xyxy boxes, ``[n]``
    int64 labels, and the scene type (index into :data:`SCENES`)."""
    rng = numpy_generator(params.seed, "synthetic_aerial", index)
    w = np.asarray(params.scene_weights, np.float64)
    scene = int(rng.choice(len(SCENES), p=w / w.sum()))
    c = _Canvas(params.size, rng, params.max_objects, params.object_scale)
    _PAINTERS[scene](c)
    img = c.img * np.float32(np.exp(rng.normal(0, 0.1)))
    img += rng.normal(0, params.noise_std, img.shape).astype(np.float32)
    rgb = (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)
    boxes = np.asarray(c.boxes, np.float32).reshape(-1, 4)
    return rgb, boxes, np.asarray(c.labels, np.int64), scene


def generate_aerial(params: AerialParams) -> dict[str, np.ndarray]:
    """Every scene: ``images`` uint8 ``[N, 3, S, S]``, ``boxes`` float32 ``[N, M, 5]``
    (padding label −1), ``scene`` int64 ``[N]``."""
    n, s = params.num_samples, params.size
    images = np.zeros((n, 3, s, s), np.uint8)
    rows = np.zeros((n, params.max_objects, 5), np.float32)
    rows[..., 4] = -1
    scenes = np.zeros(n, np.int64)
    for i in range(n):
        images[i], boxes, labels, scenes[i] = render_scene(params, i)
        rows[i, : len(boxes), :4] = boxes
        rows[i, : len(boxes), 4] = labels
    return {"images": images, "boxes": rows, "scene": scenes}


@DATASETS.register("synthetic_aerial", params=AerialParams)
def build_synthetic_aerial(params: AerialParams, *, cache_dir: Path) -> ArrayDataset:
    """NWPU-VHR-10-like aerial scenes (module docstring), generated once and cached.

    Returns:
        ``inputs`` ``[N, 3, S, S]`` float32 in ``[0, 1]`` (R, G, B), ``boxes`` targets
        ``[N, max_objects, 5]``, metadata ``scene`` (scene type id).
    """
    key = cache_key("synthetic-aerial-v1", params.model_dump(mode="json"))
    arrays = cached_arrays(cache_dir, key, lambda: generate_aerial(params))
    return ArrayDataset(
        inputs=torch.from_numpy(arrays["images"].astype(np.float32) / 255.0),
        targets=torch.from_numpy(np.array(arrays["boxes"], np.float32)),
        classes=AERIAL_CLASSES,
        bands=("R", "G", "B"),
        metadata={"scene": np.array(arrays["scene"])},
        name="synthetic_aerial",
        target_kind="boxes",
    )
