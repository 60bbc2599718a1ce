"""What every ``geofl`` command shares: the stderr console, the exit-2 error path, arguments.

This module imports nothing else from :mod:`geofl.cli`, so every command module can use it
without an import cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from geofl.errors import ConfigError
from geofl.registry import printable

__all__ = [
    "RunDirArg",
    "SeedsOpt",
    "SetOpt",
    "SourceArg",
    "console",
    "error_line",
    "fail",
    "parse_seeds",
]

console = Console(stderr=True)

SourceArg = Annotated[str, typer.Argument(help="Preset name (see `geofl presets`) or YAML file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: path.to.field=value (repeatable)."),
]
SeedsOpt = Annotated[str | None, typer.Option(help="Comma-separated seeds, e.g. 1,42,2024.")]
RunDirArg = Annotated[Path, typer.Argument(help="A run directory written by `geofl run`.")]


def error_line(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr, on one line and verbatim.

    The message is user input as often as not (a path, a key), so rich markup in it is
    escaped (``[/]`` would raise, ``[red]`` would vanish) and so are line breaks.
    """
    console.print(
        f"[bold red]error:[/] {escape(printable(message))}", highlight=False, soft_wrap=True
    )


def fail(message: str) -> typer.Exit:
    """Print ``error: MESSAGE`` on stderr and return the exit-code-2 exception to raise.

    Args:
        message: One line naming the bad field or value.

    Returns:
        ``typer.Exit(code=2)``, for the caller to ``raise … from None``.
    """
    error_line(message)
    return typer.Exit(code=2)


def parse_seeds(text: str | None) -> list[int] | None:
    """The ``--seeds`` option as integers (``None`` when not given).

    Raises:
        ConfigError: naming ``--seeds`` when an entry is not an integer.
    """
    if text is None:
        return None
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError("--seeds", f"{text!r} must be comma-separated integers") from None
