"""Checks that a config's model and release steps can take the dataset's inputs, made
before anything is written (one-line :class:`~geofl.errors.ConfigError` naming the field)."""

from __future__ import annotations

from geofl.client.release import RELEASE_STEPS
from geofl.client.spatial import red_nir_indices
from geofl.config.schema import ExperimentConfig
from geofl.data.base import ArrayDataset
from geofl.errors import ConfigError
from geofl.models.base import MODELS

__all__ = ["IMAGE_MODEL", "TABULAR_MODEL", "check_model_inputs", "check_release_inputs"]

#: Model traits naming the inputs a model family takes.
IMAGE_MODEL, TABULAR_MODEL = "images", "tabular"


def check_release_inputs(cfg: ExperimentConfig, ds: ArrayDataset) -> None:
    """Refuse a release step that needs red/NIR bands (trait ``needs_red_nir``, e.g.
    ``spatial_alpha``, 001 Eq. 10) on a dataset without them.

    Raises:
        ConfigError: naming ``methods.<i>.release.<j>.name``.
    """
    if red_nir_indices(ds.bands) is not None:
        return
    for i, method in enumerate(cfg.methods):
        for j, step in enumerate(method.release):
            if "needs_red_nir" in RELEASE_STEPS.traits(step.name):
                raise ConfigError(
                    f"methods.{i}.release.{j}.name",
                    f"{step.name} needs red (B04) and NIR (B08 or B8A) bands for NDVI, but "
                    f"dataset {ds.name!r} has {list(ds.bands)}",
                )


def check_model_inputs(cfg: ExperimentConfig, ds: ArrayDataset) -> None:
    """Refuse a model family that cannot take the dataset's inputs.

    Model registrations state their inputs as a trait (``images`` for ``[N, C, H, W]``,
    ``tabular`` for ``[N, F]``); a model stating neither is not checked.

    Raises:
        ConfigError: naming ``model.name``: tabular features with an image model (a CNN),
            or images with a tabular model (an MLP).
    """
    traits = MODELS.traits(cfg.model.name)
    shape = "x".join(str(s) for s in ds.inputs.shape)
    if ds.inputs.ndim == 2 and IMAGE_MODEL in traits:
        raise ConfigError(
            "model.name",
            f"{cfg.model.name} takes images [N, C, H, W], but dataset {ds.name!r} holds "
            f"tabular features [{shape}]; use a tabular model such as model: {{name: mlp}}",
        )
    if ds.inputs.ndim == 4 and TABULAR_MODEL in traits:
        raise ConfigError(
            "model.name",
            f"{cfg.model.name} takes tabular features [N, F], but dataset {ds.name!r} holds "
            f"images [{shape}]; use an image model such as small_cnn or resnet18",
        )
