"""What the sites of site-local data (``data.sites``) must agree on, and the server's view.

Every site sends the server its :class:`DataSchema` — bands, classes, target kind, shape
and dtype, sample shape; no samples — and the server refuses sites that disagree
(:func:`check_schemas`). A deployment's server holds no data: :func:`empty_dataset` is a
dataset of the agreed schema without samples, its view of the sites' data
(:mod:`geofl.deploy.sitedata`). The simulator checks the same schemas
(:class:`~geofl.engine.sites.SitesPlan`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from geofl.data.base import ArrayDataset
from geofl.errors import ConfigError

__all__ = ["DataSchema", "check_schemas", "empty_dataset"]


@dataclass(frozen=True)
class DataSchema:
    """What every site must agree on (no samples): sent by each site to the server."""

    bands: tuple[str, ...]
    classes: tuple[str, ...]
    target_kind: str
    target_shape: tuple[int, ...]
    target_dtype: str
    sample_shape: tuple[int, ...]

    @classmethod
    def of(cls, ds: ArrayDataset) -> DataSchema:
        """The schema of ``ds``."""
        return cls(
            tuple(ds.bands),
            tuple(ds.classes),
            str(ds.target_kind),
            tuple(int(s) for s in ds.targets.shape[1:]),
            str(ds.targets.dtype).removeprefix("torch."),
            tuple(int(s) for s in ds.inputs.shape[1:]),
        )

    def to_json(self) -> str:
        """JSON text (the wire form)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> DataSchema:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return cls(
            tuple(d["bands"]),
            tuple(d["classes"]),
            str(d["target_kind"]),
            tuple(d["target_shape"]),
            str(d["target_dtype"]),
            tuple(d["sample_shape"]),
        )


def check_schemas(names: Sequence[str], schemas: Sequence[DataSchema]) -> None:
    """Refuse sites whose data disagree (bands, classes, targets, sample shape).

    Raises:
        ConfigError: naming ``data.sites``, the first field that differs and each site's
            value.
    """
    for key in ("bands", "classes", "target_kind", "target_shape", "target_dtype", "sample_shape"):
        seen = [getattr(s, key) for s in schemas]
        if any(v != seen[0] for v in seen):
            per = "; ".join(f"{n}: {_show(v)}" for n, v in zip(names, seen, strict=True))
            raise ConfigError(
                "data.sites",
                f"sites disagree on {key.replace('_', ' ')} ({per}); every site must hold the "
                "same bands, classes and sample shape",
            )


def _show(v: Any) -> str:
    return (
        f"{list(v)} ({len(v)})" if isinstance(v, tuple) and v and isinstance(v[0], str) else str(v)
    )


def empty_dataset(schema: DataSchema, name: str = "sites") -> ArrayDataset:
    """A dataset of ``schema`` without samples: the server's view of site-local data."""
    dtype = getattr(torch, schema.target_dtype)
    return ArrayDataset(
        torch.zeros((0, *schema.sample_shape)),
        torch.zeros((0, *schema.target_shape), dtype=dtype),
        schema.classes,
        schema.bands,
        name=name,
        target_kind=schema.target_kind,  # type: ignore[arg-type]
    )
