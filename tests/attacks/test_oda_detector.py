"""What the object-disappearance attack (004 §3.1) hands the detectors reaches their loss.

Two ways an ODA can silently fail to teach "trigger ⇒ no object", each pinned here on a
hand-built image: the detector's input transform resizing or re-normalising the image (the
trigger, stamped in model-input units, would be blurred or shifted), and the detector
treating the locations of a removed object as *ignored* rather than as background (the
trigger would then never be trained against).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from geofl.attacks.oda import remove_target_objects, stamp_target_objects
from geofl.attacks.trigger import Trigger
from geofl.models import MODELS
from geofl.tasks.detection import targets_to_dicts

SIZE = 64
#: One airplane (class 0) with its centre at (32, 32), one vehicle (class 9) in a corner.
ROWS = torch.tensor([[[20.0, 20, 44, 44, 0], [2, 2, 10, 8, 9]]])


def _model(name: str) -> Any:
    return MODELS.build(
        name,
        {"width": 8, "fpn_channels": 32},
        in_channels=3,
        num_classes=10,
        generator=torch.Generator().manual_seed(0),
    )


def _image() -> torch.Tensor:
    return torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", ["fcos", "faster_rcnn"])
def test_the_trigger_reaches_the_backbone_unchanged(name: str) -> None:
    trigger = Trigger(torch.full((3, 4, 4), 2.0), 0, 0, 1.0)
    x = stamp_target_objects(_image(), ROWS, trigger=trigger, target=0, placement="center")
    assert torch.equal(x[0, :, 30:34, 30:34], torch.full((3, 4, 4), 2.0))  # on the centre
    model = _model(name)
    images, targets = model.net.transform(list(x), targets_to_dicts(ROWS))
    assert images.image_sizes == [(SIZE, SIZE)]  # neither resized ...
    assert torch.equal(images.tensors, x)  # ... nor re-normalised: the same pixels
    assert torch.equal(targets[0]["boxes"], ROWS[0, :, :4])  # boxes in the same frame


def _class0_logit_grads(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FCOS's classification loss on ``rows``: d loss / d logit of class 0 at every
    location (``[L]``) and the locations' centres (``[L, 2]`` x, y), P3 first."""
    net = _model("fcos").net
    images, targets = net.transform(list(_image()), targets_to_dicts(rows))
    feats = list(net.backbone(images.tensors).values())
    out = net.head(feats)
    out["cls_logits"].retain_grad()
    anchors = net.anchor_generator(images, feats)
    per_level = [f.shape[-2] * f.shape[-1] for f in feats]
    losses = net.compute_loss(targets, out, anchors, per_level)
    losses["classification"].backward()
    centres = (anchors[0][:, :2] + anchors[0][:, 2:]) / 2
    return out["cls_logits"].grad[0, :, 0], centres


def test_fcos_trains_a_removed_object_as_background_not_ignored() -> None:
    grad_boxed, centres = _class0_logit_grads(ROWS)
    grad_gone, _ = _class0_logit_grads(remove_target_objects(ROWS, 0))
    # P3 (stride 8) locations strictly inside the airplane box: x, y ∈ {24, 32, 40}
    inside = (centres > 20).all(dim=1) & (centres < 44).all(dim=1)
    inside[(SIZE // 8) ** 2 :] = False
    assert int(inside.sum()) == 9
    assert (grad_boxed[inside] < 0).all()  # positives: the step raises the class-0 score
    assert (grad_gone[inside] > 0).all()  # removed: negatives that the step lowers ...
    assert (grad_gone != 0).all()  # ... and no location is ignored
