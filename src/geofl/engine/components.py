"""Build the parts of one (method, seed) run from its config: everything a scheduler drives.

This is the only place config objects turn into plain parameters: the model workspace, the
client program (trainer, algorithm client half, release steps, attack), the strategy
(tier + algorithm server half), the client-state store, the sampler and the network model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from geofl.algorithms import ALGORITHMS, AlgorithmContext
from geofl.attacks.backdoor import PoisoningAttack
from geofl.attacks.probe import AsrProbe
from geofl.client.augment import AugmentPipeline, build_pipeline
from geofl.client.batched import BatchedClients, batch_refusal
from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS
from geofl.client.state import ClientStateStore
from geofl.client.step import ClientPrivacy, ClientProgram
from geofl.client.trainer import LOCAL_TRAINERS, LocalTrainParams
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.config.validate import clients_per_round
from geofl.data.base import ArrayDataset, take_rows
from geofl.data.splitting.partition import Partition
from geofl.device import resolve_device
from geofl.engine.clients.threat import build_attack
from geofl.engine.input_checks import check_model_inputs, check_release_inputs
from geofl.engine.site_reports.evaluation import SiteHeldOut
from geofl.engine.uplink.build import build_uplink
from geofl.engine.uplink.ground import Uplink
from geofl.errors import ConfigError
from geofl.models.base import MODELS, FlatModel
from geofl.network.links import NETWORK_MODELS, NetworkModel
from geofl.privacy.budget import ledger_epsilon
from geofl.rng import random_source, torch_generator
from geofl.server.aggregators import AGGREGATORS
from geofl.server.defenses import DEFENSES
from geofl.server.lr_schedule import LR_SCHEDULES, LrSchedule
from geofl.server.sampling import SAMPLERS, ClientSampler
from geofl.server.strategy import Strategy
from geofl.server.tier import FlatTier
from geofl.server.weighting import WEIGHTINGS
from geofl.tasks.base import TASKS, Task

log = logging.getLogger("geofl")

__all__ = [
    "PreparedData",
    "ProgramParts",
    "RunComponents",
    "StatsSplit",
    "build_components",
    "build_program",
    "build_task",
    # re-exported from engine.input_checks: engine/sites.py imports them from here
    "check_model_inputs",
    "check_release_inputs",
    "client_datasets",
    "model_dims",
]


#: The split a run's data statistics are fitted on (:attr:`PreparedData.stats_from`).
StatsSplit = Literal["train", "val"]


@dataclass(frozen=True)
class PreparedData:
    """The global split of one seed, normalised with train statistics.

    Attributes:
        train: Train split (partitioned over clients).
        val: Validation split.
        test: Test split.
        mean: ``[1, C, 1, 1]`` float32 per-band mean subtracted from every split, or None
            when the inputs were not normalised (``data.normalize: none``).
        std: ``[1, C, 1, 1]`` float32 per-band std every split was divided by, or None.
        sites: With site-local data (``data.sites``), every site's own held-out splits in
            site order: evaluation is federated over them
            (:mod:`geofl.engine.site_reports.evaluation`) and ``val``/``test`` are only their
            concatenation; empty: ``val``/``test`` are the central held-out splits.
        stats_from: The split ``mean``/``std`` and the task's fitted statistics
            (``pos_weight: auto``) come from: ``train``, or ``val`` for a DP method, whose
            ε does not cover statistics pooled over the clients' training records
            (:func:`geofl.engine.experiment.method_stats_split`).
    """

    train: ArrayDataset
    val: ArrayDataset
    test: ArrayDataset
    mean: torch.Tensor | None = None
    std: torch.Tensor | None = None
    sites: tuple[SiteHeldOut, ...] = ()
    stats_from: StatsSplit = "train"


@dataclass(frozen=True)
class RunComponents:
    """Everything a scheduler needs for one (method, seed) run.

    Attributes:
        task: The learning task (loss, metrics, primary metric, label summary).
        workspace: The model whose flat vector clients train and the server evaluates.
        program: The client step's fixed parts.
        strategy: The server half of the algorithm.
        store: Per-client state (algorithm tensors and privacy ledgers).
        sampler: Who trains each round.
        network: Delivery of uploads.
        clients: Local data of every client, indexed by id.
        lr_schedule: η_l of each round (``train.lr_schedule``), or None: ``train.lr`` in
            every round and no η sent with the directives.
        probe: The attack's ASR probe on the test split (004 Eq. 15), or None.
        threat: The data-poisoning threat of the run (attackers, poisoned counts, trigger),
            JSON-ready for ``final.json["threat"]``, or None.
        uplink: The 003 ground-layer uplink (``method.uplink``), or None: uploads go
            through ``network`` unencoded.
        batched: The batched client step (``federation.batch_clients: auto`` and a
            program that can batch), or None: the sequential step.
    """

    task: Task
    workspace: FlatModel
    program: ClientProgram
    strategy: Strategy
    store: ClientStateStore
    sampler: ClientSampler
    network: NetworkModel
    clients: list[ClientData]
    lr_schedule: LrSchedule | None = None
    probe: AsrProbe | None = None
    threat: dict[str, Any] | None = None
    uplink: Uplink | None = None
    batched: BatchedClients | None = None


def build_task(cfg: ExperimentConfig, num_classes: int, train_targets: Any) -> Task:
    """The configured task, fitted on the train split's targets only.

    Args:
        cfg: The experiment (its ``task`` section).
        num_classes: C, the dataset's number of class (label, target) names.
        train_targets: The train split's targets.

    Raises:
        ConfigError: naming ``task.name`` when the targets do not fit the task (the
            task's builder checks them).
    """
    return TASKS.build(
        cfg.task.name, cfg.task.params, num_classes=num_classes, train_targets=train_targets
    )


#: Per-sample metadata a client keeps with its data (read on the client, e.g. by the
#: ``spatial_alpha`` release step, 001 Eq. 10); it never leaves the client.
CLIENT_METADATA = ("elevation_mean", "season")


def client_datasets(data: PreparedData, partition: Partition, task: Task) -> list[ClientData]:
    """Each client's slice of the train split, with its label summary
    (:meth:`~geofl.tasks.base.Task.label_summary`) and mean GSD.

    In-memory inputs are copied per client; stored inputs (``data.cache: mmap``) become an
    index view of the one shared store, read per mini-batch.
    """
    train = data.train
    gsd = partition.client_means(train.metadata.get("gsd_m"))
    meta = {k: train.metadata[k] for k in CLIENT_METADATA if k in train.metadata}
    out = []
    for k, idx in enumerate(torch.as_tensor(p) for p in partition.indices):
        targets = train.targets[idx]  # the rows; batches collate them (task.collate)
        out.append(
            ClientData(
                k,
                take_rows(train.inputs, idx),
                targets,
                task.label_summary(targets),
                classes=tuple(train.classes),
                gsd_m=gsd[k],
                bands=tuple(train.bands),
                band_mean=data.mean,
                band_std=data.std,
                metadata={key: np.asarray(v)[idx.numpy()] for key, v in meta.items()},
            )
        )
    return out


def model_dims(data: PreparedData, task: Task) -> tuple[int, int]:
    """``(in_channels, num_outputs)`` of the model a run of ``task`` on ``data`` builds
    (features for tabular inputs, bands for images; the task's output width)."""
    return len(data.train.bands), task.num_outputs


@dataclass(frozen=True)
class ProgramParts:
    """What one process needs to run client steps and the server half of a method.

    Attributes:
        task: The learning task, fitted on the train split.
        workspace: The model whose flat vector clients train.
        program: The client step's fixed parts.
        strategy: The server half of the algorithm.
    """

    task: Task
    workspace: FlatModel
    program: ClientProgram
    strategy: Strategy


def _flat_model(cfg: ExperimentConfig, seed: int, in_channels: int, num_outputs: int) -> FlatModel:
    """A fresh model of ``cfg.model``, initialised from (seed, "model_init")."""
    model = MODELS.build(
        cfg.model.name,
        cfg.model.params,
        in_channels=in_channels,
        num_classes=num_outputs,
        generator=torch_generator(seed, "model_init"),
    )
    return FlatModel(model, resolve_device(cfg.device))


def build_program(
    cfg: ExperimentConfig, method: MethodConfig, seed: int, data: PreparedData
) -> ProgramParts:
    """The task, model workspace, client program and strategy of ``method``.

    The simulator's run, a worker process (:mod:`geofl.engine.workers`) and a deployed
    client (:mod:`geofl.deploy`) all build their client program here, so the same config
    and seed give the same client step everywhere.
    """
    task = build_task(cfg, data.train.num_classes, data.train.targets)
    if data.stats_from == "val":  # checked on train, fitted on held-out labels (DP)
        task = build_task(cfg, data.val.num_classes, data.val.targets)
    in_channels, num_outputs = model_dims(data, task)
    make_model = partial(_flat_model, cfg, seed, in_channels, num_outputs)
    workspace = make_model()
    augments = cfg.train.augment if method.augment is None else method.augment
    augment = build_pipeline([(a.name, a.params) for a in augments], mean=data.mean, std=data.std)
    train = local_train_params(cfg, augment)
    fed = cfg.federation
    tier = FlatTier(
        WEIGHTINGS.build(method.weighting.name, method.weighting.params),
        AGGREGATORS.build(method.aggregator.name, method.aggregator.params),
        [DEFENSES.build(d.name, d.params) for d in method.defenses],
    )
    randomness = random_source(cfg.privacy.randomness)  # secure: this process's own key
    ctx = AlgorithmContext(
        tier,
        fed.server_lr,
        fed.num_clients,
        workspace.spec.numel,
        train,
        seed=seed,
        clients_per_round=clients_per_round(cfg),
        delta=cfg.privacy.delta,
        rounds=fed.rounds,
        model_factory=make_model,
        input_shape=tuple(int(s) for s in data.train.inputs.shape[1:]),
        num_classes=num_outputs,
        task=task,
        randomness=randomness,
    )
    algorithm = ALGORITHMS.build(method.algorithm.name, method.algorithm.params, ctx=ctx)
    attack = build_attack(cfg, method, seed, data.train)
    program = ClientProgram(
        trainer=LOCAL_TRAINERS.build(
            method.trainer.name,
            method.trainer.params,
            workspace=workspace,
            train=train,
            task=task,
        ),
        train=train,
        algorithm=algorithm.client,
        release=[RELEASE_STEPS.build(s.name, s.params) for s in method.release],
        attack=attack,
        privacy=ClientPrivacy(_ledger_epsilon(cfg), cfg.privacy.target_epsilon),
        randomness=randomness,
    )
    return ProgramParts(task, workspace, program, algorithm.strategy)


def build_components(
    cfg: ExperimentConfig,
    method: MethodConfig,
    seed: int,
    data: PreparedData,
    partition: Partition,
    state_dir: Path | None = None,
) -> RunComponents:
    """Instantiate every plug-in of ``method`` (config → plain parameters happens here).

    Args:
        cfg: The experiment.
        method: The method being run.
        seed: Experiment seed (model initialisation).
        data: Normalised global split.
        partition: Client index sets over ``data.train``.
        state_dir: Where memory-mapped client state lives (``federation.client_state:
            mmap``); ignored for in-memory state.
    """
    parts = build_program(cfg, method, seed, data)
    task, workspace, program = parts.task, parts.workspace, parts.program
    fed = cfg.federation
    store = ClientStateStore(
        fed.num_clients,
        program.state_specs(workspace.spec.numel),
        path=state_dir if fed.client_state == "mmap" else None,
    )
    clients = client_datasets(data, partition, task)
    attack = program.attack
    poisoning = attack if isinstance(attack, PoisoningAttack) else None
    return RunComponents(
        task=task,
        workspace=workspace,
        program=program,
        strategy=parts.strategy,
        store=store,
        sampler=SAMPLERS.build(
            fed.sampling.name, fed.sampling.params, participation=fed.participation
        ),
        network=NETWORK_MODELS.build(method.network.name, method.network.params),
        clients=clients,
        lr_schedule=_lr_schedule(cfg),
        probe=None if poisoning is None else poisoning.probe(data.test.targets, task.predict),
        threat=None if poisoning is None else poisoning.describe(clients),
        uplink=None
        if method.uplink is None
        else build_uplink(method.uplink, data.train.metadata, partition.indices, seed),
        batched=_batched(cfg, parts, clients),
    )


def _batched(
    cfg: ExperimentConfig, parts: ProgramParts, clients: Sequence[ClientData]
) -> BatchedClients | None:
    """The batched client step when ``federation.batch_clients`` is ``auto`` and the
    program can batch (:func:`~geofl.client.batched.batch_refusal`); else None, and the
    reason it cannot is logged."""
    if cfg.federation.batch_clients != "auto":
        return None
    reason = batch_refusal(parts.program, parts.workspace, parts.task, clients)
    if reason is not None:
        log.info("federation.batch_clients: auto: clients step one by one (%s)", reason)
        return None
    return BatchedClients(parts.program, parts.workspace, parts.task)


def local_train_params(
    cfg: ExperimentConfig, augment: AugmentPipeline | None = None
) -> LocalTrainParams:
    """The client's plain optimisation settings from ``cfg.train`` (the learning-rate
    schedule is the server's; augmentations are built by the caller, they need data
    statistics)."""
    plain = cfg.train.model_dump(exclude={"augment", "lr_schedule"})
    return LocalTrainParams(**plain, augment=augment or AugmentPipeline())


def _ledger_epsilon(cfg: ExperimentConfig) -> Callable[[Sequence[Mapping[str, Any]]], float]:
    """ε(δ) of a client's ledger with the run's accountant (``cfg.privacy``)."""
    return partial(
        ledger_epsilon,
        accountant=cfg.privacy.accountant.name,
        params=cfg.privacy.accountant.params,
        delta=cfg.privacy.delta,
    )


def _lr_schedule(cfg: ExperimentConfig) -> LrSchedule | None:
    """The configured schedule of η_l over rounds from ``train.lr`` (001 §6.1.2), or None."""
    sched = cfg.train.lr_schedule
    if sched is None:
        return None
    return LR_SCHEDULES.build(
        sched.name, sched.params, base_lr=cfg.train.lr, rounds=cfg.federation.rounds
    )


def check_first_round_budget(cfg: ExperimentConfig, method: MethodConfig, sizes: list[int]) -> None:
    """Refuse a target ε that some client exceeds in its very first round.

    A trainer whose parameters can say what a round releases (DP-SGD's
    ``planned_release``) is asked for each distinct local-data size.

    Args:
        cfg: The experiment.
        method: The method to check.
        sizes: Local training-set size of each client.

    Raises:
        ConfigError: naming ``privacy.target_epsilon``, with the ε one round gives.
    """
    target = cfg.privacy.target_epsilon
    params = LOCAL_TRAINERS.validate(method.trainer.name, method.trainer.params)
    plan = getattr(params, "planned_release", None)
    if target is None or plan is None:
        return
    train = local_train_params(cfg)
    epsilon = _ledger_epsilon(cfg)
    for n in sorted(set(sizes)):
        eps = epsilon(plan(n, train))
        if eps > target:
            raise ConfigError(
                "privacy.target_epsilon",
                f"{target:g} is exceeded by one round of {method.name} on a client with "
                f"{n} examples (ε = {eps:.3g}); raise it, the noise multiplier or "
                "batch_size/steps trade-off, or give clients more data",
            )
