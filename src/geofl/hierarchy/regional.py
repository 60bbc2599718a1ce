"""LEO regional aggregation: redundancy filter and regional FedAvg (003 §2.2.3, Alg. 3 l. 2–4).

Redundancy filter (Alg. 3 line 3, "filter out redundant updates via cosine similarity"; the
paper names neither the pairs nor the threshold). Our choice: in buffer (arrival) order, an
update is *redundant* when its cosine similarity to an update already *kept* in this pass
exceeds ``threshold``; the first update is always kept, so a pass never filters everything.
Comparing against kept updates only (not against dropped ones) means a chain of slightly
different updates cannot drop each other transitively. Cosines are taken of the updates
relative to ``reference`` (pass the global model the drivers started from: the cosine of two
nearby weight vectors is ≈ 1, as the ground checkpointer notes, :mod:`geofl.client.
checkpointer`), or of the rows as given when ``reference`` is None. A zero row has cosine 0
with everything (never redundant, never makes another redundant). ``threshold`` ≥ 1 keeps
everything (the filter is off).

Regional FedAvg (Alg. 3 line 4): w̄_l = (1/N_l) Σ_i w_i over the N_l kept models —
unweighted, as the paper writes it.
"""

from __future__ import annotations

import torch

from geofl.errors import HierarchyError

__all__ = ["redundancy_filter", "regional_fedavg"]


def redundancy_filter(
    models: torch.Tensor, *, threshold: float, reference: torch.Tensor | None = None
) -> torch.Tensor:
    """``[N]`` bool keep mask (see the module docstring).

    Args:
        models: ``[N, D]`` driver models (or deltas) buffered in this pass, arrival order.
        threshold: cosine above which an update duplicates a kept one, in [−1, ∞).
        reference: ``[D]`` subtracted from every row before the cosines (e.g. the global
            model); None compares the rows as given.

    Cost: one ``[N, N]`` Gram matrix in float64, then an O(N²) scan (N = drivers per pass).
    """
    if models.ndim != 2:
        raise HierarchyError(f"models: expected [N, D], got shape {tuple(models.shape)}")
    if not threshold >= -1.0:
        raise HierarchyError(f"redundancy threshold: need a cosine ≥ −1, got {threshold!r}")
    x = models.detach().to(torch.float64)
    if reference is not None:
        if reference.shape != (models.shape[1],):
            raise HierarchyError(
                f"reference: expected [{models.shape[1]}], got {tuple(reference.shape)}"
            )
        x = x - reference.detach().to(torch.float64)
    n = x.shape[0]
    norms = torch.linalg.vector_norm(x, dim=1)
    unit = x / torch.where(norms > 0, norms, 1.0)[:, None]  # zero rows stay zero: cosine 0
    cos = (unit @ unit.T).clamp(-1.0, 1.0)  # rounding can put a self-cosine at 1 + ulp
    keep = torch.zeros(n, dtype=torch.bool)
    for i in range(n):
        keep[i] = not bool((cos[i, :i][keep[:i]] > threshold).any())
    return keep


def regional_fedavg(models: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Alg. 3 line 4: ``[D]`` mean of the kept rows of ``models`` ``[N, D]`` (1/N_l each).

    The sum is taken in float64 and cast back to the dtype of ``models``.

    Raises:
        HierarchyError: when no model is kept (an empty pass has no regional model).
    """
    if models.ndim != 2:
        raise HierarchyError(f"models: expected [N, D], got shape {tuple(models.shape)}")
    if keep is None:
        keep = torch.ones(models.shape[0], dtype=torch.bool)
    if keep.shape != (models.shape[0],) or keep.dtype != torch.bool:
        raise HierarchyError(f"keep: expected a [{models.shape[0]}] bool mask")
    n = int(keep.sum())
    if n == 0:
        raise HierarchyError("regional FedAvg: no model kept in this pass (N_l = 0)")
    return (models[keep].to(torch.float64).sum(dim=0) / n).to(models.dtype)
