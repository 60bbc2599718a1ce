"""What a seed directory records for inference: the :class:`~geofl.models.spec.ModelSpec`.

The spec is written next to ``partition.json`` when a seed starts (and rewritten, with the
same content, when it resumes), so every model file the run writes in that directory
(``best.pt``, ``checkpoint.pt``) can be used outside the run by
:func:`geofl.inference.load_model`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from geofl import __version__
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.data.readers.formats import FILE_FORMATS, file_format_of
from geofl.engine.components import PreparedData, build_task, model_dims
from geofl.models.spec import InputSpec, ModelPart, ModelSpec, NormalizationSpec, TaskSpec
from geofl.tasks.base import Task

__all__ = ["model_spec"]


def _floats(stat: torch.Tensor | None) -> tuple[float, ...] | None:
    """The float32 values of a per-band statistic (exact in JSON's doubles)."""
    return None if stat is None else tuple(float(v) for v in stat.reshape(-1).tolist())


def _task(cfg: ExperimentConfig, task: Task) -> TaskSpec:
    """The config's task (name, parameters) and what it fitted on the train split (the val
    split for a DP method: :attr:`~geofl.engine.components.PreparedData.stats_from`)."""
    return TaskSpec(name=cfg.task.name, params=dict(cfg.task.params), state=task.fitted_state())


def model_spec(
    cfg: ExperimentConfig,
    method: MethodConfig,
    seed: int,
    data: PreparedData,
    dataset_bands: Sequence[str],
) -> ModelSpec:
    """The inference spec of one (method, seed) run.

    Args:
        cfg: The experiment.
        method: The method being run.
        seed: Its seed.
        data: The seed's normalised split (its statistics are the ones recorded).
        dataset_bands: The dataset's bands before ``data.bands`` selected some.
    """
    fitted_on = data.val if data.stats_from == "val" else data.train  # as the run's task
    task = build_task(cfg, fitted_on.num_classes, fitted_on.targets)
    in_channels, num_outputs = model_dims(data, task)
    fmt = file_format_of(cfg.data.dataset)
    train = data.train
    mean, std = _floats(data.mean), _floats(data.std)
    return ModelSpec(
        geofl_version=__version__,
        method=method.name,
        seed=seed,
        model=ModelPart(
            name=cfg.model.name,
            params=dict(cfg.model.params),
            in_channels=in_channels,
            num_outputs=num_outputs,
        ),
        task=_task(cfg, task),
        classes=tuple(train.classes),
        input=InputSpec(
            dataset=cfg.data.dataset,
            format=fmt,
            scale=FILE_FORMATS[fmt].scale if fmt is not None else None,
            dataset_bands=tuple(dataset_bands),
            bands=tuple(train.bands),
            patch_size=tuple(train.inputs.shape[2:4]) if train.inputs.ndim == 4 else None,
        ),
        normalization=NormalizationSpec(
            kind="none" if mean is None else "standardize", mean=mean, std=std
        ),
    )
