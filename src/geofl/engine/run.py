"""One (method, seed) run: rounds, evaluation, best model, checkpoints, resume, subscribers.

The rounds themselves are the scheduler's (:mod:`geofl.engine.scheduler`); this module owns
what surrounds them. After every round the record is appended to ``rounds.jsonl`` and a
checkpoint written (global model, best-so-far, strategy state, client states and privacy
ledgers, wall time); a run resumed from it continues exactly as if it had never stopped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from geofl.attacks.observe import feature_names, layer_bounds
from geofl.client.state import ClientState
from geofl.client.step import dp_events_of
from geofl.config.schema import ExperimentConfig, MethodConfig
from geofl.data.splitting.partition import Partition
from geofl.engine.checkpoint import (
    load_checkpoint,
    require_checkpoint,
    restore_round_log,
    save_checkpoint,
)
from geofl.engine.components import PreparedData, build_components
from geofl.engine.evaluation.convergence import EarlyStopper, communication, rounds_to_target, watch
from geofl.engine.evaluation.groups import check_group_key, with_group_metrics
from geofl.engine.evaluation.heldout import evaluate
from geofl.engine.hierarchy.build import build_scheduler, restore_scheduler, scheduler_state
from geofl.engine.records.final import divergence, privacy_summary
from geofl.engine.scheduler import ClientRunner
from geofl.engine.site_reports.evaluation import LocalSiteEvaluator, SiteEvaluator, merge_site_stats
from geofl.engine.stop import StopRequest
from geofl.engine.workers import ClientWorkers
from geofl.errors import RunStoppedError
from geofl.events import ParticipationGate, RunInfo, Subscriber
from geofl.io import (
    append_jsonl,
    append_text_line,
    atomic_write,
    dumps_line,
    read_jsonl,
    write_json_atomic,
    write_text_atomic,
)
from geofl.records import RoundRecord, metrics_to_json, read_rounds
from geofl.tasks.base import SplitMetrics

__all__ = ["FederatedRun"]

log = logging.getLogger("geofl")


class FederatedRun:
    """One method under one seed.

    Args:
        cfg: The experiment.
        method: The method being run.
        seed: Experiment seed.
        data: Normalised global split.
        partition: Client index sets over ``data.train``.
        out_dir: The run's seed directory.
        subscribers: Event observers (a :class:`~geofl.events.ParticipationGate` among them
            may bar clients from rounds).
        runner: Where client steps run (e.g. Flower sites, :mod:`geofl.deploy`); None:
            ``federation.workers`` worker processes, or this process when that is 1.
        site_evaluator: Where a federated evaluation runs (a deployment's sites); None:
            over ``data.sites`` in this process when there are any, else central.
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
        runner: ClientRunner | None = None,
        site_evaluator: SiteEvaluator | None = None,
    ) -> None:
        self.cfg, self.method, self.seed, self.data = cfg, method, seed, data
        self.out_dir = Path(out_dir)
        self.subscribers = tuple(subscribers)
        gates = [s for s in self.subscribers if isinstance(s, ParticipationGate)]
        self.partition = partition
        self.comps = build_components(
            cfg, method, seed, data, partition, state_dir=self.out_dir / "client_state"
        )
        self.workspace = self.comps.workspace
        self.dim = self.workspace.spec.numel
        self.init_params = self.workspace.snapshot()
        if cfg.eval.group_by is not None:
            check_group_key(data.test, cfg.eval.group_by)
        self._layers = layer_bounds(self.workspace.spec)
        ev, task = cfg.eval, self.comps.task
        self._select = watch(task, ev.select_by, "eval.select_by")
        es = ev.early_stopping
        self._stopper = (
            None
            if es is None
            else EarlyStopper(es, watch(task, es.metric, "eval.early_stopping.metric").direction)
        )
        self._target_direction = (
            None if ev.target is None else watch(task, ev.target.metric, "eval.target.metric")
        )
        self._lines: list[str] = []  # JSON lines of this run's round records so far
        if site_evaluator is None and data.sites:
            site_evaluator = LocalSiteEvaluator(self.workspace, data.sites, task, ev.batch_size)
        self._site_eval = site_evaluator
        self._runner = runner
        self.scheduler = build_scheduler(
            cfg,
            method,
            seed,
            self.comps,
            data,
            partition,
            allowed=lambda k, r: all(g.allows(k, r) for g in gates),
            observe_layers=self._layers if cfg.eval.observe_updates else None,
            runner=runner,
        )

    def _start_workers(self) -> ClientWorkers | None:
        """``federation.workers`` processes for the client steps (None: in this process)."""
        n = self.cfg.federation.workers or 1
        if n <= 1 or self._runner is not None:
            return None
        workers = ClientWorkers(
            self.cfg,
            self.method,
            self.seed,
            self.data,
            self.partition,
            program=self.comps.program,
            clients=self.comps.clients,
            program_dim=self.dim,
            workers=n,
        )
        self.scheduler.runner = workers
        return workers

    @property
    def clients(self) -> list[Any]:
        """Every client's local data, indexed by id."""
        return self.comps.clients

    def round(self, global_params: torch.Tensor, round_idx: int) -> tuple[torch.Tensor, Any]:
        """Run one round (no evaluation, no I/O); returns the new params and the record."""
        out = self.scheduler.round(global_params, round_idx)
        self.comps.store.commit()
        return out.params, out.record

    def evaluate(self, params: torch.Tensor) -> dict[str, SplitMetrics]:
        """Val and test metrics of ``params`` (federated over the sites' own splits with
        site-local data, :mod:`geofl.engine.site_reports.evaluation`)."""
        if self._site_eval is not None:
            per_site = self._site_eval(params)
            return {
                "val": merge_site_stats([v for v, _ in per_site]),
                "test": merge_site_stats([t for _, t in per_site]),
            }
        self.workspace.load(params)
        bs = self.cfg.eval.batch_size
        model = self.workspace.module
        d, task, probe = self.data, self.comps.task, self.comps.probe
        val = evaluate(model, d.val.inputs, d.val.targets, task, bs)
        test = evaluate(model, d.test.inputs, d.test.targets, task, bs)
        if probe is not None:  # a backdoored run: ASR next to CDA (004 Eq. 14–15)
            test = probe.extend(test, model, d.test.inputs, bs)
        key = self.cfg.eval.group_by
        if key is not None:  # per-region metrics and their spread (003 Table 12)
            val = with_group_metrics(val, model, d.val, task, key, bs) if val.n else val
            test = with_group_metrics(test, model, d.test, task, key, bs)
        return {"val": val, "test": test}

    # ------------------------------------------------------------------ whole run
    def run(
        self, *, resume: bool = False, stop: StopRequest | None = None, rebuild_log: bool = False
    ) -> dict[str, Any]:
        """Train for ``federation.rounds`` rounds; resume from ``checkpoint.pt`` if asked.

        Args:
            resume: Continue from the checkpoint in the seed directory.
            stop: Polled after each round's durable write.
            rebuild_log: On resume, rewrite a damaged ``rounds.jsonl`` from the checkpoint
                instead of refusing (:func:`~geofl.engine.checkpoint.restore_round_log`).

        Returns:
            The final record also written to ``final.json``.

        Raises:
            RunStoppedError: after the round in which ``stop`` was requested.
        """
        workers = self._start_workers()
        try:
            return self._run(resume=resume, stop=stop, rebuild_log=rebuild_log)
        finally:
            if workers is not None:
                workers.close()
                self.scheduler.runner = None

    def _run(self, *, resume: bool, stop: StopRequest | None, rebuild_log: bool) -> dict[str, Any]:
        out = self.out_dir
        out.mkdir(parents=True, exist_ok=True)
        rounds = self.cfg.federation.rounds
        params, start, best, wall_before = self._start(resume, rebuild_log)
        info = RunInfo(
            self.method.name,
            self.seed,
            rounds,
            start,
            len(self.clients),
            out,
            self.dim,
            primary_metric=self.comps.task.primary_metric,
        )
        for sub in self.subscribers:
            sub.on_run_start(info)
        t_run = time.perf_counter()
        stopped = self._replay_stopper()  # a resumed run that had already stopped early
        for r in range(start, rounds + 1):
            if stopped:
                break
            outcome = self.scheduler.round(params, r)
            params, record = outcome.params, outcome.record
            record, best = self._evaluate_round(record, params, best, r == rounds)
            if outcome.observed is not None:
                append_jsonl(out / "observations.jsonl", outcome.observed)
            line = dumps_line(record.to_json())
            append_text_line(out / "rounds.jsonl", line)
            self._lines.append(line)
            self._checkpoint(r, params, best, wall_before + time.perf_counter() - t_run)
            self.comps.store.commit()  # after the checkpoint that carries the staged rows
            for sub in self.subscribers:
                sub.on_round_end(info, record)
            stopped = self._stopper is not None and self._stopper.observe(record)
            if stop is not None and stop.signum is not None and r < rounds and not stopped:
                raise RunStoppedError(self.method.name, self.seed, r, stop.signum)
        final = self._final(best, wall_before + time.perf_counter() - t_run)
        if final["diverged"]:
            log.warning("%s seed=%d diverged: %s", self.method.name, self.seed, final["diverged"])
        write_json_atomic(out / "final.json", final)
        for sub in self.subscribers:
            sub.on_run_end(info, final)
        return final

    def _evaluate_round(
        self, record: RoundRecord, params: torch.Tensor, best: dict[str, Any] | None, last: bool
    ) -> tuple[RoundRecord, dict[str, Any] | None]:
        r = record.round
        if not (r % self.cfg.eval.every == 0 or last):
            record.time_s["eval"] = 0.0
            return record, best
        t_eval = time.perf_counter()
        metrics = self.evaluate(params)
        record = replace(record, val=metrics["val"], test=metrics["test"])
        record.time_s["eval"] = time.perf_counter() - t_eval
        val, test = metrics["val"], metrics["test"]
        select = self._select  # eval.select_by, by default the task's primary metric
        key = f"val_{select.metric}"
        # Without a validation split (eval on val of size 0), select on test.
        score = (val if val.n else test).values[select.metric]
        if best is None or _better(score, best[key], select.direction):
            best = {
                "round": r,
                key: score,
                "val": metrics_to_json(val),
                "test": metrics_to_json(test),
            }
            _torch_save_atomic(self.out_dir / "best.pt", {"round": r, "params": params})
        return record, best

    def _replay_stopper(self) -> bool:
        """Feed the early stopper the records kept so far (a resumed run); whether the run
        had already stopped early."""
        if self._stopper is None:
            return False
        stopped = False
        for line in self._lines:
            stopped = self._stopper.observe(RoundRecord.from_json(json.loads(line)))
        return stopped

    def _checkpoint(
        self, r: int, params: torch.Tensor, best: dict[str, Any] | None, wall_s: float
    ) -> None:
        save_checkpoint(
            self.out_dir / "checkpoint.pt",
            {
                "round": r,
                "params": params,
                "best": best,
                "wall_s": wall_s,
                "previous_delta": self.scheduler.previous_aggregate,
                "strategy": self.comps.strategy.state_dict(),
                "clients": self.comps.store.state_dict(),
                "rounds": self._lines,
                **(
                    {"uplink": self.comps.uplink.state_dict()}
                    if self.comps.uplink is not None
                    else {}
                ),
                **scheduler_state(self.scheduler),
            },
        )

    def _start(
        self, resume: bool, rebuild_log: bool
    ) -> tuple[torch.Tensor, int, dict[str, Any] | None, float]:
        """Fresh files, or the checkpoint's state with logs cut back to it."""
        out = self.out_dir
        ckpt_path = out / "checkpoint.pt"
        rounds_path, obs_path = out / "rounds.jsonl", out / "observations.jsonl"
        if resume and not ckpt_path.exists() and require_checkpoint(out) == 1:
            log.warning(
                "%s: no checkpoint.pt after round 1 (killed before it was written, or "
                "deleted); rerunning this seed from round 1",
                out,
            )
        if not (resume and ckpt_path.exists()):
            _rewrite_jsonl(rounds_path, [])
            if self.cfg.eval.observe_updates:
                _rewrite_jsonl(obs_path, [])
                write_json_atomic(
                    out / "observations.meta.json",
                    {"features": feature_names(self._layers), "num_params": self.dim},
                )
            return self.init_params, 1, None, 0.0
        ckpt = load_checkpoint(ckpt_path)
        start = int(ckpt["round"]) + 1
        if "rounds" in ckpt:  # format 3: the checkpoint carries every record
            self._lines = list(ckpt["rounds"])
            restore_round_log(rounds_path, self._lines, checkpoint=ckpt_path, rebuild=rebuild_log)
            kept = read_rounds(rounds_path)
        else:  # older checkpoints: keep the log's records before the checkpoint's round
            kept = [r for r in read_rounds(rounds_path, strict=False) if r.round < start]
            _rewrite_jsonl(rounds_path, [r.to_json() for r in kept])
            self._lines = [dumps_line(r.to_json()) for r in kept]
        self.scheduler.previous_aggregate = ckpt.get("previous_delta")
        if "strategy" in ckpt:
            self.comps.strategy.load_state_dict(ckpt["strategy"])
            self.comps.store.load_state_dict(ckpt["clients"])
            if self.comps.uplink is not None and "uplink" in ckpt:
                self.comps.uplink.load_state_dict(ckpt["uplink"])
            restore_scheduler(self.scheduler, ckpt)
        else:  # format 1: stateless strategies; ledgers rebuilt from the client logs
            self._replay_ledgers(kept)
        if obs_path.exists():
            _rewrite_jsonl(obs_path, [o for o in read_jsonl(obs_path) if o["round"] < start])
        return ckpt["params"], start, ckpt["best"], float(ckpt.get("wall_s", 0.0))

    def _replay_ledgers(self, records: Sequence[RoundRecord]) -> None:
        store = self.comps.store
        for rec in records:
            for k, local_log in rec.client_log.items():
                events = dp_events_of(local_log)
                if events:
                    old = store.get(int(k))
                    store.stage(int(k), ClientState(old.tensors, (*old.dp_events, *events)))
                    store.commit()

    def _final(self, best: dict[str, Any] | None, wall_s: float) -> dict[str, Any]:
        records = read_rounds(self.out_dir / "rounds.jsonl")
        last = records[-1]
        final: dict[str, Any] = {
            "diverged": divergence(records),
            "final": {
                split: None if m is None else metrics_to_json(m)
                for split, m in (("val", last.val), ("test", last.test))
            },
            "best_val": best,
            "rounds": self.cfg.federation.rounds,
            "num_clients": len(self.clients),
            "num_params": self.dim,
            "wall_s": wall_s,
        }
        privacy = privacy_summary(self.cfg, self.comps.store, len(self.clients), self.out_dir)
        if privacy is not None:
            final["privacy"] = privacy
        server_privacy = getattr(self.comps.strategy, "privacy_summary", None)
        if callable(server_privacy):  # central DP of what the server releases (dp_ftrl)
            final["server_privacy"] = server_privacy()
        final["communication"] = communication(records)  # 001 §6.1.4
        if self.comps.threat is not None:  # who attacked, what they poisoned (004 §2.3)
            final["threat"] = self.comps.threat
        if self._stopper is not None:
            final["early_stopping"] = self._stopper.to_json()
        target = self.cfg.eval.target
        if target is not None and self._target_direction is not None:
            final["target"] = rounds_to_target(records, target, self._target_direction.direction)
        return final


def _better(score: float, best: float, direction: str) -> bool:
    """Whether ``score`` improves on ``best`` (a NaN score never does, as before)."""
    return score > best if direction == "max" else score < best


def _rewrite_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    write_text_atomic(path, "".join(dumps_line(r) + "\n" for r in records), sync=True)


def _torch_save_atomic(path: Path, obj: dict[str, Any]) -> None:
    atomic_write(path, lambda fh: torch.save(obj, fh), sync=False)
