"""Typed experiment configuration (pydantic), validated at load time.

An experiment is a set of *methods* (each a choice of partitioner, trainer, release steps,
weighting and aggregator) run over the same data, model and training budget for several
seeds. Plug-ins are named by registry key with their parameters inline::

    partition: {name: dirichlet, alpha: 0.1, min_samples: 10}

Unknown keys, wrong types and impossible values fail at load time with the field path
(``methods.2.partition.alpha: Input should be greater than 0``).

The section models live with the part of a run they configure (:mod:`geofl.config.dataset`,
:mod:`~geofl.config.training`, :mod:`~geofl.config.evaluation`, :mod:`~geofl.config.method`,
:mod:`~geofl.config.reporting`; shared bases in :mod:`~geofl.config.base`) and are
re-exported here, the config's one public import point.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from geofl.config.base import MAX_COUNT, Component, _Strict
from geofl.config.dataset import DataConfig, SiteDataConfig, SplitConfig
from geofl.config.evaluation import EarlyStoppingConfig, EvalConfig, TargetConfig
from geofl.config.method import MethodConfig
from geofl.config.reporting import FigureSpec, PaperValue, TrackingConfig
from geofl.config.training import FederationConfig, ModelConfig, PrivacyConfig, TrainConfig
from geofl.device import DeviceChoice
from geofl.errors import ConfigError
from geofl.registry import printable

__all__ = [
    "DEFAULT_TASK",
    "MAX_COUNT",
    "Component",
    "DataConfig",
    "EarlyStoppingConfig",
    "EvalConfig",
    "ExperimentConfig",
    "FederationConfig",
    "FigureSpec",
    "MethodConfig",
    "ModelConfig",
    "PaperValue",
    "PrivacyConfig",
    "SiteDataConfig",
    "SplitConfig",
    "TargetConfig",
    "TrackingConfig",
    "TrainConfig",
]


#: Longest experiment name (the run directory adds a time stamp; file names stop at 255).
MAX_NAME = 128
#: An experiment name: a single path component that cannot be ``.`` or ``..``.
_SAFE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.+-]{{0,{MAX_NAME - 1}}}")

#: The task a config without a ``task`` section runs (paper 000's single-label setting).
DEFAULT_TASK = "classification"


class ExperimentConfig(_Strict):
    """A whole experiment: data, model, training budget, methods and seeds."""

    name: str = Field(
        ...,
        description="the experiment's name: the default run directory is runs/NAME-TIME, so "
        "it is a name, not a path (letters, digits and _ . + -, first a letter or digit)",
    )
    description: str = ""
    seeds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    task: Component = Field(
        default_factory=lambda: Component(name=DEFAULT_TASK),
        description="learning task: classification (default), multilabel, regression, ...",
    )
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    federation: FederationConfig = Field(default_factory=FederationConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    governance: dict[str, Any] | None = Field(
        None,
        description="on-chain governance layer (000 §3.5); absent = off. Validated and "
        "completed with defaults by the governance plug-in at load time",
    )
    tracking: TrackingConfig | None = Field(
        None, description="export to MLflow and/or TensorBoard; absent = off"
    )
    device: DeviceChoice | None = Field(
        None,
        description="where local training and evaluation run: cpu, cuda, or auto (cuda "
        "when this machine has one). Updates, aggregation and the uplink stay on CPU. "
        "Absent: cpu, so a config gives the same metrics on every machine",
    )
    methods: list[MethodConfig] = Field(..., min_length=1)
    analyses: list[Component] = Field(
        default_factory=list, description="post-run analyses, e.g. attribute_inference"
    )
    paper: dict[str, PaperValue] = Field(default_factory=dict)
    figures: list[FigureSpec] = Field(default_factory=list, description="paper figures")
    compare_to: str | None = Field(
        None,
        description="method every other one is compared with by paired t-tests over the "
        "seeds both finished (004 Table 3: Δ, d_z, 95 % CI, raw and Holm p); absent: none",
    )

    @model_serializer(mode="wrap")
    def _omit_default_task(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the default task (plain classification) out of the dump.

        The resolved config (``config.yaml``, governance's committed rule) of every
        classification run stays byte-identical to what it was before tasks existed, so run
        directories written then resume against today's configs and hash the same.
        """
        out: dict[str, Any] = handler(self)
        if self.task.name == DEFAULT_TASK and not self.task.params:
            out.pop("task", None)
        if self.compare_to is None:  # likewise for configs without paired statistics
            out.pop("compare_to", None)
        if self.tracking is None:  # and without tracking
            out.pop("tracking", None)
        if self.device is None:  # and without a device
            out.pop("device", None)
        return out

    @field_validator("name")
    @classmethod
    def _name_not_path(cls, v: str) -> str:
        """Refuse a name that would place the default run directory outside ``runs/``
        (``../../x``, ``/abs/x``) or that no file system takes (issue 31 item 11)."""
        if not _SAFE_NAME.fullmatch(v):
            raise ValueError(
                f"{printable(v)!r} is not a plain name: use 1-{MAX_NAME} letters, digits and "
                "_ . + -, starting with a letter or digit (no '/', no '..'); choose the "
                "directory with --out"
            )
        return v

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"seeds must be distinct, got {v}")
        return v

    @model_validator(mode="after")
    def _known_methods(self) -> ExperimentConfig:
        """Method names are unique; ``paper``, ``figures`` and ``compare_to`` name only
        those methods.

        Raises ConfigError with the offending field's path (``methods.3.name``,
        ``paper.<name>``, ``figures.0.methods.1``, ``compare_to``), which
        format_validation_error keeps.
        """
        first: dict[str, int] = {}
        for i, m in enumerate(self.methods):
            if m.name in first:
                raise ConfigError(
                    f"methods.{i}.name",
                    f"{m.name!r} is already the name of methods.{first[m.name]}; "
                    "method names must be unique",
                )
            first[m.name] = i
        choices = ", ".join(first)
        for key in self.paper:
            if key not in first:
                raise ConfigError(
                    f"paper.{printable(key)}", f"no method is named {key!r}; use one of: {choices}"
                )
        if self.compare_to is not None and self.compare_to not in first:
            raise ConfigError(
                "compare_to", f"no method is named {self.compare_to!r}; use one of: {choices}"
            )
        for i, fig in enumerate(self.figures):
            for j, name in enumerate(fig.methods):
                if name not in first:
                    raise ConfigError(
                        f"figures.{i}.methods.{j}",
                        f"no method is named {name!r}; use one of: {choices}",
                    )
        return self
