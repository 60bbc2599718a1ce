"""The server side of a deployment: geofl's round loop with its client steps on Flower sites.

:func:`run_server` builds the very :class:`~geofl.engine.run.FederatedRun` the simulator
runs — sampling, directives, validation, defenses, weighting, aggregation, server state,
evaluation, checkpoints, accounting and subscribers (governance included) — and hands it a
:class:`FlowerRunner` as the place where client steps run: one ``train`` message per
trained client to the SuperNode hosting it, replies consumed in cohort order.

Faults: a round waits at most ``round_timeout`` seconds for its replies; a site that does
not answer in time (killed, disconnected) or answers with an error is recorded like a lost
upload (``lost_in_transit``, with the reason) and the round aggregates the updates that
arrived. Privacy accounting counts only what sites report they released.

Resume: with ``resume`` the run continues from the checkpoint in its run directory, as the
simulator's does; the sites, whose Flower context state began afresh with the new run,
restore each client from their state directories as of that checkpoint. Discovery tells
them the checkpoint's round and, per client, its last admitted round and ledger length
(:func:`resume_plan`), and a site that cannot restore a client stops the run with one line
before any round.

Resume and randomness (``privacy.randomness``): a run resumes in the mode it started in
(``config.yaml`` records it; another mode is refused with one line). In ``secure`` mode a
resumed site holds a new secret, so the rounds after the checkpoint are trained with fresh
noise and batches: the run no longer equals an uninterrupted one, but every release is
accounted — a site's ledger keeps the releases of steps it took after the checkpoint
(:meth:`~geofl.deploy.sitestate.SiteStateDir.restore`), and a rerun round is a new
release on top. DP-FTRL's tree noise is the exception: the server's secret is kept in its
checkpoint, so no released tree node is ever redrawn. What resume guarantees in ``secure``
mode, then: the model and server state continue from the checkpoint exactly; a resumed
site cannot replay the noise of a step it took after the checkpoint (nobody holds that
secret any more) and draws fresh; the ledger counts every step ever released, rerun or
not, so the reported ε is an upper bound on what was released. Under secure aggregation
(:class:`SecAggRunner`) a rerun round is a new protocol run with new masks.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import yaml
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from geofl.client.release import histogram_released
from geofl.client.state import ClientStateStore
from geofl.config.load import dump_config
from geofl.config.training import SecureAggregationConfig
from geofl.deploy.secagg import VIEW_FILE, merge_requests, secure_outcome, secure_sum
from geofl.deploy.setup import DeploySetup, fingerprint
from geofl.deploy.sitedata import FlowerSiteEvaluator, site_federation
from geofl.deploy.wire import check_reply, decode_reply, encode_request, exchange
from geofl.engine.checkpoint import load_checkpoint
from geofl.engine.run import FederatedRun
from geofl.engine.scheduler import ClientJob, LostUpload, StepOutcome
from geofl.errors import DeployError
from geofl.events import RunInfo
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

__all__ = [
    "FlowerRunner",
    "ResumePlan",
    "SecAggRunner",
    "check_resumed_randomness",
    "discover_sites",
    "resume_plan",
    "run_server",
]

log = logging.getLogger("geofl")

QUERY, TRAIN = "query", "train"


@dataclass(frozen=True)
class ResumePlan:
    """What the sites need to restore their clients as of the server's checkpoint.

    Attributes:
        checkpoint: The checkpoint's round c (0: a fresh run).
        admitted: Client → its last admitted round ≤ c (absent: none).
        ledger: Client → events in its privacy ledger in the checkpoint.
    """

    checkpoint: int = 0
    admitted: dict[int, int] = field(default_factory=dict)
    ledger: dict[int, int] = field(default_factory=dict)


def resume_plan(ckpt_path: Path) -> ResumePlan:
    """The :class:`ResumePlan` of a run directory's checkpoint (an empty plan without one).

    The last admitted round of a client is the last round of the checkpoint's records that
    lists it among the participants (its upload was aggregated); ledgers are the client
    store's.
    """
    if not ckpt_path.exists():
        return ResumePlan()
    ckpt = load_checkpoint(ckpt_path)
    admitted: dict[int, int] = {}
    for line in ckpt.get("rounds", []):
        rec = RoundRecord.from_json(json.loads(line))
        admitted.update({int(k): rec.round for k in rec.participants})
    events = ckpt.get("clients", {}).get("events", [])
    ledger = {k: len(e) for k, e in enumerate(events) if e}
    return ResumePlan(int(ckpt["round"]), admitted, ledger)


def discover_sites(
    grid: Grid,
    expected: int,
    fp: Mapping[str, str],
    num_clients: int,
    timeout: float,
    plan: ResumePlan | None = None,
    infos: dict[int, ConfigRecord] | None = None,
) -> dict[int, int]:
    """Wait for ``expected`` SuperNodes, ask each which clients it hosts; client → node
    (``infos``, when given, receives every answering node's reply: with site-local data
    its site name, data schema and band statistics).

    A node that does not answer within ``timeout`` (one the SuperLink still lists after it
    died) is passed over with a warning, as long as the others host every client.

    Raises:
        DeployError: too few sites within ``timeout``, a site that cannot load its data,
            runs another config or cannot restore its clients as of ``plan``'s
            checkpoint, or clients that no site (or two sites) host.
    """
    nodes = _wait_for_nodes(grid, expected, timeout)
    query: dict[str, Any] = {"fingerprint": json.dumps(fp)}
    if plan is not None and plan.checkpoint:
        rows = {k: (plan.admitted.get(k, 0), plan.ledger.get(k, 0)) for k in range(num_clients)}
        query.update(resume_round=plan.checkpoint, resume_plan=json.dumps(rows))
    content = RecordDict({"query": ConfigRecord(query)})
    msgs = [Message(content, dst_node_id=n, message_type=QUERY, group_id="0") for n in nodes]
    ids, got = exchange(grid, msgs, timeout)
    replies = {node: got[mid] for node, mid in zip(nodes, ids, strict=True) if mid in got}
    silent = [n for n in nodes if n not in replies]
    for node in silent:
        log.warning("site node %d did not answer within %g s; passed over", node, timeout)
    hosts = _hosts_from_replies(nodes, replies, infos)
    missing = sorted(set(range(num_clients)) - set(hosts))
    if missing:
        quiet = f" (nodes {silent} did not answer within {timeout:g} s)" if silent else ""
        raise DeployError(
            f"no site hosts clients {missing}{quiet}; give each in some node config clients="
        )
    return hosts


def _wait_for_nodes(grid: Grid, expected: int, timeout: float) -> list[int]:
    """The SuperLink's node ids once ``expected`` are listed (polled every 0.2 s)."""
    deadline = time.monotonic() + timeout
    nodes = list(grid.get_node_ids())
    while len(nodes) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        nodes = list(grid.get_node_ids())
    if len(nodes) < expected:
        raise DeployError(
            f"only {len(nodes)} of {expected} sites connected within {timeout:g} s; check "
            "that every SuperNode runs and points --superlink at this SuperLink"
        )
    return nodes


def _hosts_from_replies(
    nodes: list[int], replies: Mapping[int, Message], infos: dict[int, ConfigRecord] | None
) -> dict[int, int]:
    """client → node from the answering nodes' site records, in node order; a site's
    error, or a client two sites claim, raises :class:`DeployError`."""
    hosts: dict[int, int] = {}
    for node in nodes:
        rep = replies.get(node)
        if rep is None:
            continue
        if rep.has_error():
            raise DeployError(f"site node {node} failed: {rep.error.reason!s}")
        info = rep.content.config_records["site"]
        if "error" in info:
            raise DeployError(f"site node {node}: {info['error']!s}")
        if infos is not None:
            infos[node] = info
        for k in json.loads(str(info["clients"])):
            if k in hosts:
                raise DeployError(f"client {k} is hosted by two sites (nodes {hosts[k]}, {node})")
            hosts[int(k)] = node
    return hosts


class FlowerRunner:
    """Client steps on Flower sites (a :class:`~geofl.engine.scheduler.ClientRunner`).

    It also subscribes to the run, to tell each client with its next request the round of
    its last admitted upload (the site then commits or forgets the state it staged).

    Args:
        grid: The ServerApp's grid.
        hosts: Client id → SuperNode id.
        fp: The server config's fingerprint.
        round_timeout: Seconds a round waits for replies.
        plan: The checkpoint the run resumes from (None: a fresh run).
        norm: The global band mean/std sent with every request (site-local data).
        histogram_allowed: Whether the method's clients send a label histogram (a reply
            with one is refused otherwise: :func:`~geofl.deploy.wire.check_reply`).
    """

    def __init__(
        self,
        grid: Grid,
        hosts: Mapping[int, int],
        fp: Mapping[str, str],
        round_timeout: float,
        plan: ResumePlan | None = None,
        norm: tuple[torch.Tensor, torch.Tensor] | None = None,
        histogram_allowed: bool = True,
    ) -> None:
        self.grid, self.hosts, self.timeout = grid, dict(hosts), round_timeout
        self.norm, self.histogram_allowed = norm, histogram_allowed
        self.fp = json.dumps(dict(fp))
        self.resume_round = 0 if plan is None else plan.checkpoint
        self._admitted: dict[int, int] = {} if plan is None else dict(plan.admitted)

    def __call__(
        self, global_params: torch.Tensor, jobs: Sequence[ClientJob]
    ) -> Iterator[StepOutcome]:
        msgs = []
        for job in jobs:
            d = job.directives
            msgs.append(
                Message(
                    self.request(global_params, job),
                    dst_node_id=self.hosts[d.client_id],
                    message_type=TRAIN,
                    group_id=str(d.round),
                )
            )
        ids, replies = exchange(self.grid, msgs, self.timeout)
        for job, mid in zip(jobs, ids, strict=True):
            yield self._outcome(job.directives.client_id, replies.get(mid))

    def request(self, global_params: torch.Tensor, job: ClientJob) -> RecordDict:
        """The ``train`` content of ``job`` (:func:`~geofl.deploy.wire.encode_request`)."""
        d = job.directives
        return encode_request(
            global_params,
            d,
            self.fp,
            self._admitted.get(d.client_id, 0),
            resume_round=self.resume_round,
            ledger_events=len(job.state.dp_events),
            norm=self.norm,
        )

    def _outcome(self, client: int, rep: Message | None) -> StepOutcome:
        node = self.hosts[client]
        if rep is None:
            return LostUpload(client, f"no reply from site node {node} within {self.timeout:g} s")
        if rep.has_error():
            return LostUpload(client, f"site node {node} failed: {rep.error.reason!s}")
        site = rep.content.config_records.get("site")
        if site is not None and "error" in site:
            return LostUpload(client, f"site node {node}: {site['error']!s}")
        why = check_reply(rep.content, histogram_allowed=self.histogram_allowed)
        if why is not None:
            log.warning("client %d refused: site node %d %s", client, node, why)
            return LostUpload(client, f"site node {node} {why}")
        return decode_reply(rep.content)

    # Subscriber: who was admitted in each round.
    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        self._admitted.update(dict.fromkeys(record.participants, record.round))

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


class SecAggRunner(FlowerRunner):
    """Client steps on Flower sites whose uploads reach the server only as SecAgg+'s
    weighted mean (:mod:`geofl.deploy.secagg`): one protocol run per round over the sites
    hosting its trained clients; each admitted client's upload is that mean.

    Args:
        grid: The ServerApp's grid.
        hosts: Client id → SuperNode id.
        fp: The server config's fingerprint.
        round_timeout: Seconds each of the protocol's four exchanges waits for replies.
        settings: The fixed-point encoding (``privacy.secure_aggregation``).
        view: Where the server's view of every reply is appended (None: nowhere).
        plan: The checkpoint the run resumes from (None: a fresh run).
        norm: The global band mean/std sent with every request (site-local data).
    """

    def __init__(
        self,
        grid: Grid,
        hosts: Mapping[int, int],
        fp: Mapping[str, str],
        round_timeout: float,
        settings: SecureAggregationConfig,
        view: Path | None = None,
        plan: ResumePlan | None = None,
        norm: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        super().__init__(grid, hosts, fp, round_timeout, plan, norm, histogram_allowed=False)
        self.settings, self.view = settings, view

    def __call__(
        self, global_params: torch.Tensor, jobs: Sequence[ClientJob]
    ) -> Iterator[StepOutcome]:
        if not jobs:
            return
        round_idx = jobs[0].directives.round
        by_node: dict[int, dict[int, RecordDict]] = {}
        for job in jobs:
            k = job.directives.client_id
            by_node.setdefault(self.hosts[k], {})[k] = self.request(global_params, job)
        if len(by_node) < 2:
            why = (
                f"secure aggregation needs trained clients on 2 sites or more; round "
                f"{round_idx} has them on {len(by_node)} (a sum over one site is its update)"
            )
            for job in jobs:
                yield LostUpload(job.directives.client_id, why)
            return
        contents = {node: merge_requests(reqs) for node, reqs in by_node.items()}
        sums = secure_sum(self.grid, contents, self.settings, self.timeout, round_idx, self.view)
        for job in jobs:
            k = job.directives.client_id
            yield secure_outcome(k, self.hosts[k], round_idx, sums)


def check_resumed_randomness(out: Path, mode: str) -> None:
    """Refuse to resume a run directory in another randomness mode than it started in (a
    ``config.yaml`` without the field was written before the modes: seeded).

    Raises:
        DeployError: one line naming both modes.
    """
    path = out / "config.yaml"
    if not path.is_file():
        return
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return  # the run's own resume check reports a damaged run directory
    privacy = doc.get("privacy") if isinstance(doc, dict) else None
    was = str(privacy.get("randomness") or "seeded") if isinstance(privacy, dict) else "seeded"
    if was != mode:
        raise DeployError(
            f"{path} was run with privacy.randomness {was}, this resume is {mode}; resume "
            f"with randomness {was} (a run's rounds must not mix modes) or start a new run"
        )


def run_server(
    grid: Grid,
    setup: DeploySetup,
    out: Path,
    *,
    sites: int,
    round_timeout: float,
    connect_timeout: float,
    resume: bool = False,
) -> dict[str, Any]:
    """Run (method, seed) of ``setup`` over the connected sites into ``out``; ``final.json``.

    The run directory has the simulator's layout (``methods/<method>/seed-<seed>/``);
    ``resume`` continues from its checkpoint (a fresh run when there is none). With
    site-local data (``data.sites``) the server holds no data: the sites' discovery replies
    give the data schema and the global band statistics (:func:`site_federation`), and
    evaluation is federated over the sites (:class:`FlowerSiteEvaluator`).
    """
    cfg, method, seed = setup.cfg, setup.method, setup.seed
    fp = fingerprint(cfg, method, seed)
    run_dir = seed_dir(out, method.name, seed)
    if resume:
        check_resumed_randomness(out, cfg.privacy.randomness or "secure")
    plan = resume_plan(run_dir / "checkpoint.pt") if resume else None
    if plan is not None and plan.checkpoint:
        log.info("resuming %s seed=%d after round %d", method.name, seed, plan.checkpoint)
    k = cfg.federation.num_clients
    infos: dict[int, ConfigRecord] = {}
    hosts = discover_sites(grid, sites, fp, k, connect_timeout, plan, infos)
    data, partition, norm, evaluator = setup.data, setup.partition, None, None
    if cfg.data.sites is not None:
        fed = site_federation(cfg, infos)
        data, partition, norm = fed.data, fed.partition, fed.norm
        names = [s.name for s in cfg.data.sites]
        evaluator = FlowerSiteEvaluator(grid, names, fed.nodes, json.dumps(fp), norm, round_timeout)
    if data is None or partition is None:
        raise DeployError("the server's setup has no data; load it with load_setup")
    runner = _runner(grid, setup, hosts, fp, round_timeout, plan, norm, run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(dump_config(cfg), encoding="utf-8")
    subs: list[Any] = [runner]
    if cfg.governance is not None:
        from geofl import plugins

        resolved = cfg.model_dump(mode="json")
        subs.append(plugins.SUBSCRIBERS.build("governance", cfg.governance, experiment=resolved))
    run = FederatedRun(cfg, method, seed, data, partition, run_dir, subs, runner, evaluator)
    # Client state lives on the sites: the server keeps only each client's public ledger.
    run.comps = replace(run.comps, store=ClientStateStore(cfg.federation.num_clients, {}))
    run.scheduler.c = run.comps
    return run.run(resume=resume)


def _runner(
    grid: Grid,
    setup: DeploySetup,
    hosts: Mapping[int, int],
    fp: Mapping[str, str],
    round_timeout: float,
    plan: ResumePlan | None,
    norm: tuple[torch.Tensor, torch.Tensor] | None,
    run_dir: Path,
) -> FlowerRunner:
    """The run's client runner: SecAgg+ (``privacy.secure_aggregation``) or plain uploads.

    Raises:
        DeployError: secure aggregation over fewer than 2 sites.
    """
    method, secagg = setup.method, setup.cfg.privacy.secure_aggregation
    if secagg is None:
        hist = histogram_released(method.trainer.name, [r.name for r in method.release])
        return FlowerRunner(grid, hosts, fp, round_timeout, plan, norm, hist)
    nodes = len(set(hosts.values()))
    if nodes < 2:
        raise DeployError(
            f"secure aggregation needs 2 sites or more, {nodes} hosts every client (a sum "
            "over one site is its update): start more SuperNodes or drop secure aggregation"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    view = run_dir / VIEW_FILE
    return SecAggRunner(grid, hosts, fp, round_timeout, secagg, view, plan, norm)
