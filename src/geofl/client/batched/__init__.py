"""The batched client step: many small clients of one architecture and one local program
trained as one stacked computation (issue 36; FedJAX and pfl-research simulate cross-device
cohorts this way).

Their parameters are stacked ``[K, D]`` and every local step of the cohort (or of a chunk
that fits memory) is one :func:`torch.func.vmap` of :func:`torch.func.grad` over
:func:`torch.func.functional_call` — LocalSGD/Adam (FedAvg), FedProx's proximal term, and
DP-SGD's per-sample clipping with each client's own noise. The draws come from the same
per-(seed, round, client, purpose) generators as the sequential step's, so a batched
round's models equal the sequential round's to float32 rounding (the batched kernels sum
in another order), with the same cohort, ledgers and ε. ``federation.batch_clients:
auto`` turns it on; a program that cannot batch runs the sequential step.

Modules: :mod:`.plan` (one client's draws), :mod:`.stacked` (the model over stacked
parameters), :mod:`.optim` (SGD/Adam over rows), :mod:`.train` (a chunk's local steps),
:mod:`.runner` (the cohort, and :func:`batch_refusal`).
"""

from geofl.client.batched.plan import BatchJob
from geofl.client.batched.runner import (
    DEFAULT_MAX_BYTES,
    BatchedClients,
    batch_refusal,
    collections_paused,
)

__all__ = ["DEFAULT_MAX_BYTES", "BatchJob", "BatchedClients", "batch_refusal", "collections_paused"]
