"""The ``data`` section: which dataset, its bands, split and normalisation, and site-local
data (``data.sites``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from geofl.config.base import MAX_COUNT, _OmitUnset, _Strict
from geofl.errors import ConfigError

__all__ = ["DataConfig", "SiteDataConfig", "SplitConfig"]


class SplitConfig(_Strict):
    """Fractions of the whole dataset held out for validation and test (000 §4.1.1)."""

    val: float = Field(0.1, ge=0.0, lt=1.0, description="validation fraction")
    test: float = Field(0.2, gt=0.0, lt=1.0, description="test fraction")
    group: str | None = Field(
        None,
        min_length=1,
        description="metadata key whose groups stay in one split (e.g. 'source' for tiles "
        "of one image); null: stratified by class",
    )

    @model_validator(mode="after")
    def _fractions_leave_train(self) -> SplitConfig:
        if self.val + self.test >= 1.0:
            raise ValueError(
                f"val + test = {self.val + self.test:g} leaves no training data; keep it < 1"
            )
        return self


class SiteDataConfig(_Strict):
    """One site's own data (``data.sites``): a dataset definition only that site loads.

    The site splits it into train/val/test by ``data.split`` with its own generator
    (seed, site name) and trains ``clients`` clients on its train split (partitioned by the
    method's partitioner when more than one). In a deployment the server never sees
    ``dataset``/``params``: they are the site's, may differ between the server's copy of
    the config and the site's (paths), and may be given at the site only (node config
    ``data``); the simulator needs them all.
    """

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    dataset: str | None = Field(
        None, description="dataset registry key; absent: named at the site (node config data)"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="dataset parameters")
    clients: int = Field(1, ge=1, le=MAX_COUNT, description="clients this site hosts")


class DataConfig(_OmitUnset):
    """Which dataset, which bands, how it is split and normalised.

    With ``sites`` every site names its own data instead of ``dataset``/``params``
    (:mod:`geofl.engine.sites`): each splits its own data, normalisation uses the per-band
    statistics the sites combine, and evaluation is federated over the sites' splits.
    """

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("sites",)

    dataset: str = Field("synthetic", description="dataset registry key")
    params: dict[str, Any] = Field(default_factory=dict, description="dataset parameters")
    bands: Literal["all", "rgb"] | list[str] = Field("all", description="'all', 'rgb' or names")
    split: SplitConfig = Field(default_factory=SplitConfig)
    normalize: Literal["standardize", "none"] = Field(
        "standardize", description="per-band standardisation with train-split statistics"
    )
    cache_dir: Path | None = Field(None, description="decode cache; default $GEOFL_CACHE")
    cache: Literal["memory", "mmap"] = Field(
        "memory",
        description="memory: decode cache loaded into RAM; mmap: an on-disk array store read "
        "per mini-batch (larger-than-memory data, same metrics)",
    )
    sites: list[SiteDataConfig] | None = Field(
        None,
        min_length=1,
        description="site-local data: each site's own dataset, split at the site; clients "
        "are numbered site by site in this order; absent: one dataset partitioned over "
        "clients",
    )

    @model_validator(mode="after")
    def _sites_replace_dataset(self) -> DataConfig:
        if self.sites is None:
            return self
        names = [s.name for s in self.sites]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"sites.{i}.name", f"{name!r} names two sites")
        if self.params:  # (data.dataset keeps its default in dumps; it is ignored)
            raise ConfigError(  # paths below are relative to data (the loader prefixes it)
                "params",
                "with data.sites each site names its own data; move them into "
                "data.sites.<i>.params",
            )
        if self.cache != "memory":
            raise ConfigError("cache", "site-local data (data.sites) needs cache: memory")
        return self
