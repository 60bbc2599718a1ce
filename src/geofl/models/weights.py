"""Initial weights from a local file, mapped onto a freshly built model.

Meant for torchvision-layout networks (``resnet18``): torchvision's and timm's ImageNet
files, torchgeo's Sentinel-2 ResNet-18 weights (13-band ``conv1``), or a geofl model's own
``state_dict()``. Nothing is downloaded; the file is read with ``torch.load(...,
weights_only=True)``, which never runs pickled code.

Mapping rules (:func:`load_weights`):

1. **Container.** A plain state dict (name → tensor), or a checkpoint holding one under
   ``state_dict`` or ``model`` (nested up to three deep: Lightning, torchgeo and
   classification-reference checkpoints). Anything else is refused.
2. **Prefixes.** Leading ``module.`` (DataParallel/DDP), ``backbone.``, ``encoder.`` and
   ``model.`` (Lightning task wrappers) are stripped, repeatedly, from every name.
3. **Normalisation.** BatchNorm ``weight``/``bias`` go onto whatever norm layer the model has
   under the same name (GroupNorm's affine parameters have the same ``[C]`` shape);
   BatchNorm running statistics (``running_mean``, ``running_var``, ``num_batches_tracked``)
   are ignored when the model's layer has none (GroupNorm normalises each sample with its
   own statistics, so they have no use). A BatchNorm model takes them as they are.
4. **Stem.** ``conv1.weight`` must have the model's band count and kernel size: a different
   band count (e.g. 13-band Sentinel-2 weights on RGB data) or kernel (7×7 file, 3×3
   ``small_input_stem``) is refused with one line saying which setting to change. No bands
   are invented or averaged.
5. **Head.** ``fc.weight``/``fc.bias`` of another class count (1000 ImageNet classes) are
   dropped: the model keeps its freshly, seeded, initialised ``fc``. The same count loads.
6. **Everything else** must match in shape; a mismatch names the tensor (the file is then not
   a ResNet-18). Model tensors the file lacks keep their initial values and file tensors the
   model lacks are dropped; both are counted and named (first few) in one log line.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geofl.errors import ConfigError

__all__ = ["WeightsReport", "check_weights_file", "load_weights", "read_state_dict"]

log = logging.getLogger("geofl")

#: Prefixes stripped from every name (rule 2).
PREFIXES = ("module.", "backbone.", "encoder.", "model.")
#: Containers looked into for the state dict (rule 1).
CONTAINER_KEYS = ("state_dict", "model")
_RUNNING_STATS = ("running_mean", "running_var", "num_batches_tracked")


@dataclass(frozen=True)
class WeightsReport:
    """What :func:`load_weights` did.

    Attributes:
        path: The file.
        loaded: Names of the model's tensors taken from the file.
        head_dropped: Whether the file's ``fc`` was dropped (another class count).
        ignored_stats: File BatchNorm running statistics the model has no place for.
        missing: Model tensors the file lacks (they keep their initial values).
        unexpected: File tensors the model lacks (dropped).
    """

    path: Path
    loaded: tuple[str, ...]
    head_dropped: bool
    ignored_stats: tuple[str, ...]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]

    def line(self) -> str:
        """The one-line summary that :func:`load_weights` logs."""
        parts = [f"weights {self.path}: loaded {len(self.loaded)} tensors"]
        if self.head_dropped:
            parts.append("fc kept from init (other class count)")
        if self.ignored_stats:
            parts.append(f"ignored {len(self.ignored_stats)} BatchNorm running statistics")
        parts.append(f"missing {_names(self.missing)}")
        parts.append(f"unexpected {_names(self.unexpected)}")
        return "; ".join(parts)


def _names(names: tuple[str, ...], shown: int = 4) -> str:
    if not names:
        return "none"
    more = f", … (+{len(names) - shown})" if len(names) > shown else ""
    return f"{len(names)} ({', '.join(names[:shown])}{more})"


def read_state_dict(path: Path, *, field: str = "") -> dict[str, torch.Tensor]:
    """The state dict in ``path`` (rules 1 and 2), tensors on CPU.

    Args:
        path: A file written by ``torch.save``.
        field: Config path named in errors (``model.params.weights``).

    Raises:
        ConfigError: The file cannot be read, is not a ``torch.save`` file of tensors, or
            holds no state dict.
    """
    try:
        with warnings.catch_warnings():  # torch warns about plain pickles before refusing
            warnings.simplefilter("ignore", UserWarning)
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise ConfigError(field, f"cannot read {path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # torch.load raises many types for a file it cannot parse
        first = (str(exc).strip().splitlines() or [""])[0][:120]
        raise ConfigError(
            field,
            f"{path} is not a checkpoint of tensors ({type(exc).__name__}: {first}); "
            "save the weights with torch.save(model.state_dict(), path)",
        ) from exc
    state = _unwrap(obj)
    if state is None:
        keys = ", ".join(map(str, list(obj)[:5])) if isinstance(obj, Mapping) else ""
        raise ConfigError(
            field,
            f"{path} holds no state dict ({type(obj).__name__}"
            f"{' with keys ' + keys if keys else ''}); "
            "give a name → tensor dict, or a checkpoint with one under 'state_dict' or 'model'",
        )
    return {_strip(k): v for k, v in state.items()}


def check_weights_file(value: str | None) -> str | None:
    """A ``weights`` field's validation at config load: the file exists and holds a state
    dict (shapes are checked when the model is built).

    Raises:
        ValueError: naming the missing file (pydantic reports it under the field).
        ConfigError: the file holds no state dict (:func:`read_state_dict`).
    """
    if value is None:
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(f"no file {value!r}; give the path of a state dict saved with torch.save")
    read_state_dict(path)
    return value


def _unwrap(obj: Any) -> dict[str, torch.Tensor] | None:
    """The name → tensor mapping in ``obj`` (itself, or under a container key)."""
    for _ in range(4):
        if not isinstance(obj, Mapping) or not obj:
            return None
        if all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
            return dict(obj)
        inner = next((obj[k] for k in CONTAINER_KEYS if k in obj), None)
        if inner is None:
            return None
        obj = inner
    return None


def _strip(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix) :], True
    return name


def load_weights(
    model: nn.Module,
    path: Path,
    *,
    field: str = "",
    stem: str = "conv1.weight",
    head: str = "fc",
    layout: str = "torchvision-layout ResNet-18",
) -> WeightsReport:
    """Load ``path`` into ``model`` by the module's mapping rules; log one summary line.

    Args:
        model: A freshly initialised model in torchvision's layout.
        path: The weights file.
        field: Config path named in errors (``model.params.weights``).
        stem: Name of the first convolution's weight (``[64, bands, k, k]``).
        head: Name of the classifier layer (``fc``: ``weight [classes, 512]``, ``bias``);
            for a detector, the prefix of its class-count-dependent layers.
        layout: What the file should hold, named in errors.

    Returns:
        What was loaded, dropped and missing.

    Raises:
        ConfigError: Unreadable file, no state dict, a stem of another band count or
            kernel, a tensor of another shape, or no tensor of the file matching the model.
    """
    source = read_state_dict(path, field=field)
    target = model.state_dict()
    take, ignored, unexpected, head_dropped, wrong = _match(source, target, head)
    if wrong:  # the first tensor of a wrong shape, in file order
        got, want = tuple(source[wrong[0]].shape), tuple(target[wrong[0]].shape)
        _shape_error(wrong[0], got, want, path, field, stem, layout)
    if not take:
        raise ConfigError(
            field,
            f"no tensor of {path} matches the model (file names: "
            f"{', '.join(list(source)[:3])}, …); give {layout} weights",
        )
    missing = [n for n in target if n not in take and not (head_dropped and n.startswith(head))]
    with torch.no_grad():
        for name, tensor in take.items():
            target[name].copy_(tensor.to(target[name].dtype))
    report = WeightsReport(
        path, tuple(take), head_dropped, tuple(ignored), tuple(missing), tuple(unexpected)
    )
    (log.warning if missing or unexpected else log.info)(report.line())
    return report


def _match(
    source: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor], head: str
) -> tuple[dict[str, torch.Tensor], list[str], list[str], bool, list[str]]:
    """Sort the file's tensors: ``(take, ignored, unexpected, head_dropped, wrong)`` —
    tensors whose name and shape match, running statistics the model has no use for, names
    the model lacks, whether a head tensor of another shape was dropped, and the names of
    the other tensors of a wrong shape (file order; the caller raises)."""
    take: dict[str, torch.Tensor] = {}
    ignored: list[str] = []
    unexpected: list[str] = []
    wrong: list[str] = []
    head_dropped = False
    for name, tensor in source.items():
        if name not in target:
            owner, _, leaf = name.rpartition(".")
            if leaf in _RUNNING_STATS and f"{owner}.weight" in target:
                ignored.append(name)
            else:
                unexpected.append(name)
        elif tensor.shape == target[name].shape:
            take[name] = tensor
        elif name.startswith(f"{head}."):
            head_dropped = True
        else:
            wrong.append(name)
    return take, ignored, unexpected, head_dropped, wrong


def _shape_error(
    name: str,
    got: tuple[int, ...],
    want: tuple[int, ...],
    path: Path,
    field: str,
    stem: str,
    layout: str,
) -> None:
    """Raise the one-line error for a tensor of the wrong shape."""
    if name == stem and len(got) == len(want) == 4:
        if got[2:] != want[2:]:
            hint = "false" if got[2] > want[2] else "true"
            raise ConfigError(
                field,
                f"{path}: {name} is a {got[2]}×{got[3]} stem but the model's is "
                f"{want[2]}×{want[3]}; set model.params.small_input_stem: {hint}",
            )
        if got[1] != want[1]:
            raise ConfigError(
                field,
                f"{path}: {name} takes {got[1]} bands but the data has {want[1]}; select "
                f"{got[1]} bands in data.bands (in the order the weights were trained on)",
            )
    raise ConfigError(
        field,
        f"{path}: {name} has shape {list(got)} but the model's is {list(want)}; "
        f"the file is not a {layout} of this configuration",
    )
