"""Write the generated reference pages: the configuration schema and the ``geofl`` CLI.

Both pages are rendered from the code itself, so they cannot drift from it:

* ``reference/config.md`` walks :class:`geofl.config.schema.ExperimentConfig` (every
  section, its fields, types, defaults, bounds and descriptions) and every plug-in
  registry of :mod:`geofl.plugins` (each key with its parameter model);
* ``reference/cli.md`` walks the Click command tree that typer builds from
  :data:`geofl.cli.app` (usage, help text, arguments and options of every command).

Used by the mkdocs hook ``docs/hooks.py`` at build time; ``python docs/gen_reference.py
OUT_DIR`` writes the two pages to a folder, to read them without building the site.
"""

from __future__ import annotations

import enum
import inspect
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

SRC = Path(__file__).resolve().parent.parent / "src"


def _use_this_checkout() -> None:
    """Import geofl from this checkout's ``src`` (not another installed copy)."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))


# --------------------------------------------------------------------------- helpers


def _cell(text: str) -> str:
    """Make ``text`` safe inside a Markdown table cell (pipes, newlines)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _type_name(annotation: Any) -> str:
    """A short, readable name of a type annotation (``list[int] | None``)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in args)
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{inner}]" if inner else name
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _default(field: FieldInfo) -> str:
    """The field's default as YAML would show it, or *required*."""
    if field.default_factory is not None:
        try:
            value = field.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "(computed)"
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        dumped = value.model_dump(exclude_defaults=True)
        return f"`{dumped}`" if dumped else "(section defaults)"
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{value!r}`"


_BOUNDS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "len ≥", "max_length": "len ≤"}


def _bounds(field: FieldInfo) -> str:
    """The field's numeric and length constraints (``≥ 0``, ``len ≥ 1``)."""
    out = []
    for meta in field.metadata:
        for attr, sign in _BOUNDS.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """Every pydantic model inside an annotation (``list[M]``, ``M | None``, ``dict[str, M]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _nested_models(arg)


def _summary(obj: Any) -> str:
    """The first paragraph of an object's docstring, on one line."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _field_table(model: type[BaseModel]) -> list[str]:
    """A Markdown table of a model's fields: key, type, default, bounds, description."""
    if not model.model_fields:
        return ["No parameters.", ""]
    lines = ["| key | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        lines.append(
            f"| `{key}` | {_cell(_type_name(field.annotation))} | {_cell(_default(field))} "
            f"| {_cell(_bounds(field))} | {_cell(field.description or '')} |"
        )
    extra = model.model_config.get("extra")
    if extra == "allow":
        lines.append("| *other keys* | | | | the plug-in's parameters, inline |")
    return [*lines, ""]


# --------------------------------------------------------------------------- config page


def _sections(root: type[BaseModel]) -> list[tuple[str, type[BaseModel]]]:
    """The config's sections in schema order: (dotted path, model), each model once."""
    seen: set[type[BaseModel]] = set()
    out: list[tuple[str, type[BaseModel]]] = []

    def visit(path: str, model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        out.append((path, model))
        for name, field in model.model_fields.items():
            many = typing.get_origin(field.annotation) in (list, tuple) or any(
                typing.get_origin(a) in (list, tuple) for a in typing.get_args(field.annotation)
            )
            for nested in _nested_models(field.annotation):
                visit(f"{path}.{field.alias or name}{'[]' if many else ''}".lstrip("."), nested)

    visit("", root)
    return out


def config_page() -> str:
    """The configuration reference: every section of the schema, then every plug-in key."""
    _use_this_checkout()
    from geofl import plugins
    from geofl.config.schema import ExperimentConfig

    plugins.load_all()
    lines = [
        "# Configuration reference",
        "",
        "Generated at build time from the pydantic schema (`geofl.config`) and the plug-in",
        "registries (`geofl.plugins`); `geofl config show PRESET` prints a fully resolved",
        "config. Unknown keys are refused (exit 2, the field path named). A plug-in is",
        "named by its registry key with its parameters inline, e.g.",
        "`partition: {name: dirichlet, alpha: 0.1}`.",
        "",
        "## Sections",
        "",
    ]
    for path, model in _sections(ExperimentConfig):
        title = f"`{path}`" if path else "Top level"
        lines += [f"### {title}", "", f"`{model.__name__}`: {_summary(model)}", ""]
        lines += _field_table(model)
    lines += ["## Plug-in keys and their parameters", ""]
    for reg_name in sorted(plugins.__all__):
        registry = getattr(plugins, reg_name)
        if not hasattr(registry, "items"):
            continue
        lines += [f"### `{reg_name}`", "", f"Registry of {registry.kind}s.", ""]
        for key, entry in registry.items():
            lines += [f"#### `{key}` ({reg_name.lower()})", "", _cell(entry.doc), ""]
            if entry.traits:
                lines += ["Traits: " + ", ".join(f"`{t}`" for t in sorted(entry.traits)), ""]
            lines += _field_table(entry.params)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- CLI page


def _param_row(param: click.Parameter) -> str:
    """One table row for a Click argument or option."""
    if isinstance(param, click.Option):
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        help_text = param.help or ""
    else:
        names = f"`{(param.name or '').upper()}`"
        help_text = getattr(param, "help", None) or ""
    default = param.default
    shown = "" if default is None or callable(default) or default == () else f"`{default!r}`"
    if param.required:
        shown = "**required**"
    return f"| {names} | {_cell(param.type.name)} | {_cell(shown)} | {_cell(help_text)} |"


def _commands(
    cmd: click.Command, path: list[str]
) -> Iterator[tuple[list[str], click.Command, click.Context]]:
    """Every command under ``cmd`` (groups first), with its full name and a context."""
    parent = None
    ctx = click.Context(cmd, info_name=" ".join(path), parent=parent)
    yield path, cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, [*path, name])


def cli_page() -> str:
    """The CLI reference: usage, help and parameters of every ``geofl`` command."""
    _use_this_checkout()
    import typer

    from geofl.cli import app

    root = typer.main.get_command(app)
    lines = [
        "# CLI reference",
        "",
        "Generated at build time from the typer application (`geofl.cli.app`). Every",
        "command also answers `--help`. Bad input ends with one line naming the field or",
        "value and exit code 2.",
        "",
    ]
    for path, cmd, ctx in _commands(root, ["geofl"]):
        name = " ".join(path)
        usage = " ".join([name, *cmd.collect_usage_pieces(ctx)])
        lines += [f"## `{name}`", "", f"```\n{usage}\n```", ""]
        help_text = inspect.cleandoc(cmd.help or "")
        if help_text:
            lines += [help_text.split("\b")[0].strip(), ""]
        params = [p for p in cmd.params if not getattr(p, "hidden", False)]
        if params:
            lines += ["| parameter | type | default | help |", "|---|---|---|---|"]
            lines += [_param_row(p) for p in params]
            lines.append("")
        if isinstance(cmd, click.Group):
            subs = cmd.list_commands(ctx)
            lines += ["Commands: " + ", ".join(f"`{name} {s}`" for s in subs), ""]
    return "\n".join(lines) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "reference/config.md": config_page,
    "reference/cli.md": cli_page,
}


def main(argv: list[str]) -> int:
    """Write every generated page under ``argv[0]`` (default: a ``generated/`` folder)."""
    out = Path(argv[0] if argv else "generated")
    for rel, render in PAGES.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(), encoding="utf-8")
        print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
