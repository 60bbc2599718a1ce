"""geofl: federated learning on geospatial and remote-sensing data.

Privacy, robustness, hierarchy over unreliable links and auditable governance as composable
parts of one round loop (papers 000, 001, 003, 004; see DESIGN.md).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
