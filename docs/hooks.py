"""mkdocs hook: add the generated reference pages to the site at build time.

``reference/config.md`` and ``reference/cli.md`` are rendered from the code by
``docs/gen_reference.py`` and handed to mkdocs as generated files, so nothing is written
into ``docs/`` and the pages always match the checkout being built.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.structure.files import File, Files


def _generator() -> ModuleType:
    """Load ``gen_reference.py`` beside this hook (mkdocs loads hooks by path)."""
    path = Path(__file__).with_name("gen_reference.py")
    spec = importlib.util.spec_from_file_location("geofl_docs_gen_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    """Add (or replace) each generated page in the site's file list."""
    gen = _generator()
    for rel, render in gen.PAGES.items():
        existing = files.get_file_from_path(rel)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, rel, content=render()))
    return files
