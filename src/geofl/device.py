"""Where a run's tensors live: ``device: auto | cpu | cuda``.

Training (the local steps of the non-private trainers) and evaluation run on the chosen
device; everything that crosses a module boundary — the global model, client updates, the
uplink's payloads, the strategies' stacked cohort — stays a CPU tensor. That keeps the
exact CPU kernels of the server side (order statistics, the numba per-sample gradients of
DP-SGD) and every byte count the same on every machine, and it means a run on CPU is
bit-for-bit the run it was before devices existed.

``cpu`` is the default, not ``auto``: a config then gives the same metrics on every machine
(GPU kernels reduce in another order, so their floats differ in the last bits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import torch

from geofl.errors import ConfigError

__all__ = [
    "CPU",
    "DeviceChoice",
    "check_device",
    "like",
    "module_device",
    "resolve_device",
    "to_device",
]

DeviceChoice = Literal["auto", "cpu", "cuda"]

#: Where tensors that cross module boundaries live (updates, metrics' inputs).
CPU = torch.device("cpu")

T = TypeVar("T")


def resolve_device(choice: DeviceChoice | None) -> torch.device:
    """The device of ``choice``: ``auto`` is CUDA when this machine has one, else CPU.

    Raises:
        ConfigError: ``cuda`` on a machine without a CUDA device.
    """
    if choice in (None, "cpu"):
        return torch.device("cpu")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        raise ConfigError(
            "device",
            f"cuda, but this torch ({torch.__version__}) sees no CUDA device; "
            "use device: auto or cpu",
        )
    return torch.device("cuda")


def check_device(
    choice: DeviceChoice | None,
    *,
    trainers: list[str],
    workers: int | None,
    batched: bool = False,
) -> None:
    """Refuse what a run on ``choice`` cannot do, before anything is written (one line each).

    Args:
        choice: The config's ``device``.
        trainers: The methods' local trainers other than plain ``local_sgd``: DP-SGD's
            per-sample gradient kernels (and any plug-in trainer) are CPU code.
        workers: ``federation.workers``: a CUDA context does not survive the worker pool's
            fork, and one process should own the GPU.
        batched: ``federation.batch_clients: auto``: the batched client step
            (:mod:`geofl.client.batched`) stacks its cohort on CPU.
    """
    device = resolve_device(choice)
    if device.type == "cpu":
        return
    if trainers:
        raise ConfigError(
            "device",
            f"{choice}: trainer {trainers[0]} runs on CPU only (only local_sgd trains on "
            f"{device.type}); use device: cpu",
        )
    if batched:
        raise ConfigError(
            "federation.batch_clients",
            f"auto with device {device.type}: the batched client step runs on CPU; "
            "use batch_clients: off or device: cpu",
        )
    if workers is not None and workers > 1:
        raise ConfigError(
            "federation.workers",
            f"{workers} with device {device.type}: one process drives the GPU; "
            "use federation.workers: 1",
        )


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of ``module``'s first parameter or buffer (CPU for an empty module)."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def like(tensor: torch.Tensor | None, other: torch.Tensor) -> torch.Tensor | None:
    """``tensor`` on ``other``'s device (a task's fixed loss weights beside its outputs)."""
    return None if tensor is None else tensor.to(other.device)


def to_device(obj: T, device: torch.device) -> T:
    """``obj`` (a tensor, or a dict/list/tuple of them, e.g. detection targets) on ``device``.

    A tensor already on ``device`` is returned as is. Copies are asynchronous from pinned
    memory only: batches are gathered by index into fresh tensors, so pinning one would be
    one more copy on the same thread, not an overlap.
    """
    return _move(obj, device)  # type: ignore[no-any-return]


def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        if obj.device == device:
            return obj
        return obj.to(device, non_blocking=obj.is_pinned())
    if isinstance(obj, Mapping):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_move(v, device) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_move(v, device) for v in obj)
    return obj
