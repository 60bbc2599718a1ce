"""geofl: federated learning on geospatial and remote-sensing data.

Privacy, robustness, hierarchy over unreliable links and auditable governance as composable
parts of one round loop (papers 000, 001, 003, 004; see DESIGN.md).

The package root is the public façade: ``geofl.load_model(run_dir)`` (a trained model of a
run, with its preprocessing; :mod:`geofl.inference`), ``geofl.run(config)`` and
``geofl.RunResult`` (the Python API, :mod:`geofl.api`) are imported on first use, so that
``import geofl.errors`` and friends never load the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["RunResult", "__version__", "api", "load_model", "run"]

if TYPE_CHECKING:
    from geofl import api
    from geofl.api import RunResult, run
    from geofl.inference.load import load_model


def __getattr__(name: str) -> Any:
    """Lazy public entry points (PEP 562): ``load_model``, ``run``, ``RunResult``, ``api``."""
    if name == "load_model":
        from geofl.inference.load import load_model

        return load_model
    if name in ("run", "RunResult", "api"):
        import geofl.api  # not ``from geofl import api``: that asks this hook again

        return geofl.api if name == "api" else getattr(geofl.api, name)
    raise AttributeError(f"module 'geofl' has no attribute {name!r}")
