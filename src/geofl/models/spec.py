"""``model.json``: what using a trained model outside its run needs, next to its weights.

Each ``methods/<method>/seed-<seed>/`` directory holds, beside ``best.pt`` and
``checkpoint.pt``, a ``model.json`` written (atomically) when the seed starts::

    {
      "format": 1,
      "geofl_version": "0.1.0",
      "method": "fedavg", "seed": 1,
      "model": {"name": "small_cnn", "params": {...}, "in_channels": 13, "num_outputs": 10},
      "task": {"name": "classification", "params": {}, "state": {}},
      "classes": ["AnnualCrop", ...],
      "input": {
        "dataset": "synthetic", "format": "uint16_bands", "scale": 10000.0,
        "dataset_bands": ["B01", ..., "B12"], "bands": ["B04", "B03", "B02"],
        "patch_size": [64, 64]
      },
      "normalization": {"kind": "standardize", "mean": [...], "std": [...]}
    }

* ``model`` rebuilds the network from the model registry (``in_channels`` and
  ``num_outputs`` as the run built it); the weights come from ``best.pt`` or
  ``checkpoint.pt``.
* ``task`` is the config's ``task`` (``classification`` when the config has none) and the
  statistics the task fitted on the train split (``state``, e.g. a regression task's target
  mean and std), so outputs can be turned into predictions in target units.
* ``input`` says what raw inputs look like: the dataset's bands in file order
  (``dataset_bands``; the feature names of tabular data), the bands the model was trained on
  in channel order (``bands``), the patch size (``null`` for tabular ``[N, F]`` inputs),
  and the file format (:mod:`geofl.data.readers.formats`) and scale that turn a file
  into the reflectance-like floats the dataset holds (``null`` for datasets without files).
* ``normalization`` holds the exact float32 per-band mean and std (of the trained bands,
  train split of this seed) subtracted from and divided into the inputs at training time;
  ``{"kind": "none"}`` when the config did not normalise.

Readers accept extra keys (later versions may add some) and refuse a missing or ill-typed
field with a one-line :class:`~geofl.errors.RunDirError` naming the file and field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from geofl.errors import RunDirError
from geofl.io import write_json_atomic
from geofl.registry import format_validation_error

__all__ = [
    "MODEL_SPEC_FILE",
    "SPEC_FORMAT",
    "InputSpec",
    "ModelPart",
    "ModelSpec",
    "NormalizationSpec",
    "TaskSpec",
    "read_model_spec",
    "write_model_spec",
]

#: File name of the spec inside a seed directory.
MODEL_SPEC_FILE = "model.json"
#: Layout version of ``model.json``.
SPEC_FORMAT = 1


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ModelPart(_Part):
    """The network: registry key, parameters and the input/output widths it was built with."""

    name: str = Field(..., min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    in_channels: int = Field(..., ge=1)
    num_outputs: int = Field(..., ge=1)


class TaskSpec(_Part):
    """The learning task: the config's name and parameters, and statistics fitted on train."""

    name: str = "classification"
    params: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)


class InputSpec(_Part):
    """What raw inputs look like and how files become them."""

    dataset: str
    format: str | None = None
    scale: float | None = Field(None, gt=0)
    dataset_bands: tuple[str, ...] = Field(..., min_length=1)
    bands: tuple[str, ...] = Field(..., min_length=1)
    patch_size: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _bands_known(self) -> InputSpec:
        missing = [b for b in self.bands if b not in self.dataset_bands]
        if missing:
            raise ValueError(f"bands {missing} are not among dataset_bands")
        return self

    @property
    def band_index(self) -> tuple[int, ...]:
        """Channel of each trained band in the dataset's band order."""
        return tuple(self.dataset_bands.index(b) for b in self.bands)


class NormalizationSpec(_Part):
    """Per-band standardisation applied at training time (``kind: none``: nothing)."""

    kind: Literal["standardize", "none"]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @model_validator(mode="after")
    def _stats_present(self) -> NormalizationSpec:
        if self.kind == "standardize" and (self.mean is None or self.std is None):
            raise ValueError("standardize needs mean and std")
        if self.mean is not None and self.std is not None and len(self.mean) != len(self.std):
            raise ValueError(f"{len(self.mean)} means but {len(self.std)} stds")
        if self.std is not None and min(self.std) <= 0:
            raise ValueError("std must be positive")
        return self


class ModelSpec(_Part):
    """The whole ``model.json`` (see the module docstring)."""

    format: int = SPEC_FORMAT
    geofl_version: str
    method: str
    seed: int
    model: ModelPart
    task: TaskSpec = Field(default_factory=TaskSpec)
    classes: tuple[str, ...]
    input: InputSpec
    normalization: NormalizationSpec

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        nb = len(self.input.bands)
        if self.model.in_channels != nb:
            raise ValueError(f"model.in_channels is {self.model.in_channels} but {nb} bands")
        for name in ("mean", "std"):
            stats = getattr(self.normalization, name)
            if stats is not None and len(stats) != nb:
                raise ValueError(f"normalization.{name} has {len(stats)} values for {nb} bands")
        return self


def write_model_spec(path: Path, spec: ModelSpec) -> Path:
    """Write ``spec`` to ``path`` atomically (strict JSON)."""
    return write_json_atomic(path, spec.model_dump(mode="json"))


def read_model_spec(path: Path) -> ModelSpec:
    """Read and check a ``model.json``.

    Raises:
        RunDirError: naming the file (and the field) when it is unreadable or invalid.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunDirError(
            f"{path} cannot be read ({type(err).__name__}); restore it from a copy of the run "
            "directory or rerun the seed"
        ) from None
    if not isinstance(raw, dict):
        raise RunDirError(f"{path} is not a JSON object; restore it or rerun the seed")
    version = raw.get("format", SPEC_FORMAT)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RunDirError(f"{path}: format: expected an integer; restore it or rerun the seed")
    if version > SPEC_FORMAT:
        raise RunDirError(
            f"{path} has format {raw['format']}, newer than this geofl reads ({SPEC_FORMAT}); "
            "upgrade geofl"
        )
    try:
        return ModelSpec.model_validate(raw)
    except ValidationError as err:
        bad = format_validation_error(err)
        raise RunDirError(
            f"{path}: {bad}; the file is damaged: restore it or rerun the seed"
        ) from None
