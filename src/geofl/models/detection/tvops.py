"""torchvision's detection operators on a CPU-only torch, when its compiled ops cannot load.

Why this exists. The venv pins ``torch==2.13.0+cpu``; PyPI's ``torchvision==0.28.0`` wheel
for Linux is built against the CUDA torch, so its extension cannot be loaded beside the
CPU build::

    $ ldd .venv/lib/python3.*/site-packages/torchvision/_C.so | grep 'not found'
        libc10.so => not found        libtorch_cpu.so => not found
        libtorch.so => not found      libtorch_python.so => not found
        libc10_cuda.so => not found   libtorch_cuda.so => not found

``torchvision.extension`` swallows that failure, then ``torchvision/_meta_registrations.py``
calls ``torch.library.register_fake("torchvision::nms")`` for an operator nobody defined,
and ``import torchvision`` dies with ``RuntimeError: operator torchvision::nms does not
exist``. With torch from PyPI's default index (the CUDA build that the README's
``pip install -e .`` resolves to on Linux), the wheels match, ``_C`` loads and
:func:`ensure_torchvision_ops` only imports torchvision (not verified here: the CUDA wheels
are gigabytes). A CPU torchvision wheel exists only on PyTorch's own index, which these
machines cannot reach.

What it does, only when ``torchvision/_C*.so`` is absent or ``torch.ops.load_library``
refuses it (probed without importing torchvision):

1. defines every ``torchvision::`` operator schema of torchvision 0.28 (the strings below
   are those of ``torchvision/csrc/ops/*.cpp``, as they appear in ``strings _C.so``);
2. registers the pure-torch CPU kernels of :mod:`~geofl.models.detection.cpu_kernels` for
   the two operators torchvision's detectors call:
   ``nms`` (exact greedy NMS; RetinaNet/FCOS/SSD post-processing, the RPN of Faster R-CNN)
   and ``roi_align`` with ``_roi_align_backward`` and autograd (Faster R-CNN's
   ``MultiScaleRoIAlign``) with the sampling rules of ``roi_align_kernel.cpp`` (equal to a
   per-sample float64 reference to 1e-12; sums run in another order than the C++ loop);
3. the other operators (``roi_pool``, ``ps_roi_*``, ``deform_conv2d``, quantised ops,
   ``box_iou_rotated``) get a kernel raising :class:`NotImplementedError` naming the fix;
4. imports torchvision and marks its ops available (``torchvision.extension._has_ops``),
   so that ``torchvision.ops.nms``/``roi_align`` dispatch to the kernels of step 2.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from typing import Any

import torch

from geofl.models.detection.cpu_kernels import nms_cpu, roi_align_backward_cpu, roi_align_cpu

__all__ = ["SCHEMAS", "ensure_torchvision_ops", "torchvision_ops_native"]

log = logging.getLogger("geofl")

#: torchvision 0.28 operator schemas (``csrc/ops/*.cpp``; ``strings torchvision/_C.so``).
SCHEMAS: tuple[str, ...] = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, "
    "float rois_scale, int rois_zero_point, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, SymInt batch_size, "
    "SymInt channels, SymInt height, SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, "
    "Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, "
    "SymInt dilation_h, SymInt dilation_w, SymInt groups, SymInt offset_groups, "
    "bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "box_iou_rotated(Tensor boxes1, Tensor boxes2) -> Tensor",
)

_state: dict[str, Any] = {"done": False, "native": None, "libs": []}
# torch.library and torch.ops are untyped; the typed names keep mypy strict elsewhere.
_LIBRARY: Any = torch.library.Library
_TORCH_OPS: Any = torch.ops


def torchvision_ops_native() -> bool:
    """Whether torchvision's compiled ``_C`` extension loads beside this torch.

    Probed with :func:`importlib.util.find_spec` and ``torch.ops.load_library`` on the file,
    without importing torchvision (whose import fails when ``_C`` does not load).
    """
    if _state["native"] is None:
        _state["native"] = _probe_native()
    return bool(_state["native"])


def _probe_native() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        for lib in sorted(Path(folder).glob("_C*.so")) + sorted(Path(folder).glob("_C*.pyd")):
            try:
                _TORCH_OPS.load_library(str(lib))
            except (OSError, RuntimeError) as err:
                log.debug("torchvision _C does not load (%s); using geofl's CPU ops", err)
                return False
            return True
    return False


def ensure_torchvision_ops() -> None:
    """Make ``import torchvision`` and its detection operators work (idempotent).

    With a loadable ``_C`` this only imports torchvision. Otherwise it defines the operator
    schemas, registers the CPU kernels of this module, imports torchvision and marks its
    ops available (module docstring).
    """
    if _state["done"]:
        return
    if not torchvision_ops_native():
        _register_fallback()
    import torchvision.extension

    if not torchvision_ops_native():
        # ``torchvision.ops.roi_align`` is the function; its module is in sys.modules.
        tv_roi_align = sys.modules["torchvision.ops.roi_align"]
        # ``_assert_has_ops`` reads the extension module's ``_has_ops``; ``roi_align`` bound
        # its own copy at import (without ops it would torch.compile a Python fallback).
        torchvision.extension._has_ops = _available
        tv_roi_align._has_ops = _available  # type: ignore[attr-defined]
    _state["done"] = True


def _available() -> bool:
    return True


def _register_fallback() -> None:
    lib = _LIBRARY("torchvision", "DEF")
    for schema in SCHEMAS:
        lib.define(schema)
    impl = _LIBRARY("torchvision", "IMPL")
    impl.impl("nms", nms_cpu, "CPU")
    impl.impl("roi_align", roi_align_cpu, "CPU")
    impl.impl("_roi_align_backward", roi_align_backward_cpu, "CPU")
    for schema in SCHEMAS:
        name = schema.split("(", 1)[0]
        if name not in ("nms", "roi_align", "_roi_align_backward"):
            impl.impl(name, _unavailable(name), "CPU")
    torch.library.register_autograd(
        "torchvision::roi_align", _roi_align_grad, setup_context=_roi_align_setup
    )
    _state["libs"] = [lib, impl]  # a Library deregisters its ops when collected


def _unavailable(name: str) -> Any:
    def kernel(*args: Any) -> Any:
        raise NotImplementedError(
            f"torchvision::{name} has no CPU kernel here: torchvision's compiled ops do not "
            "load beside this torch build (see geofl.models.detection.tvops); install a "
            "torch/torchvision pair built together to use it"
        )

    return kernel


def _roi_align_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    inp, rois, scale, ph, pw, ratio, aligned = inputs
    ctx.save_for_backward(rois)
    ctx.args = (tuple(inp.shape), scale, ph, pw, ratio, aligned)


def _roi_align_grad(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
    (rois,) = ctx.saved_tensors
    (b, c, h, w), scale, ph, pw, ratio, aligned = ctx.args
    grad_input = torch.ops.torchvision._roi_align_backward(
        grad_output.contiguous(), rois, scale, ph, pw, b, c, h, w, ratio, aligned
    )
    return grad_input, None, None, None, None, None, None
