"""Gather the test scenes of the 004 Fig. 5 analogue from a detection run under ODA.

For one seed of a run directory, :func:`collect_oda_scenes` rebuilds the seed's test split
exactly as the run did (:func:`~geofl.engine.experiment.prepare_split`: same split, same
per-band standardisation), stamps the attack's recorded trigger (``final.json["threat"]``:
patch, opacity, placement, target) on every target object of the test images that hold one
(:func:`~geofl.attacks.oda.stamp_target_objects`, as the ASR probe does), runs the attacked
and the defended method's final global models on those triggered images, and marks each
target object found or missed by 004 Eq. 15's rule (:func:`~geofl.attacks.object_asr.
missed_objects`, the run's score/IoU thresholds).

Scene choice (stated, since the figure is illustrative): the ``count`` test images with the
most target objects the attacked model misses and the defended one finds, then the most
the attacked model misses, then test order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl.attacks.object_asr import missed_objects
from geofl.attacks.oda import stamp_target_objects
from geofl.attacks.trigger import Trigger
from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.components import StatsSplit
from geofl.engine.experiment import load_dataset, method_stats_split, prepare_split
from geofl.errors import RunDirError
from geofl.inference.load import load_model
from geofl.report.oda_scenes import OdaScene
from geofl.rundir import seed_dir

__all__ = ["collect_oda_scenes"]


def _threat(run_dir: Path, method: str, seed: int) -> dict[str, Any]:
    path = seed_dir(run_dir, method, seed) / "final.json"
    if not path.exists():
        raise RunDirError(f"{path} is missing: method {method!r} seed {seed} did not finish")
    threat = json.loads(path.read_text()).get("threat") or {}
    if threat.get("attack") != "oda" or "trigger" not in threat:
        raise RunDirError(f"{path}: method {method!r} ran no object-disappearance attack")
    return dict(threat)


def _detect(run_dir: Path, method: str, seed: int, x: torch.Tensor) -> list[Any]:
    net = load_model(run_dir, method, seed, which="final").net.eval()
    with torch.inference_mode():
        return list(net(x))


def _display(x: torch.Tensor, mean: torch.Tensor | None, std: torch.Tensor | None) -> np.ndarray:
    raw = x if mean is None or std is None else x * std[0] + mean[0]
    return raw[:3].permute(1, 2, 0).clamp(0, 1).numpy()


def _stats_split(cfg: ExperimentConfig, name: str) -> StatsSplit:
    """The split method ``name`` fitted its input statistics on (val for a DP method)."""
    method = next((m for m in cfg.methods if m.name == name), None)
    if method is None:
        raise RunDirError(f"method {name!r} is not in the run's config.yaml")
    return method_stats_split(method)


def collect_oda_scenes(
    run_dir: Path, attacked: str, defended: str, seed: int, count: int = 3
) -> tuple[list[OdaScene], str]:
    """The figure's scenes (see the module docstring) of ``seed`` in ``run_dir``, and the
    attacked class's name.

    Raises:
        RunDirError: a method did not finish or ran no ODA; the test split holds no
            target object.
    """
    threat = _threat(run_dir, attacked, seed)
    cfg = load_config(run_dir / "config.yaml")
    ds = load_dataset(cfg)
    stats = {m: _stats_split(cfg, m) for m in (attacked, defended)}  # as each run did
    prepared = {k: prepare_split(ds, cfg, seed, stats_from=k) for k in set(stats.values())}
    data = prepared[stats[attacked]]
    inputs, targets = data.test.inputs, data.test.targets
    if not isinstance(inputs, torch.Tensor):
        raise RunDirError("the ODA scenes need the dataset in memory (data.cache: memory)")
    target = int(threat["target"])
    index = torch.nonzero((targets[..., 4] == target).any(dim=1)).reshape(-1)
    if len(index) == 0:
        raise RunDirError(f"the test split of seed {seed} holds no object of class {target}")
    t = threat["trigger"]
    trigger = Trigger(torch.tensor(t["patch"], dtype=torch.float32), 0, 0, float(t["opacity"]))
    rows = targets[index]
    stamped = {
        k: stamp_target_objects(
            d.test.inputs[index],
            rows,
            trigger=trigger,
            target=target,
            placement=threat["placement"],
        )
        for k, d in prepared.items()
    }
    dets = {m: _detect(run_dir, m, seed, stamped[stats[m]]) for m in (attacked, defended)}
    x = stamped[stats[attacked]]
    thr = (float(threat["asr"]["score_threshold"]), float(threat["asr"]["iou_threshold"]))
    scenes = []
    for i, row in enumerate(rows):
        truth = row[row[:, 4] == target, :4]
        miss = {m: missed_objects(truth, dets[m][i], target, *thr).numpy() for m in dets}
        other = row[(row[:, 4] >= 0) & (row[:, 4] != target), :4]
        scenes.append(
            OdaScene(
                int(index[i]),
                _display(inputs[index[i]], data.mean, data.std),
                _display(x[i], data.mean, data.std),
                truth.numpy(),
                other.numpy(),
                miss[attacked],
                miss[defended],
            )
        )
    restored = [int((s.attacked_missed & ~s.defended_missed).sum()) for s in scenes]
    order = sorted(
        range(len(scenes)), key=lambda j: (-restored[j], -int(scenes[j].attacked_missed.sum()), j)
    )
    return [scenes[j] for j in order[:count]], str(ds.classes[target])
