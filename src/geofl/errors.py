"""Domain errors of geofl, in one place.

Every error a user can cause carries a one-line message that names the field or value at
fault and says what to do. The CLI turns :class:`GeoflError` into that line on stderr and
exit code 2.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DataError",
    "GeoflError",
    "MalformedUpdateError",
    "PartitionError",
    "RegistryError",
    "RunDirError",
]


class GeoflError(Exception):
    """Base class of every error geofl raises on purpose."""


class ConfigError(GeoflError, ValueError):
    """An experiment config is invalid; the message starts with the field path."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class RegistryError(GeoflError, KeyError):
    """A registry key is unknown or registered twice."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the line readable.
        return str(self.args[0]) if self.args else ""


class DataError(GeoflError, ValueError):
    """A dataset on disk is missing, malformed or inconsistent."""


class PartitionError(GeoflError, ValueError):
    """A client partition cannot be built from the given data and parameters."""


class MalformedUpdateError(GeoflError, ValueError):
    """A client update failed validation (non-finite values, wrong shape, wrong size)."""


class RunDirError(GeoflError, ValueError):
    """A run directory is missing, incomplete or does not match the config."""
