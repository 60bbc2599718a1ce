"""Issue 36: the cohort-wide pieces of the batched client step equal the per-client
reference on adversarial inputs.

* :func:`~geofl.client.batched.train.rank_aucs` (the binary task's running ROC-AUC of a
  whole chunk) equals the binary task's accumulator run for each client alone, to the bit:
  ties, −0/+0, a single sample, one class, NaN/±inf scores, padding, several steps.
* :func:`~geofl.client.batched.train._stack` (one padding call per tensor) equals the
  per-client copy it replaced: unequal batches, empty ones, clients without a batch.
"""

from __future__ import annotations

import math

import pytest
import torch

from geofl.client.batched.plan import StepBatch
from geofl.client.batched.train import _stack, rank_aucs
from geofl.tasks.binary import BinaryTask

NAN, INF = float("nan"), float("inf")


def _reference_auc(steps: list[tuple[list[float], list[int]]]) -> float:
    """The accumulator the sequential trainer runs for one client (its steps' batches)."""
    acc = BinaryTask().accumulator()
    for scores, labels in steps:
        acc.update(torch.tensor(scores).view(-1, 1), torch.tensor(labels), 0.0)
    return float(acc.compute().values["roc_auc"])


def _ranks(clients: list[list[tuple[list[float], list[int]]]]) -> list[tuple[torch.Tensor, ...]]:
    """The chunk's per-step ``(logits, positive, valid)``, padded with junk where a client
    has fewer samples (or no batch) in a step."""
    n_steps = max(len(c) for c in clients)
    out = []
    for s in range(n_steps):
        width = max([len(c[s][0]) for c in clients if s < len(c)] + [1])
        logits = torch.full((len(clients), width), 7.0)  # padding: must not count
        positive = torch.ones(len(clients), width, dtype=torch.bool)
        valid = torch.zeros(len(clients), width, dtype=torch.bool)
        for i, c in enumerate(clients):
            if s < len(c):
                scores, labels = c[s]
                m = len(scores)
                logits[i, :m] = torch.tensor(scores)
                positive[i, :m] = torch.tensor(labels) != 0
                valid[i, :m] = True
        out.append((logits, positive, valid))
    return out


CASES = {
    "plain": [([0.3, -1.2, 2.0, 0.1], [1, 0, 1, 0])],
    "ties_across_classes": [([0.5, 0.5, 0.5, -1.0, 2.0], [1, 0, 1, 0, 0])],
    "all_tied": [([1.0, 1.0, 1.0, 1.0], [0, 1, 1, 0])],
    "signed_zeros": [([-0.0, 0.0, 0.0, -0.0, 1e-30], [1, 0, 1, 0, 1])],
    "single_sample": [([0.2], [1])],
    "one_class": [([0.1, 0.4, -2.0], [0, 0, 0])],
    "all_positive": [([0.1, 0.4], [1, 1])],
    "nan_score": [([0.1, NAN, -2.0], [1, 0, 0])],
    "inf_score": [([0.1, INF, -2.0], [1, 0, 0])],
    "minus_inf_score": [([-INF, 0.3], [1, 0])],
    "several_steps": [([0.3, -0.3], [1, 0]), ([0.3, 0.9, -5.0], [0, 1, 1]), ([0.0], [0])],
    "huge_and_tiny": [([3.0e38, -3.0e38, 1e-45, -1e-45], [1, 0, 0, 1])],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rank_aucs_equals_the_accumulator_alone(name: str) -> None:
    """One client per case, inside a chunk of every case (so padding surrounds it)."""
    names = sorted(CASES)
    got = rank_aucs(_ranks([CASES[n] for n in names]))
    want = _reference_auc(CASES[name])
    value = got[names.index(name)]
    assert (math.isnan(value) and math.isnan(want)) or value == want, (value, want)


def test_rank_aucs_random_chunk_with_unequal_steps_to_the_bit() -> None:
    gen = torch.Generator().manual_seed(0)
    clients = []
    for i in range(40):
        steps = []
        for _ in range(1 + i % 3):
            m = int(torch.randint(1, 9, (1,), generator=gen))
            # coarse scores: many ties, within and across steps
            scores = (torch.randint(-3, 4, (m,), generator=gen) / 2).tolist()
            labels = torch.randint(0, 2, (m,), generator=gen).tolist()
            steps.append((scores, labels))
        clients.append(steps)
    got = rank_aucs(_ranks(clients))
    for value, steps in zip(got, clients, strict=True):
        want = _reference_auc(steps)
        assert (math.isnan(value) and math.isnan(want)) or value == want


def _reference_stack(batches: list[StepBatch | None]) -> tuple[torch.Tensor, ...]:
    """The per-client copies ``_stack`` made before issue 36's vectorisation."""
    ref = next(b for b in batches if b is not None)
    width = max(1, max(b.x.shape[0] for b in batches if b is not None))
    k = len(batches)
    x = ref.x.new_zeros((k, width, *ref.x.shape[1:]))
    y = ref.y.new_zeros((k, width, *ref.y.shape[1:]))
    valid = torch.zeros(k, width)
    for i, b in enumerate(batches):
        if b is None or b.x.shape[0] == 0:
            continue
        m = b.x.shape[0]
        x[i, :m], y[i, :m], valid[i, :m] = b.x, b.y, 1.0
    weight = valid / valid.sum(1, keepdim=True).clamp_min(1.0)
    return x, y, weight, valid


@pytest.mark.parametrize(
    "sizes",
    [(3, 0, 5, None, 1), (4,), (0, 0), (None, 2, None), (8, 8, 8)],
    ids=["mixed", "single", "all_empty", "none_around", "equal"],
)
def test_stack_equals_the_per_client_copy(sizes: tuple[int | None, ...]) -> None:
    gen = torch.Generator().manual_seed(1)
    batches: list[StepBatch | None] = []
    for m in sizes:
        if m is None:
            batches.append(None)
            continue
        x = torch.randn(m, 2, 3, generator=gen)
        batches.append(StepBatch(x, torch.randint(0, 2, (m,), generator=gen)))
    got = _stack(batches, [])
    want = _reference_stack(batches)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w)
