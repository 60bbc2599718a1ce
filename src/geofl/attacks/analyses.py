"""Post-run analyses: read a finished run directory, write results next to it.

An analysis (e.g. the passive attribute-inference attack of 000 §4.4) is named in the
experiment's ``analyses`` list and runs after every (method, seed); it writes
``analysis/<name>.json`` that the report reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from geofl.registry import Registry

__all__ = ["ANALYSES", "Analysis"]


class Analysis(Protocol):
    """Analyse the run directory; returns the JSON-ready result it also wrote."""

    name: str

    def __call__(self, run_dir: Path) -> dict[str, Any]: ...


#: Analysis registry: ``attribute_inference``, ...
ANALYSES: Registry[Analysis] = Registry("analysis")
