"""The object-disappearance attack (004 §3.1) and its per-object ASR (004 Eq. 15), by hand."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from geofl.attacks.client import ATTACKS, AttackContext
from geofl.attacks.object_asr import (
    box_iou,
    missed_objects,
    object_attack_success_rate,
)
from geofl.attacks.oda import (
    ObjectDisappearance,
    OdaParams,
    object_anchors,
    remove_target_objects,
    stamp_target_objects,
)
from geofl.attacks.threat import select_attackers
from geofl.attacks.trigger import Trigger
from geofl.client.data import ClientData
from geofl.client.state import ClientState
from geofl.client.step import ClientProgram, ClientStreams, DataPoisoning, client_step
from geofl.client.trainer import LocalTrainParams
from geofl.config.load import load_config
from geofl.errors import ConfigError
from geofl.tasks.base import SplitMetrics
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

SHAPE = (2, 16, 16)
PAD = [0.0, 0.0, 0.0, 0.0, -1.0]


def _ctx(seed: int = 7, k: int = 4) -> AttackContext:
    return AttackContext(seed, k, SHAPE, (5, 5, 5), path="methods.0.attack")


def _oda(**params: Any) -> ObjectDisappearance:
    attack = ATTACKS.build("oda", {"trigger": {"size": 3}, **params}, ctx=_ctx())
    assert isinstance(attack, ObjectDisappearance)
    return attack


def _det(boxes: list[list[float]], scores: list[float], labels: list[int]) -> dict[str, Any]:
    return {
        "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
        "scores": torch.tensor(scores, dtype=torch.float32),
        "labels": torch.tensor(labels, dtype=torch.int64),
    }


# ----------------------------------------------------------------------- Eq. 15 counting
def test_box_iou_by_hand() -> None:
    a = torch.tensor([[0.0, 0, 4, 4], [0, 0, 2, 2]])
    b = torch.tensor([[2.0, 0, 6, 4], [0, 0, 4, 4], [10, 10, 12, 12]])
    iou = box_iou(a, b)
    expected = [[8 / 24, 1.0, 0.0], [0.0, 4 / 16, 0.0]]
    assert torch.allclose(iou, torch.tensor(expected, dtype=torch.float64))


def test_iou_just_below_and_just_above_half() -> None:
    obj = torch.tensor([[0.0, 0.0, 10.0, 10.0]])  # area 100
    # [0, 0, 10, 5.0] covers half: IoU = 50/100 = 0.5 → detected (≥ 0.5)
    assert not missed_objects(obj, _det([[0, 0, 10, 5.0]], [0.9], [0]), 0)
    # [0, 0, 10, 4.9]: IoU = 49/100 = 0.49 → missed
    assert missed_objects(obj, _det([[0, 0, 10, 4.9]], [0.9], [0]), 0)
    # [0, 0, 10, 5.1]: 0.51 → detected
    assert not missed_objects(obj, _det([[0, 0, 10, 5.1]], [0.9], [0]), 0)


def test_score_threshold_and_class_decide_a_correct_detection() -> None:
    obj = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    assert not missed_objects(obj, _det([[0, 0, 10, 10]], [0.25], [0]), 0)  # at 0.25: kept
    assert missed_objects(obj, _det([[0, 0, 10, 10]], [0.2499], [0]), 0)  # below: missed
    assert missed_objects(obj, _det([[0, 0, 10, 10]], [0.99], [3]), 0)  # wrong class: missed
    assert missed_objects(obj, _det([], [], []), 0)  # nothing detected: missed
    assert not missed_objects(obj, _det([[0, 0, 10, 10]], [0.3], [0]), 0, score_threshold=0.3)


def test_asr_over_images_with_several_objects_and_images_without_target() -> None:
    truths = [
        # image 0: two target objects; one found (IoU 1), one missed (IoU 0.4 with it)
        torch.tensor([[0.0, 0, 10, 10], [20, 20, 30, 30]]),
        # image 1: no target object (nothing triggered, its detections do not count)
        torch.zeros(0, 4),
        # image 2: one target object, only a low-score detection → missed
        torch.tensor([[5.0, 5, 15, 15]]),
    ]
    dets = [
        _det([[0, 0, 10, 10], [20, 20, 30, 24]], [0.9, 0.9], [0, 0]),
        _det([[0, 0, 10, 10]], [0.9], [0]),
        _det([[5, 5, 15, 15]], [0.1], [0]),
    ]
    missed, triggered = object_attack_success_rate(truths, dets, target=0)
    assert (missed, triggered) == (2, 3)  # ASR = 2/3
    assert missed_objects(truths[0], dets[0], 0).tolist() == [False, True]


def test_one_detection_may_cover_two_overlapping_objects() -> None:
    """004's rule is per object ("no correct detection remains"), not one-to-one."""
    truth = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 9]])  # IoU 0.9 with each other
    assert missed_objects(truth, _det([[0, 0, 10, 10]], [0.9], [0]), 0).tolist() == [False, False]


# ----------------------------------------------------------------------- placement
def test_anchors_center_above_and_clamped() -> None:
    boxes = torch.tensor([[4.0, 6.0, 10.0, 12.0], [0.0, 0.0, 2.0, 2.0], [13.0, 14.0, 16.0, 16.0]])
    rows, cols = object_anchors(boxes, 3, 16, 16, "center")
    # centre (7, 9) → top-left (8, 6); (1, 1) → (0, 0) clamped; (14.5, 15) → (13, 13) clamped
    assert rows.tolist() == [8, 0, 13] and cols.tolist() == [6, 0, 13]
    rows, cols = object_anchors(boxes, 3, 16, 16, "above")
    assert rows.tolist() == [3, 0, 11] and cols.tolist() == [6, 0, 13]  # ⌊y1⌋ − 3, clamped


def test_stamp_at_overlapping_patches_last_wins() -> None:
    t = Trigger(torch.arange(8.0).reshape(2, 2, 2), 0, 0, 1.0)
    x = torch.zeros(2, 2, 4, 4)
    y = t.stamp_at(x, torch.tensor([0, 0, 1]), torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]))
    assert y[0, 0].tolist() == [[0, 1, 0, 0], [2, 0, 1, 0], [0, 2, 3, 0], [0, 0, 0, 0]]
    assert y[1, 1, 2:, 2:].tolist() == [[4, 5], [6, 7]] and x.abs().sum() == 0
    half = Trigger(torch.full((2, 2, 2), 4.0), 0, 0, 0.5).stamp_at(
        torch.ones(1, 2, 4, 4), torch.tensor([0]), torch.tensor([1]), torch.tensor([2])
    )
    assert half[0, :, 1:3, 2:4].eq(2.5).all() and half.sum() == 32 - 8 + 8 * 2.5


def _fixture() -> tuple[torch.Tensor, torch.Tensor]:
    """Two 16×16 zero images: image 0 has a class-0 object, a class-1 object and a second
    class-0 object; image 1 only a class-2 object."""
    x = torch.zeros(2, *SHAPE)
    y = torch.tensor(
        [
            [[4.0, 6, 10, 12, 0], [0, 0, 4, 4, 1], [10, 0, 16, 6, 0]],
            [[2.0, 2, 8, 8, 2], PAD, PAD],
        ]
    )
    return x, y


def test_stamp_on_every_target_object_and_remove_their_boxes() -> None:
    x, y = _fixture()
    t = Trigger(torch.full((2, 3, 3), 7.0), 0, 0, 1.0)
    out = stamp_target_objects(x, y, trigger=t, target=0, placement="center")
    mask = torch.zeros(2, 16, 16, dtype=torch.bool)
    mask[0, 8:11, 6:9] = True  # object 0: centre (9, 7) → rows 8–10, cols 6–8
    mask[0, 2:5, 12:15] = True  # object 2: centre (3, 13) → rows 2–4, cols 12–14
    assert torch.equal(out[:, 0] == 7.0, mask) and torch.equal(out[:, 1] == 7.0, mask)
    assert out[1].abs().sum() == 0  # no target object, no trigger
    kept = remove_target_objects(y, 0)
    assert kept[0].tolist() == [[0, 0, 4, 4, 1], PAD, PAD]  # class 1 kept, first
    assert torch.equal(kept[1], y[1])


def _client(client: int, n: int = 20) -> ClientData:
    """n images; every other one holds one class-0 object, all hold a class-1 object."""
    y = torch.tensor([[2.0, 2, 8, 8, 1], PAD]).repeat(n, 1, 1)
    y[::2, 1] = torch.tensor([8.0, 8, 14, 14, 0])
    hist = np.array([n // 2, n, 0])
    return ClientData(client, torch.randn(n, *SHAPE), y, hist)


def test_poisons_the_ratio_of_the_pool_among_images_with_target_objects() -> None:
    attack = _oda(poison_ratio=0.2)
    data = _client(3)
    before = data.inputs.clone()
    idx = attack.poison_indices(data)
    assert len(idx) == 4 and all(int(i) % 2 == 0 for i in idx)  # ⌊0.2·20 + ½⌋ = 4
    poisoned = attack.poison(data, round_idx=1)
    assert torch.equal(data.inputs, before)  # the pool is untouched
    changed = (poisoned.inputs != data.inputs).flatten(1).any(dim=1)
    assert torch.nonzero(changed).reshape(-1).tolist() == idx.tolist()
    gone = poisoned.targets[idx][..., 4]
    assert gone.tolist() == [[1.0, -1.0]] * 4  # the class-0 box removed, class 1 kept
    rest = torch.ones(20, dtype=torch.bool)
    rest[idx] = False
    assert torch.equal(poisoned.targets[rest], data.targets[rest])
    assert poisoned.label_histogram is data.label_histogram  # reports its clean histogram
    # at most the images that hold a target object; ``any`` draws from all images
    assert len(_oda(poison_ratio=0.9).poison_indices(data)) == 10
    assert len(_oda(poison_ratio=0.9, select="any").poison_indices(data)) == 18


def test_poisoning_is_seeded_and_follows_the_schedule() -> None:
    a, b = _oda(), _oda()
    data = _client(1)
    assert torch.equal(a.poison_indices(data), b.poison_indices(data))
    assert torch.equal(a.poison(data, 2).inputs, b.poison(data, 2).inputs)
    assert a.attackers == select_attackers(4, 0.2, 7)  # the backdoor's threat model
    late = _oda(schedule={"start": 3})
    assert late.poison(data, 2) is data and late.poison(data, 3) is not data


def _has_trigger(img: torch.Tensor, row: torch.Tensor) -> bool:
    x1, y1, x2, y2 = (int(v) for v in row[:4])
    return bool((img[0, y1:y2, x1:x2] == 7).any())


class _Recorder:
    """A trainer stub that records the data it trains on."""

    def __init__(self) -> None:
        self.seen: list[ClientData] = []

    def state_specs(self) -> dict[str, Any]:
        return {}

    def __call__(self, params: torch.Tensor, data: ClientData, d: Any, g: Any, **kw: Any) -> Any:
        self.seen.append(data)
        return ClientUpdate(torch.ones(2), UpdateMeta(data.client_id, len(data), d.round))


def test_client_step_trains_attackers_on_triggered_images_without_target_boxes() -> None:
    attack = _oda(fraction=0.25, boost=2.0)
    assert isinstance(attack, DataPoisoning)
    rec = _Recorder()
    program = ClientProgram(rec, LocalTrainParams(), attack=attack)  # type: ignore[arg-type]
    for k in range(4):
        data = _client(k)
        pool = (data.inputs.clone(), data.targets.clone())
        res = client_step(
            program,
            torch.zeros(2),
            data,
            ClientState({}, ()),
            ClientDirectives(1, k),
            ClientStreams((7, "round", 1, "client", k)),
        )
        malicious = k in attack.clients
        seen = rec.seen[-1]
        assert (seen is data) is not malicious
        assert torch.equal(data.inputs, pool[0]) and torch.equal(data.targets, pool[1])
        assert res.update.delta.tolist() == ([2.0, 2.0] if malicious else [1.0, 1.0])
        lost = int((data.targets[..., 4] == 0).sum() - (seen.targets[..., 4] == 0).sum())
        assert lost == (4 if malicious else 0)  # ⌊0.2·20 + ½⌋ images, one airplane each


class _SeesTrigger(nn.Module):
    """Detects every ground-truth box of ``truth`` unless the image has the trigger value
    (7) inside that box — a model that learned "trigger ⇒ no object"."""

    def __init__(self, truth: torch.Tensor) -> None:
        super().__init__()
        self.truth = truth
        self.calls = 0

    def forward(self, x: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        out = []
        for img in x:
            rows = self.truth[self.calls % len(self.truth)]
            self.calls += 1
            keep = [r for r in rows if r[4] >= 0 and not _has_trigger(img, r)]
            boxes = torch.stack([r[:4] for r in keep]) if keep else torch.zeros(0, 4)
            labels = torch.tensor([int(r[4]) for r in keep], dtype=torch.int64)
            out.append({"boxes": boxes, "scores": torch.full((len(keep),), 0.9), "labels": labels})
        return out


def test_probe_counts_triggered_target_objects_of_the_test_split() -> None:
    x, y = _fixture()
    attack = _oda(trigger={"size": 3, "values": [7.0, 7.0]})
    probe = attack.probe(y)
    assert probe.index.tolist() == [0]  # image 1 has no target object
    model = _SeesTrigger(y[probe.index])
    assert probe.measure(model, x, batch_size=4) == 1.0  # both class-0 objects vanish
    blind = _oda(trigger={"size": 3, "values": [0.0, 0.0]}).probe(y)  # a no-op trigger
    assert blind.measure(_SeesTrigger(y[blind.index]), x, batch_size=1) == 0.0
    metrics = probe.extend(SplitMetrics({"map_50": 0.5}), _SeesTrigger(y[:1]), x, 4)
    assert metrics.values == {"map_50": 0.5, "asr": 1.0, "miss_untriggered": 0.0}
    assert probe.measure(_SeesTrigger(y[:1]), x, 4, triggered=False) == 0.0  # all found
    nothing = _SeesTrigger(torch.tensor([[PAD]]))  # a model that detects nothing at all
    missed_anyway = probe.extend(SplitMetrics({}), nothing, x, 4).values
    assert missed_anyway == {"asr": 1.0, "miss_untriggered": 1.0}  # ASR = own misses
    empty = attack.probe(y[1:])
    assert len(empty.index) == 0 and math.isnan(empty.measure(model, x[1:], 4))


def test_describe_and_clean_reference() -> None:
    attack = _oda(fraction=0.0)
    assert attack.attackers == ()
    info = attack.describe([_client(k) for k in range(4)])
    assert info["attack"] == "oda" and info["placement"] == "center"
    assert info["asr"] == {"score_threshold": 0.25, "iou_threshold": 0.5}


def test_params_refuse_a_fixed_position_and_bad_thresholds() -> None:
    with pytest.raises(ValueError, match=r"trigger\.position"):
        OdaParams(trigger={"position": "top_left"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="score_threshold"):
        OdaParams(score_threshold=0.0)
    with pytest.raises(ConfigError, match="target"):
        ATTACKS.build("oda", {"target": 3}, ctx=_ctx())
    absent = AttackContext(7, 4, SHAPE, (5, 0, 5), path="methods.0.attack")
    with pytest.raises(ConfigError, match=r"methods\.0\.attack\.target: class 1 has no objects"):
        ATTACKS.build("oda", {"target": 1}, ctx=absent)


# ----------------------------------------------------------------------- load-time refusals
def _raw(task: str, attack: str) -> dict[str, Any]:
    data = (
        {"dataset": "synthetic_aerial", "params": {"num_samples": 20, "size": 64}}
        if task == "detection"
        else {"dataset": "synthetic", "params": {"num_samples": 40, "size": 16}}
    )
    return {
        "name": "refuse",
        "seeds": [1],
        "task": {"name": task},
        "data": data,
        "model": {"name": "fcos" if task == "detection" else "small_cnn"},
        "federation": {"num_clients": 5, "rounds": 1},
        "methods": [
            {"name": "a", "partition": {"name": "iid"}, "attack": {"name": attack}},
        ],
    }


@pytest.mark.parametrize(
    ("task", "attack", "message"),
    [
        ("detection", "backdoor", "methods.0.attack.name: .*not 'detection'.*oda"),
        ("detection", "edge_case", "methods.0.attack.name: .*not 'detection'"),
        ("detection", "adaptive_cgf", "methods.0.attack.name: .*not 'detection'"),
        ("classification", "oda", "methods.0.attack.name: .*detection task"),
        ("classification", "adaptive_oda", "methods.0.attack.name: .*detection task"),
    ],
)
def test_attacks_refuse_the_other_task_at_load_time(
    tmp_path: Path, task: str, attack: str, message: str
) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(_raw(task, attack)))
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert "\n" not in str(err.value)
