"""What every ``geofl`` command shares: the stderr console, the exit-2 error path, arguments.

This module imports nothing else from :mod:`geofl.cli`, so every command module can use it
without an import cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

__all__ = ["RunDirArg", "SetOpt", "SourceArg", "console", "fail"]

console = Console(stderr=True)

SourceArg = Annotated[str, typer.Argument(help="Preset name (see `geofl presets`) or YAML file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: path.to.field=value (repeatable)."),
]
RunDirArg = Annotated[Path, typer.Argument(help="A run directory written by `geofl run`.")]


def fail(message: str) -> typer.Exit:
    """Print ``error: MESSAGE`` on stderr and return the exit-code-2 exception to raise.

    Args:
        message: One line naming the bad field or value.

    Returns:
        ``typer.Exit(code=2)``, for the caller to ``raise … from None``.
    """
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)
