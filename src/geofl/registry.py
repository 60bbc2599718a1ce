"""Registries for plug-ins: one per extension point, refusing duplicate keys.

Each entry pairs a factory with a pydantic model of its parameters, so that a config can
name an implementation by key and have its parameters validated at load time, with the
field path in the error message.

Example:
    >>> from pydantic import BaseModel
    >>> REG: Registry[object] = Registry("example")
    >>> class P(BaseModel):
    ...     x: int = 1
    >>> @REG.register("thing", params=P)
    ... def make(params: P) -> object:
    ...     return params.x
    >>> REG.build("thing", {"x": 3})
    3
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from geofl.errors import ConfigError, RegistryError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "EXTRAS",
    "MAX_DEPTH",
    "MAX_VALUES",
    "CheckContext",
    "NoParams",
    "Registry",
    "RegistryEntry",
    "format_validation_error",
    "printable",
    "reject_loose_values",
    "require_extra",
]

#: Deepest nesting of mappings and lists a config (or a plug-in's parameters) may have.
#: Real configs nest about six levels; pydantic cannot serialise much deeper ones.
MAX_DEPTH = 32

#: Most values a config may hold, counting a YAML alias once per use (as pydantic and the
#: run directory's resolved config will see it): a few hundred bytes of nested aliases
#: otherwise expand to billions of items.
MAX_VALUES = 100_000


class NoParams(BaseModel):
    """Parameter model of a plug-in that takes no parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class CheckContext:
    """What a plug-in's load-time check may look at, besides its own parameters.

    Attributes:
        path: Config path of the component being checked (``methods.2.aggregator``).
        experiment: The whole validated experiment as plain data (``model_dump``).
        method: The method the component belongs to, as plain data (None outside methods).
        traits: Role → the union of traits its components declare in this method
            (``{"aggregator": {"linear"}, "release": {"noise"}, ...}``).
        clients_per_round: Updates a round trains when the sampler fixes it, else None.
    """

    path: str
    experiment: Mapping[str, Any]
    method: Mapping[str, Any] | None = None
    traits: Mapping[str, frozenset[str]] = field(default_factory=dict)
    clients_per_round: int | None = None

    def fail(self, field_name: str, message: str) -> NoReturn:
        """Raise the one-line ConfigError for ``<path>.<field_name>``."""
        raise ConfigError(".".join(p for p in (self.path, field_name) if p), message)


#: A plug-in's load-time check: ``check(params, ctx)`` raises via ``ctx.fail``.
Check = Callable[[Any, CheckContext], None]


@dataclass(frozen=True)
class RegistryEntry(Generic[T]):
    """One registered implementation.

    Attributes:
        key: Registry key used in configs.
        factory: Callable taking the validated parameter model (and any extra keyword
            arguments the extension point defines) and returning the implementation.
        params: Pydantic model validating the entry's parameters.
        doc: First line of the factory's docstring.
        traits: Capabilities and needs other plug-ins' checks can ask about (e.g. an
            aggregator is ``linear``; a release step adds ``noise``).
        check: Load-time check of this plug-in against the rest of the experiment.
        requires: Optional extras (:data:`EXTRAS` keys) the implementation needs.
    """

    key: str
    factory: Callable[..., T]
    params: type[BaseModel]
    doc: str
    traits: frozenset[str] = frozenset()
    check: Check | None = None
    requires: tuple[str, ...] = ()


#: Optional extra (``pip install 'geofl[<extra>]'``) → the modules it installs. The core
#: install runs simulation; a config that uses a part below needs its extra, and load-time
#: validation refuses the config in one line when a module is missing (so ``config
#: validate`` and ``run`` refuse alike, before any round). Keep in step with pyproject.toml.
EXTRAS: Mapping[str, tuple[str, ...]] = {
    "governance": ("web3", "eth_tester", "eth", "vyper", "coincurve"),
    "space": ("sgp4",),
    "detection": ("pycocotools",),
    "deploy": ("flwr",),
    "tracking": ("mlflow", "tensorboard"),
}


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package or a stub without a spec
        return False


def require_extra(extra: str, path: str, alternative: str = "") -> None:
    """Raise the one-line ConfigError naming the pip command when ``extra`` is missing.

    Args:
        extra: A key of :data:`EXTRAS`.
        path: Config path of the field that needs it (``governance``, ``task.name``).
        alternative: What else the user may do instead (``"or set … : ideal"``), or "".

    Raises:
        ConfigError: ``<path>: needs the '<extra>' extra (<missing> not installed): pip
            install 'geofl[<extra>]'``.
    """
    missing = [m for m in EXTRAS[extra] if not _installed(m)]
    if missing:
        also = f", {alternative}" if alternative else ""
        raise ConfigError(
            path,
            f"needs the {extra!r} extra ({', '.join(missing)} not installed): "
            f"pip install 'geofl[{extra}]'{also}",
        )


def printable(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped, for one-line errors.

    Example:
        >>> printable("bad\\nkey")
        'bad\\\\nkey'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _join(path: str, key: object) -> str:
    """``path.key``, the key escaped so that the path stays on one line."""
    return ".".join(p for p in (path, printable(str(key))) if p)


def format_validation_error(err: ValidationError, prefix: str = "") -> ConfigError:
    """Turn the first pydantic error into a one-line :class:`ConfigError` with its path.

    A validator may raise :class:`ConfigError` with a path relative to its model (a
    whole-model check naming ``methods.3.name``); that path is appended to pydantic's.
    A plain ``ValueError`` loses pydantic's "Value error, " prefix.
    """
    first = err.errors()[0]
    path = prefix
    for part in first["loc"]:
        path = _join(path, part)
    msg = first["msg"]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ConfigError):
        path = ".".join(p for p in (path, cause.path) if p)
        msg = cause.message
    elif first["type"] == "value_error" and isinstance(cause, Exception):
        msg = str(cause)
    elif first["type"] == "extra_forbidden":
        msg = "unknown field; remove it or check its spelling"
    elif first["type"] == "missing":
        msg = "field required"
    return ConfigError(path, printable(msg))


_NUMBER_TYPES = (int, float)


def _number_field(annotation: Any) -> bool:
    """Whether a field's annotation is int or float, optionally Optional."""
    if annotation in _NUMBER_TYPES:
        return True
    args = getattr(annotation, "__args__", ())
    return bool(args) and all(a in (*_NUMBER_TYPES, type(None)) for a in args)


def reject_loose_values(model: type[BaseModel], data: Any, prefix: str = "") -> None:
    """Refuse what pydantic's lax mode would quietly coerce, before validation.

    * a non-finite float (``.inf``, ``.nan``) anywhere in ``data``;
    * nesting deeper than :data:`MAX_DEPTH`, more than :data:`MAX_VALUES` values (YAML
      aliases counted once per use), and a mapping or list that contains itself (a YAML
      alias to its own ancestor);
    * a bool or a string given for a number field (``batch_size: true`` → 1,
      ``rounds: '3'`` → 3), in ``model`` and in nested models.

    Raises:
        ConfigError: naming the field path.
    """
    _reject_non_finite(data, prefix)
    _reject_coercions(model, data, prefix)


def _reject_non_finite(data: Any, path: str) -> None:
    """Walk ``data`` iteratively (no recursion limit to hit), refusing what cannot load.

    Each stack entry is ``(node, path, depth, leaving)``; ``leaving`` entries take a
    container off the current path once its children are done, so that a container met
    again while still on the path is a cycle.
    """
    stack: list[tuple[Any, str, int, bool]] = [(data, path, 0, False)]
    on_path: set[int] = set()
    count = 0
    while stack:
        node, where, depth, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            continue
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(
                where or "config",
                f"more than {MAX_VALUES} values (each use of a YAML alias counts); "
                "make the config smaller",
            )
        if isinstance(node, float) and not math.isfinite(node):
            raise ConfigError(where or "config", f"{node} is not a finite number")
        children = _children(node)
        if children is None:
            continue
        if id(node) in on_path:
            raise ConfigError(
                where or "config",
                "contains itself (a YAML alias to its own ancestor); write the value out",
            )
        if depth >= MAX_DEPTH:
            raise ConfigError(
                where or "config", f"nested deeper than {MAX_DEPTH} levels; flatten it"
            )
        on_path.add(id(node))
        stack.append((node, where, depth, True))
        stack += [(v, _join(where, k), depth + 1, False) for k, v in reversed(children)]


def _children(node: Any) -> list[tuple[object, Any]] | None:
    """(key, value) pairs of a mapping, list or tuple; None for anything else."""
    if isinstance(node, Mapping):
        return list(node.items())
    if isinstance(node, list | tuple):
        return list(enumerate(node))
    return None


def _reject_coercions(model: type[BaseModel], data: Any, path: str) -> None:
    if not isinstance(data, Mapping):
        return
    for name, field_info in model.model_fields.items():
        if name not in data:
            continue
        value, where = data[name], ".".join(p for p in (path, name) if p)
        ann = field_info.annotation
        if _number_field(ann) and isinstance(value, bool | str):
            raise ConfigError(
                where, f"expected a number, got {type(value).__name__} {value!r}; write a number"
            )
        nested = _nested_model(ann)
        if nested is not None:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    _reject_coercions(nested, item, f"{where}.{i}")
            else:
                _reject_coercions(nested, value, where)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside ``M``, ``M | None`` or ``list[M]``, if any."""
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


class Registry(Generic[T]):
    """A name → implementation map for one extension point; duplicate keys are refused."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, RegistryEntry[T]] = {}

    def register(
        self,
        key: str,
        *,
        params: type[BaseModel] = NoParams,
        traits: tuple[str, ...] = (),
        check: Check | None = None,
        requires: tuple[str, ...] = (),
    ) -> Callable[[F], F]:
        """Decorator registering ``factory`` under ``key``.

        Args:
            key: Registry key used in configs.
            params: Pydantic model of the parameters.
            traits: Capabilities other plug-ins' checks can ask about.
            check: ``check(params, ctx)`` run at config load time.
            requires: Optional extras the implementation needs (:data:`EXTRAS` keys);
                validating its parameters fails in one line naming the pip command when
                one is missing.

        Raises:
            RegistryError: if ``key`` is already registered or ``requires`` names an
                unknown extra.
        """
        unknown = [x for x in requires if x not in EXTRAS]
        if unknown:
            raise RegistryError(f"{self.kind} {key!r} requires unknown extras {unknown}")

        def deco(factory: F) -> F:
            if key in self._entries:
                raise RegistryError(f"{self.kind} {key!r} is already registered")
            doc = (factory.__doc__ or "").strip().splitlines()
            self._entries[key] = RegistryEntry(
                key, factory, params, doc[0] if doc else "", frozenset(traits), check, requires
            )
            return factory

        return deco

    def entry(self, key: str, *, path: str = "") -> RegistryEntry[T]:
        """The entry for ``key``; an unknown key raises a ConfigError listing the choices."""
        try:
            return self._entries[key]
        except KeyError:
            choices = ", ".join(sorted(self._entries)) or "(none registered)"
            raise ConfigError(
                path or self.kind, f"unknown {self.kind} {key!r}; choose one of: {choices}"
            ) from None

    def validate(self, key: str, params: Mapping[str, Any], *, path: str = "") -> BaseModel:
        """Validate ``params`` against the entry's parameter model, after checking that the
        extras the entry requires are installed."""
        entry = self.entry(key, path=path)
        for extra in entry.requires:
            require_extra(extra, path or key)
        reject_loose_values(entry.params, dict(params), path)
        try:
            return entry.params.model_validate(dict(params))
        except ValidationError as err:
            raise format_validation_error(err, path) from None

    def check(self, key: str, params: Mapping[str, Any], ctx: CheckContext) -> None:
        """Validate ``params`` (errors under ``ctx.path``), then run the entry's check."""
        entry = self.entry(key, path=f"{ctx.path}.name" if ctx.path else "")
        model = self.validate(key, params, path=ctx.path)
        if entry.check is not None:
            entry.check(model, ctx)

    def traits(self, key: str) -> frozenset[str]:
        """The traits ``key`` declares (empty for unknown keys)."""
        entry = self._entries.get(key)
        return entry.traits if entry else frozenset()

    def build(self, key: str, params: Mapping[str, Any] | None = None, **kwargs: Any) -> T:
        """Validate ``params`` and call the factory with them (plus ``kwargs``)."""
        model = self.validate(key, params or {})
        return self.entry(key).factory(model, **kwargs)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[str, RegistryEntry[T]]]:
        """Entries sorted by key."""
        return sorted(self._entries.items())
