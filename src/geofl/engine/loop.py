"""The synchronous round loop of 000 §3.1.1 for one (method, seed).

broadcast → local training → Δw (one flat tensor per client) → release steps → transport
→ validation → tier (defenses, weighting, aggregator) → global update → evaluation.

Every random draw comes from a generator derived from (seed, round, client, purpose), so a
run resumed from its round checkpoint continues exactly as if it had never stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geofl.attacks.client import ATTACKS, Attack
from geofl.attacks.observe import feature_names, layer_bounds, update_statistics
from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS, ReleaseStep, apply_release
from geofl.client.trainer import LOCAL_TRAINERS
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.data.base import GeoDataset
from geofl.data.partition import Partition
from geofl.engine.evaluate import evaluate
from geofl.engine.hashing import params_sha256, update_set_sha256
from geofl.errors import AggregationError
from geofl.events import ParticipationGate, RunInfo, Subscriber
from geofl.hierarchy.tiers import TIERS
from geofl.io import (
    append_jsonl,
    atomic_write,
    dumps_line,
    read_jsonl,
    write_json_atomic,
    write_text_atomic,
)
from geofl.models.base import MODELS, FlatModel
from geofl.network.links import NETWORK_MODELS
from geofl.privacy.accounting import ACCOUNTANTS, dp_event_from_log, epsilon_summary
from geofl.rng import numpy_generator, torch_generator
from geofl.server.aggregators import AGGREGATORS
from geofl.server.defenses import DEFENSES
from geofl.server.validate import validate_update
from geofl.server.weighting import WEIGHTINGS
from geofl.tasks.metrics import Metrics
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["FederatedRun", "PreparedData", "sample_participants"]

log = logging.getLogger("geofl")


@dataclass(frozen=True)
class PreparedData:
    """The global split of one seed, normalised with train statistics."""

    train: GeoDataset
    val: GeoDataset
    test: GeoDataset


def sample_participants(num_clients: int, q: float, seed: int, round_idx: int) -> list[int]:
    """max(1, round(q·K)) distinct clients, sorted; generator (seed, round, "participation")."""
    m = max(1, round(q * num_clients))
    if m >= num_clients:
        return list(range(num_clients))
    rng = numpy_generator(seed, "round", round_idx, "participation")
    return sorted(int(c) for c in rng.choice(num_clients, size=m, replace=False))


class FederatedRun:
    """One method under one seed: owns the model workspace, clients and server tier.

    Args:
        cfg: The experiment.
        method: The method being run.
        seed: Experiment seed.
        data: Normalised global split.
        partition: Client index sets over ``data.train``.
        out_dir: The run's seed directory.
        subscribers: Event observers.
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        method: MethodConfig,
        seed: int,
        data: PreparedData,
        partition: Partition,
        out_dir: Path,
        subscribers: Sequence[Subscriber] = (),
    ) -> None:
        self.cfg, self.method, self.seed, self.data = cfg, method, seed, data
        self.out_dir = Path(out_dir)
        self.subscribers = tuple(subscribers)
        self._gates = [s for s in self.subscribers if isinstance(s, ParticipationGate)]
        self.partition = partition
        self.num_classes = data.train.num_classes
        model = MODELS.build(
            cfg.model.name,
            cfg.model.params,
            in_channels=len(data.train.bands),
            num_classes=self.num_classes,
            generator=torch_generator(seed, "model_init"),
        )
        self.workspace = FlatModel(model)
        self.dim = self.workspace.spec.numel
        self._round_buffer = torch.empty(0, self.dim)
        self.init_params = self.workspace.snapshot()
        self.trainer = LOCAL_TRAINERS.build(
            method.trainer.name, method.trainer.params, workspace=self.workspace, train=cfg.train
        )
        self.release: list[ReleaseStep] = [
            RELEASE_STEPS.build(s.name, s.params) for s in method.release
        ]
        self.attack: Attack | None = (
            ATTACKS.build(method.attack.name, method.attack.params) if method.attack else None
        )
        self.network = NETWORK_MODELS.build(method.network.name, method.network.params)
        self.tier = TIERS.build(
            "flat",
            {},
            weighting=WEIGHTINGS.build(method.weighting.name, method.weighting.params),
            aggregator=AGGREGATORS.build(method.aggregator.name, method.aggregator.params),
            defenses=[DEFENSES.build(d.name, d.params) for d in method.defenses],
        )
        self.accountant = ACCOUNTANTS.build(
            cfg.privacy.accountant.name, cfg.privacy.accountant.params
        )
        self._noise_multipliers: set[float] = set()
        self._layers = layer_bounds(self.workspace.spec)
        self._previous_delta: torch.Tensor | None = None
        train = data.train
        gsd = partition.client_means(train.metadata.get("gsd_m"))
        self.clients = [
            ClientData(
                k,
                train.images[idx],
                train.labels[idx],
                partition.histograms[k],
                classes=tuple(train.classes),
                gsd_m=gsd[k],
            )
            for k, idx in enumerate(torch.as_tensor(p) for p in partition.indices)
        ]

    # ------------------------------------------------------------------ client side
    def client_step(self, global_params: torch.Tensor, client: int, round_idx: int) -> ClientUpdate:
        """Local training, attack (if this client attacks) and release for one client."""
        directives = ClientDirectives(round_idx, client)
        keys = (self.seed, "round", round_idx, "client", client)
        update = self.trainer(
            global_params, self.clients[client], directives, torch_generator(*keys, "train")
        )
        if self.attack is not None and client in self.attack.clients:
            update = self.attack(update, directives, torch_generator(*keys, "attack"))
        return apply_release(
            update,
            self.release,
            data=self.clients[client],
            directives=directives,
            generator=torch_generator(*keys, "release"),
        )

    def _allowed(self, client: int, round_idx: int) -> bool:
        """False if a subscriber's permission gate (:class:`ParticipationGate`) bars it."""
        return all(g.allows(client, round_idx) for g in self._gates)

    def _account(self, client: int, local_log: dict[str, Any]) -> None:
        """Feed the privacy accountant every DpEvent the client's release reported."""
        for report in local_log.values():
            event = dp_event_from_log(report) if isinstance(report, dict) else None
            if event is not None:
                self.accountant.record(client, event)
                self._noise_multipliers.add(float(report["dp_event"]["noise_multiplier"]))

    # ------------------------------------------------------------------ one round
    def round(
        self, global_params: torch.Tensor, round_idx: int
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Run round ``round_idx`` from ``global_params``; returns new params and a record."""
        t0 = time.perf_counter()
        participants = sample_participants(
            len(self.clients), self.cfg.federation.participation, self.seed, round_idx
        )
        # The only feedback path from subscribers: a permission gate (000 §3.5.3) may bar
        # suspended or removed nodes from the round.
        excluded = [k for k in participants if not self._allowed(k, round_idx)]
        participants = [k for k in participants if k not in excluded]
        accepted: list[ClientUpdate] = []
        # Accepted deltas are copied as they arrive into rows of a [K, D] buffer reused
        # across rounds (no per-round allocation of the update tensor).
        if self._round_buffer.shape[0] < len(participants):
            self._round_buffer = torch.empty(len(participants), self.dim)
        rejected: list[dict[str, Any]] = []
        client_log: dict[str, Any] = {}
        train_time = 0.0
        for k in participants:
            t_train = time.perf_counter()
            update = self.client_step(global_params, k, round_idx)
            train_time += time.perf_counter() - t_train
            if update.local_log:
                client_log[str(k)] = update.local_log
                self._account(k, update.local_log)
            delivery = self.network(
                update.meta, numpy_generator(self.seed, "round", round_idx, "client", k, "network")
            )
            reason = (
                "lost in transit" if not delivery.delivered else validate_update(update, self.dim)
            )
            if reason is not None:
                log.warning("round %d: rejected update of client %d: %s", round_idx, k, reason)
                rejected.append({"client": k, "reason": reason})
                continue
            self._round_buffer[len(accepted)].copy_(update.delta)
            accepted.append(update)
        t_agg = time.perf_counter()
        weights: list[float] = []
        new_params = global_params
        observed: dict[str, Any] | None = None
        aggregation_error: str | None = None
        if accepted:
            stacked = self._round_buffer[: len(accepted)]
            try:
                result = self.tier(stacked, [u.meta for u in accepted], round_idx)
            except AggregationError as err:  # e.g. too few updates left for Krum
                log.warning("round %d: %s; global model unchanged", round_idx, err)
                aggregation_error = str(err)
            else:
                new_params = global_params + self.cfg.federation.server_lr * result.delta
                weights = result.weights.tolist()
                if self.cfg.eval.observe_updates:
                    observed = self._observe(stacked, result.delta, accepted, round_idx)
        else:
            log.warning("round %d: no valid update arrived; global model unchanged", round_idx)
        agg_time = time.perf_counter() - t_agg
        n = np.array([u.meta.num_samples for u in accepted], dtype=np.float64)
        losses = np.array([u.meta.train_loss for u in accepted])
        accs = np.array([u.meta.train_accuracy for u in accepted])
        record: dict[str, Any] = {
            "round": round_idx,
            "participants": [u.meta.client_id for u in accepted],
            "rejected": rejected,
            "weights": weights,
            "train_loss": float(n @ losses / n.sum()) if accepted else None,
            "train_accuracy": float(n @ accs / n.sum()) if accepted else None,
            "bytes_up": int(sum(u.meta.bytes_sent for u in accepted)),
            "excluded": excluded,
            "aggregation_error": aggregation_error,
            "update_norms": (
                torch.linalg.vector_norm(self._round_buffer[: len(accepted)], dim=1).tolist()
                if accepted
                else []
            ),
            "client_log": client_log,
            "time_s": {"train": train_time, "aggregate": agg_time, "total": 0.0},
        }
        if observed is not None:
            record["observed"] = observed
        # Content hashes for commitments and audits (000 §3.5): the new global model and
        # the set of updates it came from.
        record["model_sha256"] = params_sha256(new_params)
        record["update_set_sha256"] = update_set_sha256(
            [u.meta.client_id for u in accepted], self._round_buffer[: len(accepted)]
        )
        record["time_s"]["total"] = time.perf_counter() - t0
        return new_params, record

    def _observe(
        self,
        stacked: torch.Tensor,
        aggregate: torch.Tensor,
        accepted: Sequence[ClientUpdate],
        round_idx: int,
    ) -> dict[str, Any]:
        """The server's legitimate view of this round's updates (for passive attacks)."""
        feats = update_statistics(
            stacked, aggregate=aggregate, previous=self._previous_delta, layers=self._layers
        )
        self._previous_delta = aggregate.clone()
        return {
            "round": round_idx,
            "clients": [u.meta.client_id for u in accepted],
            "features": feats.tolist(),
        }

    def evaluate(self, params: torch.Tensor) -> dict[str, Metrics]:
        """Val and test metrics of ``params``."""
        self.workspace.load(params)
        bs = self.cfg.eval.batch_size
        model = self.workspace.module
        d = self.data
        return {
            "val": evaluate(model, d.val.images, d.val.labels, self.num_classes, bs),
            "test": evaluate(model, d.test.images, d.test.labels, self.num_classes, bs),
        }

    # ------------------------------------------------------------------ whole run
    def run(self, *, resume: bool = False) -> dict[str, Any]:
        """Train for ``federation.rounds`` rounds; resume from ``checkpoint.pt`` if asked.

        Returns:
            The final record also written to ``final.json``.
        """
        out = self.out_dir
        out.mkdir(parents=True, exist_ok=True)
        final_path, ckpt_path = out / "final.json", out / "checkpoint.pt"
        rounds_path, obs_path = out / "rounds.jsonl", out / "observations.jsonl"
        rounds = self.cfg.federation.rounds
        params, start, best = self.init_params, 1, None
        wall_before = 0.0
        if resume and ckpt_path.exists():
            ckpt = torch.load(ckpt_path, weights_only=False)
            params, start, best = ckpt["params"], ckpt["round"] + 1, ckpt["best"]
            wall_before = float(ckpt.get("wall_s", 0.0))
            self._previous_delta = ckpt.get("previous_delta")
            kept = [r for r in read_jsonl(rounds_path) if r["round"] < start]
            _rewrite_jsonl(rounds_path, kept)
            for rec in kept:  # the privacy ledger is rebuilt from the client logs
                for k, local_log in rec.get("client_log", {}).items():
                    self._account(int(k), local_log)
            if obs_path.exists():
                _rewrite_jsonl(obs_path, [o for o in read_jsonl(obs_path) if o["round"] < start])
        else:
            _rewrite_jsonl(rounds_path, [])
            if self.cfg.eval.observe_updates:
                _rewrite_jsonl(obs_path, [])
                write_json_atomic(
                    out / "observations.meta.json",
                    {"features": feature_names(self._layers), "num_params": self.dim},
                )
        info = RunInfo(self.method.name, self.seed, rounds, start, len(self.clients), out, self.dim)
        for sub in self.subscribers:
            sub.on_run_start(info)
        t_run = time.perf_counter()
        every = self.cfg.eval.every
        for r in range(start, rounds + 1):
            params, record = self.round(params, r)
            if r % every == 0 or r == rounds:
                t_eval = time.perf_counter()
                record.update(self.evaluate(params))
                record["time_s"]["eval"] = time.perf_counter() - t_eval
                val_acc = (
                    record["val"]["accuracy"] if record["val"]["n"] else record["test"]["accuracy"]
                )
                if best is None or val_acc > best["val_accuracy"]:
                    best = {
                        "round": r,
                        "val_accuracy": val_acc,
                        "val": record["val"],
                        "test": record["test"],
                    }
                    _torch_save_atomic(out / "best.pt", {"round": r, "params": params})
            else:
                record["time_s"]["eval"] = 0.0
            observed = record.pop("observed", None)
            if observed is not None:
                append_jsonl(obs_path, observed)
            append_jsonl(rounds_path, record)
            _torch_save_atomic(
                ckpt_path,
                {
                    "round": r,
                    "params": params,
                    "best": best,
                    "wall_s": wall_before + time.perf_counter() - t_run,
                    "previous_delta": self._previous_delta,
                },
            )
            for sub in self.subscribers:
                sub.on_round_end(info, record)
        last = read_jsonl(rounds_path)[-1]
        final = {
            "final": {"val": last["val"], "test": last["test"]},
            "best_val": best,
            "rounds": rounds,
            "num_clients": len(self.clients),
            "num_params": self.dim,
            "wall_s": wall_before + time.perf_counter() - t_run,
        }
        if self._noise_multipliers:
            final["privacy"] = epsilon_summary(
                self.accountant,
                delta=self.cfg.privacy.delta,
                noise_multipliers=sorted(self._noise_multipliers),
                kind=self.cfg.privacy.accountant.name,
            )
        write_json_atomic(final_path, final)
        for sub in self.subscribers:
            sub.on_run_end(info, final)
        return final


def _rewrite_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    write_text_atomic(path, "".join(dumps_line(r) + "\n" for r in records), sync=True)


def _torch_save_atomic(path: Path, obj: dict[str, Any]) -> None:
    atomic_write(path, lambda fh: torch.save(obj, fh))
