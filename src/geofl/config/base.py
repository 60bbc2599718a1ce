"""Building blocks of the config sections: strict bases, the dump rule for late optional
fields, and :class:`Component` (a plug-in named by registry key with inline parameters).

``_Strict`` and ``_OmitUnset`` are package-internal bases of the section models in
:mod:`geofl.config.schema` and its sibling modules.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

__all__ = ["MAX_COUNT", "Component"]

#: Upper bound of counts (clients, rounds, samples): far beyond any run, and small enough
#: that arithmetic with floats (``participation * num_clients``) cannot overflow.
MAX_COUNT = 10**9


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _OmitUnset(_Strict):
    """A section whose optional fields in ``_OPTIONAL`` are left out of the dump while None.

    Fields added after run directories were first written stay out of their resolved
    config (``config.yaml``, governance's committed rule) until a config sets them, so
    those directories resume against today's configs and hash the same.
    """

    _OPTIONAL: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for key in self._OPTIONAL:
            if out.get(key, 0) is None:
                del out[key]
        return out


class Component(BaseModel):
    """A plug-in named by registry key, with its parameters as extra fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(..., min_length=1, description="registry key")

    @property
    def params(self) -> dict[str, Any]:
        """The parameters (every field but ``name``)."""
        return dict(self.model_extra or {})
