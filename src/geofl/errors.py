"""Domain errors of geofl, in one place.

Every error a user can cause carries a one-line message that names the field or value at
fault and says what to do. The CLI turns :class:`GeoflError` into that line on stderr and
exit code 2.
"""

from __future__ import annotations

__all__ = [
    "AggregationError",
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


class AggregationError(GeoflError, ValueError):
    """A round's updates cannot be aggregated as configured.

    E.g. too few updates for Krum's ``K > 2f + 2``, or label histograms that are missing,
    all zero or negative for the consistency weighting.
    """


class GovernanceError(GeoflError, ValueError):
    """A governance input or action is invalid.

    E.g. non-finite reputation inputs, rounds out of order, fewer validators than committee
    seats, a stale or no-op permission proposal.
    """


__all__ += ["GovernanceError"]


class LedgerError(GeoflError):
    """The governance ledger cannot do what was asked (node unreachable, bad artifact, ...)."""


class LedgerRevertError(LedgerError):
    """The governance contract rejected a transaction; ``reason`` is its revert message."""

    def __init__(self, method: str, sender: str, reason: str) -> None:
        self.method = method
        self.sender = sender
        self.reason = reason
        super().__init__(f"{method} by {sender} reverted: {reason}")


class LedgerIntegrityError(LedgerError, ValueError):
    """A stored ledger does not replay to the chain it recorded.

    The message names the file and, where one is at fault, the transaction record
    (0-based ``record``; -1 for the file as a whole).
    """

    def __init__(self, file: str, record: int, message: str) -> None:
        self.file = file
        self.record = record
        self.message = message
        where = f"{file} record {record}" if record >= 0 else file
        super().__init__(f"{where}: {message}")


__all__ += ["LedgerError", "LedgerIntegrityError", "LedgerRevertError"]


class RunStoppedError(GeoflError):
    """A run stopped on request (SIGINT/SIGTERM) after a round's durable write.

    Attributes:
        method: The method that was running.
        seed: Its seed.
        round: The last completed (and checkpointed) round.
        signum: The signal that asked for the stop.
    """

    def __init__(self, method: str, seed: int, round_idx: int, signum: int) -> None:
        super().__init__(f"stopped after round {round_idx} of {method} seed {seed}")
        self.method, self.seed, self.round, self.signum = method, seed, round_idx, signum


class RunDirLockedError(RunDirError):
    """Another live process holds the run directory."""


class BudgetExhaustedError(GeoflError):
    """A client declines a round whose release would take it past its privacy budget.

    Not a user error: the scheduler records the client as declined and the run goes on.

    Attributes:
        client: The declining client.
        epsilon: ε(δ) it would have after the round.
        target: Its target ε.
    """

    def __init__(self, client: int, epsilon: float, target: float) -> None:
        super().__init__(
            f"client {client}: this round would take ε to {epsilon:.3g} > target {target:g}"
        )
        self.client, self.epsilon, self.target = client, epsilon, target


__all__ += ["BudgetExhaustedError", "RunDirLockedError", "RunStoppedError"]


class DeployError(GeoflError):
    """A deployment cannot run: a site's data is missing, server and site configs differ,
    the SuperLink or a site cannot be reached in time. The message names the site."""


class OrbitError(GeoflError, ValueError):
    """An orbit input is invalid: a malformed TLE line (the message names the source and
    line), a location outside [-90, 90] x [-180, 180] (it names the field), a satellite
    sgp4 cannot propagate."""


__all__ += ["OrbitError"]


class HierarchyError(GeoflError, ValueError):
    """A paper-003 space-layer input is invalid: an empty cluster, κ < 0, a location outside
    [−90, 90] × [−180, 180], personalisation weights off the simplex. Names the field."""


__all__ += ["HierarchyError"]
