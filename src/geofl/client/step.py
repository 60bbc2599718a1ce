"""The client step: one free function from what a client has to what it uploads.

``client_step(global_params, data, state, directives, streams)`` → :class:`ClientResult`:
a malicious client's data poisoning, in attack rounds → local training (with the
algorithm's gradient correction) → the algorithm's state update
and extra upload tensors → an attack, for a malicious client → the release pipeline
(clip, noise, …). The simulator, a worker process and a Flower ClientApp call this same
function; what varies per deployment is only where ``state`` is kept.

Randomness comes from :class:`ClientStreams`, generators derived from (seed, round, client,
purpose), so a client's result does not depend on which process ran it or what ran before.
The program's :class:`~geofl.rng.RandomSource` turns those keys into generators: seeded
(anyone with the keys regenerates them) or secure (keyed by a secret the client's process
holds; ``privacy.randomness``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from geofl.client.data import ClientData
from geofl.client.release import ReleaseStep, apply_release, planned_releases
from geofl.client.state import ClientState, StateSpec
from geofl.client.trainer import (
    GradCorrection,
    LocalTrainer,
    LocalTrainParams,
    train_for_round,
)
from geofl.errors import BudgetExhaustedError
from geofl.rng import SEEDED, Key, RandomSource
from geofl.update import ClientDirectives, ClientUpdate, payload_bytes

__all__ = [
    "ClientAlgorithm",
    "ClientBehaviour",
    "ClientPrivacy",
    "ClientProgram",
    "ClientResult",
    "ClientStreams",
    "DataPoisoning",
    "PlainClient",
    "check_budget",
    "client_step",
    "dp_events_of",
    "finish_step",
]


@dataclass(frozen=True)
class ClientStreams:
    """Per-purpose generators of one client in one round.

    Attributes:
        keys: ``(seed, "round", r, "client", k)``; a purpose is appended per stream.
    """

    keys: tuple[Key, ...]

    def torch(self, purpose: str, source: RandomSource = SEEDED) -> torch.Generator:
        """The generator for ``purpose`` (``train``, ``attack``, ``release``, …) from
        ``source`` (the program's ``randomness``)."""
        return source.torch(*self.keys, purpose)


class ClientBehaviour(Protocol):
    """A malicious behaviour applied to the trained update of its clients
    (:mod:`geofl.attacks.client` registers them)."""

    clients: frozenset[int]

    def __call__(
        self, update: ClientUpdate, directives: ClientDirectives, generator: torch.Generator
    ) -> ClientUpdate: ...


@runtime_checkable
class DataPoisoning(Protocol):
    """A behaviour that also poisons its clients' training data before local training
    (004 §2.3: the data-poisoning backdoors of :mod:`geofl.attacks.backdoor`)."""

    def poison(self, data: ClientData, round_idx: int) -> ClientData:
        """The data the client trains on in round ``round_idx`` (``data`` when it does not
        attack that round); ``data`` itself is never modified."""
        ...


@runtime_checkable
class ObservesBroadcast(Protocol):
    """A behaviour that also sees what its clients receive: the global model and their
    directives (an adaptive attacker's public knowledge, :mod:`geofl.attacks.adaptive`)."""

    def observe(self, global_params: torch.Tensor, directives: ClientDirectives) -> None:
        """Called before the round's poisoning and training of one of its clients."""
        ...


class ClientAlgorithm(Protocol):
    """The client half of a federated algorithm (the strategy is the server half)."""

    def state_specs(self, dim: int) -> Mapping[str, StateSpec]:
        """Per-client state tensors this algorithm keeps (name → spec) for D = ``dim``."""
        ...

    def correction(
        self, global_params: torch.Tensor, state: ClientState, directives: ClientDirectives
    ) -> GradCorrection | None:
        """The gradient correction of the local objective, or None for plain training."""
        ...

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        """After local training: the update to upload (extra tensors/scalars added) and
        the client's new state tensors; ``global_params`` (``[D]``) is the model this
        round started from."""
        ...


class PlainClient:
    """Stateless local training (FedAvg and every server-side-only algorithm).

    Attributes:
        batchable: Its steps may run as one batched computation
            (:mod:`geofl.client.batched`): the correction and ``finish`` read only the
            client's own state, so running every client's ``correction`` before any
            ``finish`` changes nothing. A subclass declares it again in its own body (it
            is not inherited: :func:`geofl.client.batched.batch_refusal` reads the class's
            own attribute).
    """

    batchable: ClassVar[bool] = True

    def state_specs(self, dim: int) -> Mapping[str, StateSpec]:
        return {}

    def correction(
        self, global_params: torch.Tensor, state: ClientState, directives: ClientDirectives
    ) -> GradCorrection | None:
        return None

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        return update, {}


@dataclass(frozen=True)
class ClientPrivacy:
    """How a client accounts for its own releases.

    Attributes:
        epsilon: ε(δ) of a ledger (a sequence of DpEvent specs), with the run's accountant
            (:func:`geofl.privacy.budget.ledger_epsilon`).
        target_epsilon: The client declines a round whose planned release would take its ε
            past this; None: no limit.
    """

    epsilon: Callable[[Sequence[Mapping[str, Any]]], float]
    target_epsilon: float | None = None


@dataclass(frozen=True)
class ClientProgram:
    """The fixed parts of a client step, built once per run from the method's config.

    Attributes:
        trainer: Local optimisation (owns the model workspace).
        train: Its plain settings (the algorithm's state update may need η_l, ρ).
        algorithm: The client half of the algorithm.
        release: Release steps applied to Δw before upload, in order.
        attack: Malicious behaviour, applied when the client is one of its attackers.
        privacy: How the client accounts for its releases (ε after each round, and the
            budget stop), or None when nothing is accounted on the client.
        randomness: Where the client's generators come from (``privacy.randomness``):
            seeded, or a secret held by the process running the client.
    """

    trainer: LocalTrainer
    train: LocalTrainParams
    algorithm: ClientAlgorithm = field(default_factory=PlainClient)
    release: Sequence[ReleaseStep] = ()
    attack: ClientBehaviour | None = None
    privacy: ClientPrivacy | None = None
    randomness: RandomSource = SEEDED

    def state_specs(self, dim: int) -> dict[str, StateSpec]:
        """Every per-client state tensor: the algorithm's and the trainer's.

        Raises:
            ValueError: if both name the same tensor.
        """
        algo, trainer = self.algorithm.state_specs(dim), self.trainer.state_specs()
        clash = set(algo) & set(trainer)
        if clash:
            raise ValueError(f"algorithm and trainer both keep client state {sorted(clash)}")
        return {**algo, **trainer}


@dataclass(frozen=True)
class ClientResult:
    """What a client step produces.

    Attributes:
        update: What is uploaded: Δw, extra named tensors and metadata.
        state: The client's new state (tensors and privacy ledger), kept on the client.
        local_log: Client-local report of the release steps (never sent to the server).
        epsilon: The client's ε(δ) after this round, when it accounts and released
            something private this round; else None.
    """

    update: ClientUpdate
    state: ClientState
    local_log: Mapping[str, Any]
    epsilon: float | None = None


def dp_events_of(local_log: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The DpEvents a release pipeline reported, in order (``{"dp_event": …}`` entries)."""
    return [
        report["dp_event"]
        for report in local_log.values()
        if isinstance(report, Mapping) and report.get("dp_event")
    ]


def client_step(
    program: ClientProgram,
    global_params: torch.Tensor,
    data: ClientData,
    state: ClientState,
    directives: ClientDirectives,
    streams: ClientStreams,
) -> ClientResult:
    """Run one client for one round.

    Args:
        program: Trainer, algorithm, release steps and attack.
        global_params: ``[D]`` broadcast model (not modified).
        data: The client's local data.
        state: Its state from the previous rounds it took part in.
        directives: The server's per-client directives and payload tensors.
        streams: Its random generators for this round.

    Returns:
        The upload, the new client state and the client-local log.
    """
    check_budget(program, data, state, directives)
    attack = program.attack
    malicious = attack is not None and data.client_id in attack.clients
    train_data = data
    if malicious and isinstance(attack, ObservesBroadcast):
        attack.observe(global_params, directives)
    if malicious and isinstance(attack, DataPoisoning):
        train_data = attack.poison(data, directives.round)
    alg, source = program.algorithm, program.randomness.for_step()  # secure: a new key
    correction = alg.correction(global_params, state, directives)
    trainer_state = {k: state.tensors[k] for k in program.trainer.state_specs()}
    kwargs: dict[str, Any] = {"correction": correction}
    if program.train.augment:  # own stream: the batch schedule's draws stay as without
        kwargs["augment_generator"] = streams.torch("augment", source)
    if trainer_state:
        kwargs["state"] = trainer_state
    update = program.trainer(
        global_params, train_data, directives, streams.torch("train", source), **kwargs
    )
    return finish_step(program, global_params, data, state, directives, streams, source, update)


def finish_step(
    program: ClientProgram,
    global_params: torch.Tensor,
    data: ClientData,
    state: ClientState,
    directives: ClientDirectives,
    streams: ClientStreams,
    source: RandomSource,
    update: ClientUpdate,
) -> ClientResult:
    """Everything after local training, shared by :func:`client_step` and the batched
    step (:mod:`geofl.client.batched`), so both upload, release and account alike: the
    algorithm's state update, the attack, the release pipeline and the privacy ledger.

    Args:
        program: As in :func:`client_step`.
        global_params: ``[D]`` the model this client trained from.
        data: The client's (unpoisoned) local data.
        state: Its state before this round.
        directives: Its directives.
        streams: Its generators' keys.
        source: The step's random source (``program.randomness.for_step()``).
        update: What its trainer returned.
    """
    attack = program.attack
    malicious = attack is not None and data.client_id in attack.clients
    alg = program.algorithm
    trainer_state = {k: state.tensors[k] for k in program.trainer.state_specs()}
    kept = update.local_state
    if kept:  # an empty one is left as it is: one copy fewer per client
        update = replace(update, local_state={})
    train = train_for_round(program.train, directives)  # the round's η_l, if scheduled
    update, new_tensors = alg.finish(update, state, directives, train, global_params=global_params)
    if attack is not None and malicious:
        update = attack(update, directives, streams.torch("attack", source))
    if program.release:  # no steps draw nothing: the generator is not even made
        update = apply_release(
            update,
            program.release,
            data=data,
            directives=directives,
            generator=streams.torch("release", source),
        )
    sent = payload_bytes(update.delta, update.tensors)
    if update.meta.bytes_sent != sent:  # e.g. extra tensors the algorithm added
        update = replace(update, meta=replace(update.meta, bytes_sent=sent))
    released = dp_events_of(update.local_log)
    events = (*state.dp_events, *released)
    eps = program.privacy.epsilon(events) if program.privacy and released else None
    new_state = ClientState({**trainer_state, **kept, **new_tensors}, events)
    return ClientResult(update, new_state, update.local_log, eps)


def check_budget(
    program: ClientProgram, data: ClientData, state: ClientState, directives: ClientDirectives
) -> None:
    """Decline the round if its planned release — the trainer's (DP-SGD's steps) and the
    release steps' (a noisy count, a noisy update) — would take the client's ε past its
    target: the ε checked is the one the client reports after the round.

    Raises:
        BudgetExhaustedError: with the ε the round would reach.
    """
    privacy = program.privacy
    if privacy is None or privacy.target_epsilon is None:
        return
    planned = [
        *program.trainer.planned_release(len(data)),
        *planned_releases(program.release, data, directives),
    ]
    if not planned:
        return
    eps = privacy.epsilon((*state.dp_events, *planned))
    if eps > privacy.target_epsilon:
        raise BudgetExhaustedError(data.client_id, eps, privacy.target_epsilon)
