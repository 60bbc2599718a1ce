"""A load-time estimate of a run's host memory, so that sizes that cannot fit are refused
with one line instead of a MemoryError traceback minutes into the run.

The estimate is a lower bound of the largest terms only:

* the dataset's float32 tensors, ``num_samples × channels × size² × 4 B`` (datasets whose
  parameters have ``num_samples``/``size``; ``num_samples × 8 × 4 B`` without ``size``,
  tabular rows; ``data.cache: mmap`` keeps them on disk and is not counted), channels
  being the selected bands (``all``: 13, Sentinel-2's);
* the model's parameters, ``P × 4 B``, times the copies a round holds at once: the global
  model, the client workspace, its gradients and optimizer state, and the round's stacked
  updates (``K × D``, K the updates a round trains).

``P`` comes from building the model on PyTorch's ``meta`` device (no storage, no
arithmetic), so a width of 100 000 is counted in milliseconds; a model whose construction
needs real storage (ResNet's data-dependent initialisation, pretrained weights) is not
estimated (P = 0) — the run builds it for real.

The limit is the memory available now (``MemAvailable`` of ``/proc/meminfo``; physical
memory where that is missing), or ``GEOFL_MEMORY_LIMIT`` (bytes, or with a K/M/G/T suffix:
``64G``; ``none`` turns the check off, e.g. to validate on a laptop a config meant for a
larger machine).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from geofl.config.schema import ExperimentConfig
from geofl.config.validate import clients_per_round
from geofl.errors import ConfigError

__all__ = ["ENV_LIMIT", "MemoryEstimate", "check_memory", "estimate_memory", "memory_limit"]

#: Environment variable overriding the memory limit (bytes with an optional K/M/G/T suffix,
#: or ``none``).
ENV_LIMIT = "GEOFL_MEMORY_LIMIT"
#: Bands of ``data.bands: all``: Sentinel-2's 13, the most the image datasets have but
#: SEN12MS's 15 (an estimate that is 13 % low there is still the right order).
_ALL_BANDS = 13
#: Values per row counted for a dataset without ``size`` (tabular): a lower bound, the
#: synthetic tabular datasets have more features.
_TABULAR_VALUES = 8
#: Bands of ``data.bands: rgb``.
_RGB_BANDS = 3
#: Model-sized copies besides the round's updates: global model, workspace, gradients,
#: optimizer state (momentum).
_MODEL_COPIES = 4
_FLOAT = 4
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of a run's largest tensors.

    Attributes:
        data: The dataset's float32 tensors (0 when not estimated or memory-mapped).
        model: Model-sized copies and the round's stacked updates (0 when not estimated).
        parameters: The model's parameter count P (0 when not estimated).
        updates: K, the updates a round stacks.
    """

    data: int
    model: int
    parameters: int
    updates: int

    @property
    def total(self) -> int:
        """Bytes in all."""
        return self.data + self.model


def _channels(cfg: ExperimentConfig) -> int:
    bands = cfg.data.bands
    if isinstance(bands, list):
        return len(bands)
    return _RGB_BANDS if bands == "rgb" else _ALL_BANDS


def _data_bytes(cfg: ExperimentConfig) -> int:
    """``num_samples × channels × size² × 4`` from the validated dataset parameters."""
    from geofl import plugins

    if cfg.data.cache == "mmap" or cfg.data.sites is not None:
        return 0
    params = plugins.DATASETS.validate(cfg.data.dataset, cfg.data.params, path="data.params")
    n, size = getattr(params, "num_samples", None), getattr(params, "size", None)
    if not isinstance(n, int):
        return 0
    if not isinstance(size, int):  # tabular rows
        return n * _TABULAR_VALUES * _FLOAT
    return n * _channels(cfg) * size * size * _FLOAT


def _parameter_count(cfg: ExperimentConfig) -> int:
    """P of the configured model, built on the ``meta`` device (0 if it cannot be)."""
    import torch

    from geofl import plugins
    from geofl.rng import torch_generator

    try:
        with torch.device("meta"):
            model = plugins.MODELS.build(
                cfg.model.name,
                cfg.model.params,
                in_channels=_channels(cfg),
                num_classes=10,
                generator=torch_generator(0, "model_init"),
            )
    except Exception:  # a model that needs real storage (pretrained weights, data-
        return 0  # dependent initialisation) is not estimated; the run builds it
    return sum(p.numel() for p in model.parameters())


def estimate_memory(cfg: ExperimentConfig) -> MemoryEstimate:
    """The run's largest tensors in bytes (see the module docstring for the terms)."""
    p = _parameter_count(cfg)
    k = clients_per_round(cfg) or cfg.federation.num_clients
    return MemoryEstimate(_data_bytes(cfg), p * _FLOAT * (_MODEL_COPIES + k), p, k)


def memory_limit() -> int | None:
    """Bytes a run may use: ``$GEOFL_MEMORY_LIMIT``, else the memory available now.

    Returns:
        None when the check is off (``GEOFL_MEMORY_LIMIT=none``) or nothing can be read.

    Raises:
        ConfigError: naming ``GEOFL_MEMORY_LIMIT`` when it cannot be read.
    """
    text = os.environ.get(ENV_LIMIT, "").strip()
    if text:
        if text.lower() == "none":
            return None
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", text, flags=re.IGNORECASE)
        if m is None:
            raise ConfigError(ENV_LIMIT, f"{text!r} is not a size; write e.g. 64G, or none")
        return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    return _available()


def _available() -> int | None:
    """``MemAvailable`` (Linux), else physical memory (``os.sysconf``), else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: int) -> str:
    """``1,234.5 GiB``, or MiB below one GiB."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def check_memory(cfg: ExperimentConfig) -> None:
    """Refuse a config whose estimated memory exceeds :func:`memory_limit` (one line
    naming the larger term's field, the estimate and the limit).

    Raises:
        ConfigError: naming ``data.params`` or ``model.params``.
    """
    limit = memory_limit()
    if limit is None:
        return
    est = estimate_memory(cfg)
    if est.total <= limit:
        return
    where = f"(set {ENV_LIMIT} to override)"
    if est.data >= est.model:
        raise ConfigError(
            "data.params",
            f"the dataset needs about {_gib(est.data)} (num_samples × {_channels(cfg)} bands × "
            f"size² × 4 B) plus {_gib(est.model)} for the model, over the {_gib(limit)} "
            f"available; lower num_samples or size {where}",
        )
    copies = f"global, workspace, gradients, optimizer and {est.updates} stacked updates"
    raise ConfigError(
        "model.params",
        f"the model's {est.parameters:,} parameters need about {_gib(est.model)} ({copies}) "
        f"plus {_gib(est.data)} of data, over the {_gib(limit)} available; make the model "
        f"smaller (e.g. width) {where}",
    )
