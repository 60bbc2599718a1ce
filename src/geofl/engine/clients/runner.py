"""Where a round's client steps run: the interface between the scheduler and its runners.

The scheduler (:class:`~geofl.engine.scheduler.SyncScheduler`) runs client steps in its own
process unless it is given a :class:`ClientRunner` — worker processes
(:mod:`geofl.engine.workers`) or Flower sites (:mod:`geofl.deploy.server`). A runner gets
one :class:`ClientJob` per client and yields one :data:`StepOutcome` per job, in job order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from geofl.client.state import ClientState
from geofl.client.step import ClientResult
from geofl.errors import BudgetExhaustedError
from geofl.update import ClientDirectives

__all__ = ["ClientJob", "ClientRunner", "LostUpload", "StepOutcome"]


@dataclass(frozen=True)
class ClientJob:
    """One client step to run: its directives, its committed state and, when clients hold
    different model versions, the model it starts from.

    Attributes:
        directives: The round's directives for the client.
        state: The client's committed state.
        held: ``[D]`` the model this client trains from — in the asynchronous 003
            hierarchy a tractor trains from the global version it last adopted (or its
            personalized model), not the GEO's newest; None: the round's global model.
    """

    directives: ClientDirectives
    state: ClientState
    held: torch.Tensor | None = None


@dataclass(frozen=True)
class LostUpload:
    """A client step whose upload never came back (a worker or site that failed or missed
    the round's deadline); recorded like an upload lost in transit."""

    client: int
    detail: str


#: What a runner yields per job, in job order.
StepOutcome = ClientResult | BudgetExhaustedError | LostUpload


class ClientRunner(Protocol):
    """Runs a round's client steps somewhere else (worker processes, Flower sites).

    Called with the round's global model (``[D]``, read-only) and its jobs; a job whose
    :attr:`ClientJob.held` is set starts from that model instead. Yields one outcome per
    job, in job order — the scheduler consumes them in that order, so the
    round is the same whichever process ran which client.
    """

    def __call__(
        self, global_params: torch.Tensor, jobs: Sequence[ClientJob]
    ) -> Iterator[StepOutcome]: ...
