"""torchvision detectors trained from scratch, behind geofl's model interface.

Two registered families (paper 004 evaluates a single-stage YOLOv5s and, in Table 8 panel
C, a two-stage detector):

* ``fcos`` — FCOS (Tian et al. 2019), anchor-free single stage; the default: of the
  single-stage detectors it trained fastest and reached the highest mAP@0.5 in
  ``benchmarks/bench_detectors.py`` (the figures are in ``benchmarks/README.md``);
* ``faster_rcnn`` — Faster R-CNN with FPN (Ren et al. 2015; Lin et al. 2017), two-stage;
* ``retinanet`` — RetinaNet (Lin et al. 2017), anchor-based single stage, for comparison.

All use :class:`~geofl.models.detection.backbone.GNResNetFPN` (GroupNorm, no running
statistics), no downloaded weights (``weights`` starts a run from a local state dict of the
same detector, e.g. one pretrained centrally: the paper's detector is COCO-pretrained), and
images as the dataset holds them (standardised by
the engine; torchvision's transform neither resizes nor re-normalises). Labels are
``[0, C)`` outside; Faster R-CNN's background class 0 is added and removed inside.

Randomness: torchvision initialises layers from the global RNG and Faster R-CNN samples
anchors and proposals with ``torch.randperm``. Both run inside ``torch.random.fork_rng``
seeded from geofl's streams — initialisation from the ``model_init`` generator, sampling
from a :class:`SamplingStream` that the local trainer reseeds per (seed, round, client)
like dropout — so the global RNG is never read or changed and runs are reproducible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from geofl.models.base import MODELS
from geofl.models.detection.backbone import GNResNetFPN
from geofl.models.detection.tvops import ensure_torchvision_ops
from geofl.models.mlp import GeneratorDropout
from geofl.models.weights import check_weights_file, load_weights
from geofl.tasks.detection import DetectionOutput

__all__ = [
    "DetectorParams",
    "FasterRCNNParams",
    "SamplingStream",
    "TorchvisionDetector",
    "head_groups",
]

_SEED_BOUND = 2**62
#: GroupNorm groups of torchvision's FCOS/RetinaNet heads (Tian et al. 2019: GN(32)).
HEAD_GROUPS = 32


def head_groups(channels: int) -> int:
    """GroupNorm groups for a detector head tower of ``channels`` channels.

    The heads run on every pyramid level, and the top ones (P6/P7, strides 64/128) are 1×1
    on small images, where a group of one channel holds a single value per sample: its
    variance is 0 and PyTorch refuses it (a 1-image evaluation batch crashes). The rule:
    the most groups ≤ 32 (the heads' published GN(32)) that divide ``channels`` and leave
    each group ≥ 2 channels, i.e. ≥ 2 values per sample even on a 1×1 map. For ≥ 64
    channels (every preset before this rule) it is 32, so those models are unchanged.

    >>> head_groups(64), head_groups(32), head_groups(256)
    (32, 16, 32)
    """
    g = min(HEAD_GROUPS, max(channels // 2, 1))
    while channels % g:
        g -= 1
    return g


def _regroup_head_norms(head: nn.Module, channels: int) -> None:
    """Rebuild the GN(32) layers of a torchvision head with :func:`head_groups` groups.

    Only layers whose group count differs are replaced; a fresh GroupNorm's affine
    parameters (ones, zeros) equal the replaced ones' and draw no random numbers, so the
    rest of the initialisation is untouched.
    """
    groups = head_groups(channels)
    for parent in list(head.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.GroupNorm) and child.num_groups != groups:
                setattr(parent, name, nn.GroupNorm(groups, child.num_channels))


class SamplingStream(GeneratorDropout):
    """The generator that a detector's training-time sampling draws from.

    An identity layer (``p = 0``) that exists for its ``generator``: the local trainer
    reseeds every :class:`~geofl.models.mlp.GeneratorDropout` from (seed, round, client,
    "dropout") before each client's round, so proposal sampling follows that stream.
    """

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__(0.0, generator)

    def next_seed(self) -> int:
        """One 62-bit seed from the stream."""
        return int(torch.randint(_SEED_BOUND, (1,), generator=self.generator))


class TorchvisionDetector(nn.Module):
    """A torchvision detector taking ``[B, C, H, W]`` tensors and ``[0, C)`` labels.

    Args:
        net: The torchvision detector (``FCOS``, ``RetinaNet``, ``FasterRCNN``).
        label_offset: Added to labels going in, subtracted coming out (1 for detectors
            with a background class).
        generator: Initial state of the sampling stream.

    ``forward(x)`` in eval mode returns per-image detections; ``forward(x, targets)``
    returns the loss dict in training and a :class:`~geofl.tasks.detection.DetectionOutput`
    (detections and losses, with a fixed sampling seed) in eval mode.
    """

    def __init__(self, net: nn.Module, label_offset: int, generator: torch.Generator) -> None:
        super().__init__()
        self.net = net
        self.label_offset = label_offset
        self.sampling = SamplingStream(generator)

    def _targets(self, targets: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        if not self.label_offset:
            return targets
        return [{"boxes": t["boxes"], "labels": t["labels"] + self.label_offset} for t in targets]

    def _detections(self, dets: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        if not self.label_offset:
            return dets
        return [{**d, "labels": d["labels"] - self.label_offset} for d in dets]

    def _losses(self, images: list[torch.Tensor], targets: Any, seed: int) -> dict[str, Any]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out: dict[str, Any] = self.net(images, self._targets(targets))
        return out

    def forward(self, x: torch.Tensor, targets: Any = None) -> Any:
        """See the class docstring."""
        images = list(x)
        if self.training:
            if targets is None:
                raise ValueError("a detector in training mode needs targets")
            return self._losses(images, targets, self.sampling.next_seed())
        dets = self._detections(self.net(images))
        if targets is None:
            return dets
        self.net.train()
        try:
            losses = self._losses(images, targets, 0)
        finally:
            self.net.eval()
        return DetectionOutput(dets, losses)


class _StartingWeights(BaseModel):
    """The ``weights`` field every detector has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: str | None = Field(
        None,
        description="initial weights: a local state dict of this detector (e.g. one "
        "pretrained centrally: torch.save(geofl.load_model(run).net.state_dict(), path))",
    )

    @field_validator("weights")
    @classmethod
    def _weights_file_holds_a_state_dict(cls, value: str | None) -> str | None:
        return check_weights_file(value)


class DetectorParams(_StartingWeights):
    """Parameters of the single-stage detectors (``fcos``, ``retinanet``)."""

    width: int = Field(32, ge=8, le=64, description="backbone first-stage channels (R-18: 64)")
    fpn_channels: int = Field(
        64,
        ge=32,
        le=256,
        multiple_of=32,
        description="pyramid channels (head GroupNorm: head_groups)",
    )
    norm_groups: int = Field(8, ge=1, le=32, description="GroupNorm groups of the backbone")
    head_convs: int = Field(2, ge=1, le=4, description="FCOS head tower depth (paper: 4)")
    anchor_size: int = Field(16, ge=4, le=128, description="object size at P3 (stride 8)")
    score_thresh: float = Field(0.05, ge=0.0, lt=1.0, description="detection score floor")
    nms_thresh: float = Field(0.6, gt=0.0, le=1.0, description="NMS IoU threshold")
    detections_per_img: int = Field(100, ge=1, le=1000, description="detections kept per image")
    topk_candidates: int = Field(200, ge=10, le=5000, description="candidates per level")


class FasterRCNNParams(_StartingWeights):
    """Parameters of ``faster_rcnn``."""

    width: int = Field(32, ge=8, le=64, description="backbone first-stage channels (R-18: 64)")
    fpn_channels: int = Field(64, ge=16, le=256, description="feature-pyramid channels")
    norm_groups: int = Field(8, ge=1, le=32, description="GroupNorm groups of the backbone")
    anchor_size: int = Field(16, ge=4, le=128, description="anchor size at P2 (stride 4)")
    head_dim: int = Field(256, ge=32, le=1024, description="box-head MLP width (paper: 1024)")
    proposals: int = Field(300, ge=10, le=2000, description="RPN proposals kept per image")
    rois_per_image: int = Field(128, ge=16, le=512, description="sampled RoIs per image")
    score_thresh: float = Field(0.05, ge=0.0, lt=1.0, description="detection score floor")
    nms_thresh: float = Field(0.5, gt=0.0, le=1.0, description="NMS IoU threshold")
    detections_per_img: int = Field(100, ge=1, le=1000, description="detections kept per image")


def _seeded(generator: torch.Generator) -> int:
    return int(torch.randint(_SEED_BOUND, (1,), generator=generator))


def _no_resize(net: nn.Module, in_channels: int) -> None:
    """Replace the detector's transform by one that neither resizes nor normalises."""
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    class AsIs(GeneralizedRCNNTransform):  # type: ignore[misc]
        def resize(self, image: torch.Tensor, target: Any = None) -> tuple[torch.Tensor, Any]:
            return image, target

    net.transform = AsIs(1, 1, [0.0] * in_channels, [1.0] * in_channels)
    net.transform.normalize = lambda image: image


def _pyramid_anchors(size: int, levels: int, ratios: tuple[float, ...], octaves: int) -> Any:
    from torchvision.models.detection.anchor_utils import AnchorGenerator

    sizes = tuple(
        tuple(round(size * 2**lvl * 2 ** (o / octaves)) for o in range(octaves))
        for lvl in range(levels)
    )
    return AnchorGenerator(sizes, (ratios,) * levels)


def build_single_stage(
    kind: Literal["fcos", "retinanet"],
    params: DetectorParams,
    in_channels: int,
    num_classes: int,
    generator: torch.Generator,
) -> TorchvisionDetector:
    """An FCOS or RetinaNet on the GroupNorm backbone, P3–P7 (strides 8–128)."""
    ensure_torchvision_ops()
    from torchvision.models.detection.fcos import FCOS, FCOSHead
    from torchvision.models.detection.retinanet import RetinaNet, RetinaNetHead

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seeded(generator))
        backbone = GNResNetFPN(
            in_channels, params.width, params.fpn_channels, params.norm_groups, (2, 3, 4), "p6p7"
        )
        common: dict[str, Any] = {
            "score_thresh": params.score_thresh,
            "nms_thresh": params.nms_thresh,
            "detections_per_img": params.detections_per_img,
            "topk_candidates": params.topk_candidates,
        }
        net: nn.Module
        if kind == "fcos":
            anchors = _pyramid_anchors(params.anchor_size, 5, (1.0,), 1)
            head = FCOSHead(params.fpn_channels, 1, num_classes, params.head_convs)
            _regroup_head_norms(head, params.fpn_channels)
            net = FCOS(backbone, num_classes, anchor_generator=anchors, head=head, **common)
        else:
            anchors = _pyramid_anchors(params.anchor_size, 5, (0.5, 1.0, 2.0), 3)
            head = RetinaNetHead(
                params.fpn_channels,
                anchors.num_anchors_per_location()[0],
                num_classes,
                norm_layer=lambda c: nn.GroupNorm(head_groups(c), c),
            )
            net = RetinaNet(backbone, num_classes, anchor_generator=anchors, head=head, **common)
    _no_resize(net, in_channels)
    model = TorchvisionDetector(net, 0, torch.Generator().manual_seed(_seeded(generator)))
    return _load_weights(model, params.weights, kind, "net.head.classification_head.cls_logits")


def build_faster_rcnn_model(
    params: FasterRCNNParams, in_channels: int, num_classes: int, generator: torch.Generator
) -> TorchvisionDetector:
    """Faster R-CNN with FPN (P2–P5 + pooled P6) on the GroupNorm backbone."""
    ensure_torchvision_ops()
    from torchvision.models.detection.faster_rcnn import (
        FasterRCNN,
        FastRCNNPredictor,
        TwoMLPHead,
    )
    from torchvision.ops import MultiScaleRoIAlign

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seeded(generator))
        backbone = GNResNetFPN(
            in_channels, params.width, params.fpn_channels, params.norm_groups, (1, 2, 3, 4), "pool"
        )
        anchors = _pyramid_anchors(params.anchor_size, 5, (0.5, 1.0, 2.0), 1)
        roi_pool = MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2)
        net = FasterRCNN(
            backbone,
            None,  # the class count is the predictor's (background + C)
            rpn_anchor_generator=anchors,
            box_roi_pool=roi_pool,
            box_head=TwoMLPHead(params.fpn_channels * 49, params.head_dim),
            box_predictor=FastRCNNPredictor(params.head_dim, num_classes + 1),
            rpn_pre_nms_top_n_train=2 * params.proposals,
            rpn_pre_nms_top_n_test=params.proposals,
            rpn_post_nms_top_n_train=params.proposals,
            rpn_post_nms_top_n_test=params.proposals,
            box_batch_size_per_image=params.rois_per_image,
            box_score_thresh=params.score_thresh,
            box_nms_thresh=params.nms_thresh,
            box_detections_per_img=params.detections_per_img,
        )
    _no_resize(net, in_channels)
    model = TorchvisionDetector(net, 1, torch.Generator().manual_seed(_seeded(generator)))
    return _load_weights(model, params.weights, "faster_rcnn", "net.roi_heads.box_predictor")


def _load_weights(
    model: TorchvisionDetector, weights: str | None, kind: str, head: str
) -> TorchvisionDetector:
    """``model`` with the state dict in ``weights`` loaded over its seeded initialisation
    (:func:`geofl.models.weights.load_weights`: names must match, shapes too, except the
    class-count-dependent layers under ``head``, which keep their initial values when the
    file has another class count); ``model`` itself when ``weights`` is None."""
    if weights is not None:
        load_weights(
            model,
            Path(weights).expanduser(),
            field="model.params.weights",
            stem="net.backbone.stem.0.weight",
            head=head,
            layout=f"geofl {kind} detector",
        )
    return model


@MODELS.register("fcos", params=DetectorParams, traits=("images",))
def build_fcos(
    params: DetectorParams, *, in_channels: int, num_classes: int, generator: torch.Generator
) -> nn.Module:
    """FCOS (anchor-free, single stage) on a GroupNorm ResNet-18-layout FPN; the default
    detector (0.9M parameters at width 32, 64 pyramid channels, 10 classes)."""
    return build_single_stage("fcos", params, in_channels, num_classes, generator)


@MODELS.register("retinanet", params=DetectorParams, traits=("images",))
def build_retinanet(
    params: DetectorParams, *, in_channels: int, num_classes: int, generator: torch.Generator
) -> nn.Module:
    """RetinaNet (anchors, focal loss, single stage) on the same backbone as ``fcos``."""
    return build_single_stage("retinanet", params, in_channels, num_classes, generator)


@MODELS.register("faster_rcnn", params=FasterRCNNParams, traits=("images",))
def build_faster_rcnn(
    params: FasterRCNNParams, *, in_channels: int, num_classes: int, generator: torch.Generator
) -> nn.Module:
    """Faster R-CNN + FPN (two-stage; paper 004 Table 8 panel C) on the same backbone."""
    return build_faster_rcnn_model(params, in_channels, num_classes, generator)
