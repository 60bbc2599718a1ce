"""Loading experiment configs: presets or YAML files, ``--set`` overrides, validation.

Every error is a one-line :class:`~geofl.errors.ConfigError` naming the field path. The
checks against the plug-in registries are :func:`geofl.config.validate.validate_config`.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

from geofl.config.memory import check_memory
from geofl.config.schema import ExperimentConfig
from geofl.config.validate import validate_config
from geofl.errors import ConfigError
from geofl.registry import (
    MAX_DEPTH,
    format_validation_error,
    printable,
    reject_loose_values,
)

__all__ = [
    "apply_override",
    "config_from_raw",
    "dump_config",
    "list_presets",
    "load_config",
    "load_raw",
    "preset_path",
]


#: Deepest YAML nesting the parser accepts: beyond it, PyYAML's recursive composer would
#: exhaust the interpreter's stack (RecursionError). Deeper than MAX_DEPTH is refused later
#: with the field path; this only keeps the parser safe.
MAX_YAML_DEPTH = 4 * MAX_DEPTH

#: Largest config file read: the shipped presets are under 8 kB, so 1 MiB is far above any
#: config and far below what would strain memory or the parser.
MAX_CONFIG_BYTES = 2**20


#: Key tags that are not keys of the mapping itself (a merge ``<<``, YAML 1.1's ``=``).
_SPECIAL_KEYS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats: ``1e6`` and ``1.0e6`` are numbers.

    PyYAML follows YAML 1.1, where an exponent needs a dot and a sign (``1.0e+6``), so
    ``1.0e6`` would silently be the *string* "1.0e6".

    Every problem is a ``yaml.YAMLError`` with its position: nesting deeper than
    :data:`MAX_YAML_DEPTH`, and values the constructors cannot build (``2024-13-45``,
    ``!!int x``, an integer of over 4300 digits), which PyYAML lets escape as
    ``ValueError`` or ``KeyError``.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        """Compose one node, refusing nesting deeper than :data:`MAX_YAML_DEPTH`."""
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_YAML_DEPTH} levels",
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Construct a mapping, refusing a key written twice (PyYAML keeps the last silently).

        Only the mapping's own scalar keys count: entries a merge key (``<<: *base``)
        brings in may be overridden, as YAML intends.
        """
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag in _SPECIAL_KEYS:
                continue
            key = self.construct_object(key_node)
            first = seen.setdefault(key, key_node)
            if first is not key_node:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {printable(str(key))!r} (first on line "
                    f"{first.start_mark.line + 1}); give each key once",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """Construct one value; a constructor's own exception becomes a ConstructorError."""
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, TypeError, OverflowError) as err:
            kind = node.tag.removeprefix("tag:yaml.org,2002:")
            why = str(err).partition(";")[0]  # not "use sys.set_int_max_str_digits()"
            raise ConstructorError(
                None, None, f"cannot read this {kind} value ({why})", node.start_mark
            ) from None


def _parse(text: str) -> Any:
    """Parse YAML 1.2 text; every failure is a ``yaml.YAMLError``."""
    try:
        return yaml.load(text, Loader=Yaml12Loader)
    except RecursionError:  # a lower recursion limit than MAX_YAML_DEPTH needs
        raise yaml.YAMLError("nested too deeply") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line: what is wrong and where (``line 3, column 7: ...``)."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: "
        return printable(where + (err.problem or err.context or "invalid"))
    return printable(str(err).splitlines()[0] if str(err) else type(err).__name__)


Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)


def list_presets() -> dict[str, str]:
    """Preset name → its description (first line)."""
    out: dict[str, str] = {}
    for entry in sorted(resources.files("geofl.config.presets").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            raw = yaml.safe_load(entry.read_text(encoding="utf-8")) or {}
            out[entry.name[: -len(".yaml")]] = str(raw.get("description", "")).strip()
    return out


def preset_path(name: str) -> Path:
    """Path of a shipped preset."""
    return Path(str(resources.files("geofl.config.presets").joinpath(f"{name}.yaml")))


def _is_preset(name: str) -> bool:
    """Whether ``name`` is a shipped preset: a plain name whose YAML file is shipped.

    Asks for the one file rather than :func:`list_presets`, which parses every preset
    (about 2 s of pure-Python YAML on each load).
    """
    if not name or Path(name).suffix or Path(name).name != name or name in (".", ".."):
        return False
    return preset_path(name).is_file()


def load_raw(source: str | Path) -> dict[str, Any]:
    """Parse a preset name or a YAML file into a dict (no validation yet)."""
    path = Path(source)
    if _is_preset(str(source)):
        path = preset_path(str(source))
    shown = printable(str(path))
    if not path.exists():
        presets = ", ".join(list_presets())
        raise ConfigError(
            "config", f"{printable(str(source))} is neither a preset ({presets}) nor a file"
        )
    if path.is_dir():
        raise ConfigError("config", f"{shown} is a directory; give a preset name or a YAML file")
    try:
        raw = _parse(_read_config_text(path, shown))
    except UnicodeDecodeError:
        raise ConfigError("config", f"{shown} is not UTF-8 text; give a YAML file") from None
    except OSError as err:
        raise ConfigError("config", f"{shown} cannot be read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError("config", f"{shown} is not valid YAML: {_yaml_problem(err)}") from None
    if not isinstance(raw, dict):
        raise ConfigError("config", f"{shown} must hold a mapping at the top level")
    return raw


def _read_config_text(path: Path, shown: str) -> str:
    """The text of a config file, refusing what is no config file before reading it.

    ``/dev/zero`` would be read until memory runs out and a FIFO would block forever, so
    anything but a regular file is refused from its ``stat`` alone (which opens nothing);
    a file over :data:`MAX_CONFIG_BYTES` (any real config is a few kB) is refused too, and
    at most that many bytes are read in case it grows meanwhile.

    Raises:
        ConfigError: one line naming the file.
        OSError, UnicodeDecodeError: for the caller to report.
    """
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        raise ConfigError(
            "config", f"{shown} is not a regular file (a device, FIFO or socket); give a YAML file"
        )
    with path.open("rb") as fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            "config",
            f"{shown} is over {MAX_CONFIG_BYTES // 2**20} MiB; an experiment config is a few "
            "kB of YAML: give the config file",
        )
    return data.decode("utf-8")


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply ``path.to.field=value`` in place; the value is parsed as YAML 1.2.

    List items are addressed by index (``methods.1.partition.alpha=0.5``) or, for lists of
    named items such as ``methods``, by name (``methods.fedavg-iid.partition.alpha=0.5``).
    A name may contain dots: ``methods.fedavg-dir0.1.partition.alpha=0.3`` finds the method
    ``fedavg-dir0.1`` (the longest name that matches wins); ``methods[fedavg-dir0.1]`` is the
    explicit form.
    """
    if "=" not in assignment:
        raise ConfigError("--set", f"{assignment!r} must look like path.to.field=value")
    path, _, text = assignment.partition("=")
    keys = _split_path(path.strip(), assignment)
    try:
        value = _parse(text)
    except yaml.YAMLError:
        value = text
    node: Any = raw
    depth = 0
    while depth < len(keys):
        if isinstance(node, list):
            idx, used = _list_index(node, keys, depth)
            depth += used
            if depth == len(keys):
                node[idx] = value
                return
            node = node[idx]
        elif isinstance(node, dict):
            key = keys[depth]
            depth += 1
            if depth == len(keys):
                node[key] = value
                return
            node = node.setdefault(key, {})
        else:
            where = printable(".".join(keys[:depth]))
            raise ConfigError(where, f"cannot set a field inside a {type(node).__name__}")


def _split_path(path: str, assignment: str) -> list[str]:
    """``a.b[c.d].e`` → ``["a", "b", "c.d", "e"]`` (brackets keep dots in a name)."""
    keys: list[str] = []
    rest = path
    while rest:
        head, sep, tail = rest.partition("[")
        keys += [k for k in head.split(".") if k]
        if not sep:
            break
        name, close, rest = tail.partition("]")
        if not close or not name:
            raise ConfigError("--set", f"{assignment!r}: unbalanced or empty [name]")
        keys.append(name)
    if not keys:
        raise ConfigError("--set", f"{assignment!r} names no field")
    return keys


def _list_index(node: list[Any], keys: list[str], depth: int) -> tuple[int, int]:
    """(index of the addressed item, how many keys its address used)."""
    key = keys[depth]
    if key.lstrip("-").isdigit():
        idx = int(key)
        if not -len(node) <= idx < len(node):
            where = printable(".".join(keys[: depth + 1]))
            raise ConfigError(where, f"index {idx} out of range (list has {len(node)} items)")
        return idx, 1
    names = {  # only string names: a name given as a list or mapping is not hashable
        item["name"]: i
        for i, item in enumerate(node)
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    }
    for used in range(len(keys) - depth, 0, -1):  # longest dotted name first
        name = ".".join(keys[depth : depth + used])
        if name in names:
            return names[name], used
    known = printable(", ".join(names)) or "none"
    where = printable(".".join(keys[: depth + 1]))
    raise ConfigError(where, f"no list item named {key!r} (items: {known})")


def load_config(
    source: str | Path, overrides: Iterable[str] = (), seeds: list[int] | None = None
) -> ExperimentConfig:
    """Load, override and fully validate an experiment config.

    Args:
        source: Preset name or YAML path.
        overrides: ``path=value`` assignments, applied in order.
        seeds: Replaces ``seeds`` when given.

    Raises:
        ConfigError: naming the first invalid field.
    """
    raw = load_raw(source)
    for assignment in overrides:
        apply_override(raw, assignment)
    if seeds is not None:
        raw["seeds"] = seeds
    cfg = config_from_raw(raw)
    check_memory(cfg)  # what this machine can run (not in config_from_raw: merges)
    return cfg


def config_from_raw(raw: dict[str, Any]) -> ExperimentConfig:
    """Fully validate a raw config mapping (``raw`` is completed in place).

    Raises:
        ConfigError: naming the first invalid field.
    """
    reject_loose_values(ExperimentConfig, raw)
    _complete_sections(raw)
    try:
        cfg = ExperimentConfig.model_validate(raw)
    except ValidationError as err:
        raise format_validation_error(err) from None
    validate_config(cfg)
    return cfg


def dump_config(cfg: ExperimentConfig) -> str:
    """The fully resolved config as YAML: what a run directory's ``config.yaml`` holds.

    :func:`load_config` on this text gives back an equal config.

    Args:
        cfg: A validated config.

    Returns:
        YAML text, fields in schema order.
    """
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def _complete_sections(raw: dict[str, Any]) -> None:
    """Validate plug-in-owned sections (``governance``) and fill in their defaults."""
    from geofl import plugins

    plugins.load_all()
    gov = raw.get("governance")
    if gov is not None:
        if not isinstance(gov, dict):
            raise ConfigError("governance", "must be a mapping of governance settings")
        model = plugins.SUBSCRIBERS.validate("governance", gov, path="governance")
        raw["governance"] = model.model_dump(mode="json")
