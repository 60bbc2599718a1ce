"""Build the parts of one (method, seed) run from its config: everything a scheduler drives.

This is the only place config objects turn into plain parameters: the model workspace, the
client program (trainer, algorithm client half, release steps, attack), the strategy
(tier + algorithm server half), the client-state store, the sampler and the network model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from geofl.algorithms import ALGORITHMS, AlgorithmContext
from geofl.attacks.client import ATTACKS
from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS
from geofl.client.state import ClientStateStore
from geofl.client.step import ClientProgram
from geofl.client.trainer import LOCAL_TRAINERS, LocalTrainParams
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.data.base import ArrayDataset, take_rows
from geofl.data.partition import Partition
from geofl.models.base import MODELS, FlatModel
from geofl.network.links import NETWORK_MODELS, NetworkModel
from geofl.rng import torch_generator
from geofl.server.aggregators import AGGREGATORS
from geofl.server.defenses import DEFENSES
from geofl.server.sampling import SAMPLERS, ClientSampler
from geofl.server.strategy import Strategy
from geofl.server.tier import FlatTier
from geofl.server.weighting import WEIGHTINGS

__all__ = ["PreparedData", "RunComponents", "build_components", "client_datasets"]


@dataclass(frozen=True)
class PreparedData:
    """The global split of one seed, normalised with train statistics."""

    train: ArrayDataset
    val: ArrayDataset
    test: ArrayDataset


@dataclass(frozen=True)
class RunComponents:
    """Everything a scheduler needs for one (method, seed) run.

    Attributes:
        workspace: The model whose flat vector clients train and the server evaluates.
        program: The client step's fixed parts.
        strategy: The server half of the algorithm.
        store: Per-client state (algorithm tensors and privacy ledgers).
        sampler: Who trains each round.
        network: Delivery of uploads.
        clients: Local data of every client, indexed by id.
    """

    workspace: FlatModel
    program: ClientProgram
    strategy: Strategy
    store: ClientStateStore
    sampler: ClientSampler
    network: NetworkModel
    clients: list[ClientData]


def client_datasets(data: PreparedData, partition: Partition) -> list[ClientData]:
    """Each client's slice of the train split, with its label histogram and mean GSD.

    In-memory inputs are copied per client; stored inputs (``data.cache: mmap``) become an
    index view of the one shared store, read per mini-batch.
    """
    train = data.train
    gsd = partition.client_means(train.metadata.get("gsd_m"))
    return [
        ClientData(
            k,
            take_rows(train.inputs, idx),
            train.targets[idx],
            partition.histograms[k],
            classes=tuple(train.classes),
            gsd_m=gsd[k],
        )
        for k, idx in enumerate(torch.as_tensor(p) for p in partition.indices)
    ]


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
    model = MODELS.build(
        cfg.model.name,
        cfg.model.params,
        in_channels=len(data.train.bands),
        num_classes=data.train.num_classes,
        generator=torch_generator(seed, "model_init"),
    )
    workspace = FlatModel(model)
    train = LocalTrainParams(**cfg.train.model_dump())
    fed = cfg.federation
    tier = FlatTier(
        WEIGHTINGS.build(method.weighting.name, method.weighting.params),
        AGGREGATORS.build(method.aggregator.name, method.aggregator.params),
        [DEFENSES.build(d.name, d.params) for d in method.defenses],
    )
    ctx = AlgorithmContext(tier, fed.server_lr, fed.num_clients, workspace.spec.numel, train)
    algorithm = ALGORITHMS.build(method.algorithm.name, method.algorithm.params, ctx=ctx)
    program = ClientProgram(
        trainer=LOCAL_TRAINERS.build(
            method.trainer.name, method.trainer.params, workspace=workspace, train=train
        ),
        train=train,
        algorithm=algorithm.client,
        release=[RELEASE_STEPS.build(s.name, s.params) for s in method.release],
        attack=ATTACKS.build(method.attack.name, method.attack.params) if method.attack else None,
    )
    store = ClientStateStore(
        fed.num_clients,
        algorithm.client.state_specs(workspace.spec.numel),
        path=state_dir if fed.client_state == "mmap" else None,
    )
    return RunComponents(
        workspace=workspace,
        program=program,
        strategy=algorithm.strategy,
        store=store,
        sampler=SAMPLERS.build(
            fed.sampling.name, fed.sampling.params, participation=fed.participation
        ),
        network=NETWORK_MODELS.build(method.network.name, method.network.params),
        clients=client_datasets(data, partition),
    )
