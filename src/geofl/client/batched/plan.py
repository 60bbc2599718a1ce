"""One client's part of a batched round: its generators, its batches, drawn as it would draw
them alone.

A :class:`ClientPlan` replays the sequential trainer's draws from the same per-(seed,
round, client, purpose) generators (:class:`~geofl.client.step.ClientStreams`): LocalSGD's
mini-batch permutations (:func:`~geofl.client.data.batch_indices`), or DP-SGD's Poisson
batch and then its Gaussian noise at every step (001 Eq. 16), in that order, and the
augmentations from their own stream. The batches are drawn one step at a time, when the
stacked computation needs them, so memory holds one step of the chunk, never a round.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from geofl.client.data import ClientData, batch_indices
from geofl.client.dpsgd import DpSgd, dp_sgd_plan
from geofl.client.state import ClientState
from geofl.client.step import ClientProgram, ClientStreams
from geofl.client.trainer import GradCorrection, LocalSGD, LocalTrainParams, train_for_round
from geofl.rng import RandomSource
from geofl.update import ClientDirectives

__all__ = ["BatchJob", "ClientPlan", "StepBatch"]


@dataclass(frozen=True)
class BatchJob:
    """One client step for the batched runner: what :func:`~geofl.client.step.client_step`
    takes, with the model it trains from."""

    params: torch.Tensor
    data: ClientData
    state: ClientState
    directives: ClientDirectives
    streams: ClientStreams


@dataclass(frozen=True)
class StepBatch:
    """One local step of one client: its inputs, targets and (DP-SGD) noise ``[D]``."""

    x: torch.Tensor
    y: torch.Tensor
    noise: torch.Tensor | None = None


@dataclass
class ClientPlan:
    """A client's round, as the sequential trainer would run it.

    Attributes:
        job: The step it runs.
        source: Its random source (``program.randomness.for_step()``: a new secret per
            step in secure mode).
        train: The round's settings (η_l from the directives).
        steps: How many local steps it takes.
        correction: Its algorithm's gradient correction, or None.
        dp: The DP-SGD trainer, or None for plain local training.
        clip: C_k of this round (DP-SGD).
        q: Its Poisson sampling probability (DP-SGD).
    """

    job: BatchJob
    source: RandomSource
    train: LocalTrainParams
    steps: int
    correction: GradCorrection | None
    dp: DpSgd | None = None
    clip: float = 0.0
    q: float = 0.0
    _gen: torch.Generator | None = None
    _aug: torch.Generator | None = None
    _batches: Iterator[torch.Tensor] | None = None
    _micro: int = 0
    noisy_norms: list[float] = field(default_factory=list)

    @classmethod
    def build(cls, program: ClientProgram, job: BatchJob, dp: DpSgd | None) -> ClientPlan:
        """The plan of ``job`` under ``program`` (its generators made, nothing drawn)."""
        source = program.randomness.for_step()
        state, d = job.state, job.directives
        correction = program.algorithm.correction(job.params, state, d)
        trainer = program.trainer
        assert isinstance(trainer, LocalSGD)  # batch_refusal: LocalSGD or DpSgd
        train = train_for_round(trainer.train_cfg, d)
        gen = job.streams.torch("train", source)
        aug = job.streams.torch("augment", source) if train.augment else None
        n = len(job.data)
        if dp is None:
            batches = list(
                batch_indices(
                    n,
                    train.batch_size,
                    epochs=train.local_epochs,
                    steps=train.local_steps,
                    generator=gen,
                )
            )
            plan = cls(job, source, train, len(batches), correction, _gen=gen, _aug=aug)
            plan._batches = iter(batches)
            return plan
        q, steps = dp_sgd_plan(n, train, dp.params.sampling_probability)
        clip = dp.round_clip(state.tensors)
        plan = cls(job, source, train, steps, correction, dp, clip, q, _gen=gen, _aug=aug)
        plan._micro = dp.params.micro_batch
        return plan

    def next_batch(self, task: Any, dim: int) -> StepBatch:
        """The next step's batch (and noise ``[dim]``), drawn as the sequential trainer
        draws it: LocalSGD augments the whole batch, DP-SGD each micro-batch."""
        data, gen = self.job.data, self._gen
        assert gen is not None
        if self.dp is None:
            assert self._batches is not None
            idx = next(self._batches)
            return StepBatch(self._augment(data.inputs[idx]), task.collate(data.targets, idx))
        n = len(data)
        idx = (torch.rand(n, generator=gen) < self.q).nonzero().flatten()
        parts = [self._augment(data.inputs[c]) for c in torch.split(idx, self._micro)]
        x = torch.cat(parts) if parts else data.inputs[idx]
        noise = torch.randn(dim, generator=gen)
        return StepBatch(x, task.collate(data.targets, idx), noise)

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        return x if self._aug is None else self.train.augment(x, self._aug)
