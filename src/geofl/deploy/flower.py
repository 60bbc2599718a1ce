"""The Flower apps: ``server_app`` (geofl's server side) and ``client_app`` (a site).

Run config (``flwr run --run-config``; both apps read it):

* ``config`` — path of the experiment YAML (a site may override it with its own copy);
* ``method`` — the method to deploy (may be empty when the config has one);
* ``seed`` — the seed (-1: the config's first);
* ``out`` — the server's run directory;
* ``resume`` — continue from the checkpoint in the run directory (after a SuperLink
  restart): sites restore their clients' state from their state directories;
* ``sites`` — how many SuperNodes to wait for;
* ``round-timeout`` / ``connect-timeout`` — seconds a round waits for replies, and the
  server for its sites;
* ``randomness`` — ``seeded`` or ``secure``: the *server's* randomness mode
  (:func:`~geofl.deploy.setup.deploy_randomness`; default the config's, else secure);
* ``secure-aggregation`` — true: updates only through Flower's SecAgg+
  (:mod:`geofl.deploy.secagg`; default the config's ``privacy.secure_aggregation``).

Node config (``flower-supernode --node-config``): ``clients`` — the client ids the site
hosts (``"0"``, ``"0,1"``, ``"2-5"``), and optionally ``config`` — the site's own copy of
the experiment YAML (data paths may differ per site; every result-relevant section must
match the server's, which the config fingerprint checks), and ``state-dir`` — where the
site saves its clients' steps (default ``~/.geofl/site-state``;
:mod:`geofl.deploy.sitestate`), and ``randomness`` — the site's own randomness mode (a site
never takes it from the run config, which the server's side writes; a mode that differs
from the server's is refused by the fingerprint), and ``secure-aggregation`` likewise.

With site-local data (``data.sites``, :mod:`geofl.deploy.sitedata`) a node names ``site``
(its entry's name; it hosts that entry's clients — a ``clients`` value is ignored, so one
node config can serve both data modes) and
optionally ``data`` — a YAML file ``{dataset: …, params: …}`` with its own data, replacing
the entry's definition. Its sites answer a third message type, ``evaluate``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from geofl.deploy.objectpulls import speed_up_object_pulls
from geofl.deploy.secagg import is_secagg, secagg_mod, site_sum, split_requests
from geofl.deploy.setup import fingerprint_mismatch, load_setup
from geofl.deploy.site import Site, parse_clients
from geofl.deploy.sitedata import LocalSite, decode_eval_request, encode_eval_reply
from geofl.deploy.wire import PULL_INTERVAL, decode_request
from geofl.errors import DeployError, GeoflError

__all__ = ["ERROR_FILE", "client_app", "server_app"]

#: Where the server writes the one-line error that stopped a deployment (run directory).
ERROR_FILE = "deploy_error.txt"

log = logging.getLogger("geofl")

server_app = ServerApp()
client_app = ClientApp()

#: Sites built in this process, by (config, method, seed, clients or site, state dir, data,
#: the config's and data file's contents): a long-lived ClientApp process (a warm site,
#: :mod:`geofl.deploy.warmsite`) builds its data and program once per run setting.
_SITES: dict[tuple[str, ...], Site | LocalSite] = {}

#: Sites a process keeps built (the oldest goes first): a warm site serves run after run.
MAX_SITES = 4


def _run_setting(context: Context) -> tuple[str, str | None, int | None]:
    rc = context.run_config
    seed = int(rc.get("seed", -1))
    return str(rc["config"]), str(rc.get("method", "")) or None, None if seed < 0 else seed


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    """Run the configured (method, seed) over the connected sites."""
    from geofl.deploy.server import run_server  # the server side only: sites skip it

    rc = context.run_config
    config, method, seed = _run_setting(context)
    (Path(str(rc["out"])) / ERROR_FILE).unlink(missing_ok=True)  # a resumed run's old error
    # A reply is listed before the site's objects are stored: look again every 50 ms, not
    # after 1 s (geofl.deploy.warmsite's docstring).
    if not speed_up_object_pulls(PULL_INTERVAL, sys.modules[type(grid).__module__]):
        log.debug("grid %s pulls replies its own way: its waits stay", type(grid).__name__)
    try:
        randomness = str(rc.get("randomness", "")) or None
        secagg = _flag(rc.get("secure-aggregation", False))
        setup = load_setup(config, method, seed, randomness, secagg)
        final = run_server(
            grid,
            setup,
            Path(str(rc["out"])),
            sites=int(rc.get("sites", 2)),
            resume=bool(rc.get("resume", False)),
            round_timeout=float(rc.get("round-timeout", 120.0)),
            connect_timeout=float(rc.get("connect-timeout", 60.0)),
        )
    except GeoflError as err:
        # One line in the run's log stream (returning normally, so that Flower flushes the
        # stream; an exception's exit loses its last lines) and in the run directory.
        out = Path(str(rc["out"]))
        out.mkdir(parents=True, exist_ok=True)
        (out / ERROR_FILE).write_text(f"{err}\n", encoding="utf-8")
        print(f"geofl deploy error: {err}", flush=True)
        return
    print(f"geofl deploy finished: {json.dumps(final.get('final'))}", flush=True)


def _site(context: Context) -> Site | LocalSite:
    """This node's site: a :class:`Site` over the shared dataset's clients, or with
    site-local data a :class:`LocalSite` over its own data."""
    config, method, seed = _run_setting(context)
    node = context.node_config
    config = str(node.get("config", config))
    clients, name = str(node.get("clients", "")), str(node.get("site", ""))
    state_dir, data = str(node.get("state-dir", "")), str(node.get("data", ""))
    randomness = str(node.get("randomness", ""))
    secagg = _flag(node.get("secure-aggregation", False))
    # an edited file (same path) is another site
    key: tuple[str, ...] = (config, method or "", str(seed), clients, name, state_dir, data)
    key += (randomness, str(secagg), _content(config), _content(data))
    if key not in _SITES:
        while len(_SITES) >= MAX_SITES:
            del _SITES[next(iter(_SITES))]
        setup = load_setup(config, method, seed, randomness or None, secagg)
        where = Path(state_dir) if state_dir else None
        if setup.cfg.data.sites is not None:
            if not name:
                raise DeployError(
                    "node config site=<name> is required: the config has site-local data "
                    f"(data.sites: {[s.name for s in setup.cfg.data.sites]})"
                )
            _SITES[key] = LocalSite(setup, name, data, where)
        else:
            hosted = parse_clients(clients, setup.cfg.federation.num_clients)
            _SITES[key] = Site(setup, hosted, where)
    return _SITES[key]


def _flag(value: object) -> bool:
    """A run/node config switch: true, or a string such as ``"true"``/``"1"``."""
    return value is True or str(value).strip().lower() in ("true", "1", "yes", "on")


def _content(path: str) -> str:
    """A hash of the file at ``path`` ("" when there is none: building reports that)."""
    try:
        return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()
    except OSError:
        return ""


def _error(msg: Message, text: str) -> Message:
    return Message(RecordDict({"site": ConfigRecord({"error": text})}), reply_to=msg)


@client_app.query()
def site_query(msg: Message, context: Context) -> Message:
    """Which clients this site hosts, after loading its data and checking the config (and,
    when the server resumes from a checkpoint, that the site can restore its clients)."""
    query = msg.content.config_records["query"]
    try:
        site = _site(context)
        differ = fingerprint_mismatch(json.loads(str(query["fingerprint"])), site.fingerprint)
        if differ:
            return _error(msg, _mismatch(differ))
        checkpoint = int(query.get("resume_round", 0))  # type: ignore[arg-type]
        if checkpoint:
            plan = json.loads(str(query["resume_plan"]))
            trainer = site.resume_site() if isinstance(site, LocalSite) else site
            trainer.check_resume(
                {int(k): (int(a), int(m)) for k, (a, m) in plan.items()},
                checkpoint,
                context.run_id,
            )
    except GeoflError as err:
        return _error(msg, str(err))
    if isinstance(site, LocalSite):
        info: dict[str, Any] = site.describe()
    else:
        info = {"clients": json.dumps(sorted(site.clients)), "dim": site.dim}
    return Message(RecordDict({"site": ConfigRecord(info)}), reply_to=msg)


@client_app.train(mods=[secagg_mod])
def site_train(msg: Message, context: Context) -> Message:
    """One client step on this site's data (state kept in ``context.state``), or under
    secure aggregation every requested client's step, summed for SecAgg+
    (:mod:`geofl.deploy.secagg`; ``secagg_mod`` masks the sum)."""
    if is_secagg(msg):
        return Message(_secure_train(msg, context), reply_to=msg)
    try:
        site = _site(context)
        return Message(_train_one(site, msg.content, context), reply_to=msg)
    except GeoflError as err:
        return _error(msg, str(err))


def _train_one(
    site: Site | LocalSite, content: RecordDict, context: Context, secure: bool = False
) -> RecordDict:
    """One client's step for the request ``content`` (``secure``: inside a SecAgg+ step);
    the reply's content.

    Raises:
        DeployError: the server runs another config, or sends a plain request to a site
            whose config asks for secure aggregation.
    """
    req = decode_request(content)
    differ = fingerprint_mismatch(json.loads(req.fingerprint), site.fingerprint)
    if differ:
        raise DeployError(_mismatch(differ))
    trainer = site.site(req.norm) if isinstance(site, LocalSite) else site
    if trainer.secure_aggregation is not None and not secure:
        raise DeployError(
            "this site's config asks for secure aggregation (privacy.secure_aggregation) "
            "and the server asked for a plain upload; run the server with the site's config"
        )
    return trainer.train(req, context.state, context.run_id)


def _secure_train(msg: Message, context: Context) -> RecordDict:
    """Every client of a SecAgg+ request, summed (:func:`~geofl.deploy.secagg.site_sum`);
    a client whose step fails is reported by its record, not summed.

    Raises:
        GeoflError: when the site cannot be built, or trains no client under a config that
            asks for secure aggregation (the protocol's error reply).
    """
    site = _site(context)
    replies: dict[int, RecordDict] = {}
    trainer: Site | None = None
    for k, content in split_requests(msg.content).items():
        try:
            replies[k] = _train_one(site, content, context, secure=True)
            norm = decode_request(content).norm
            trainer = site.site(norm) if isinstance(site, LocalSite) else site
        except GeoflError as err:
            replies[k] = RecordDict({"site": ConfigRecord({"error": str(err)})})
    if trainer is None or trainer.secure_aggregation is None:
        raise DeployError(
            "the server runs secure aggregation and this site trained none of its clients "
            f"under it: {sorted(replies)}"
        )
    return site_sum(replies, trainer.dim, trainer.weighting, trainer.secure_aggregation)


@client_app.evaluate()
def site_evaluate(msg: Message, context: Context) -> Message:
    """The global model's statistics on this site's own val and test split (site-local
    data, :mod:`geofl.deploy.sitedata`)."""
    try:
        site = _site(context)
        params, fp, norm = decode_eval_request(msg.content)
        differ = fingerprint_mismatch(json.loads(fp), site.fingerprint)
        if differ:
            return _error(msg, _mismatch(differ))
        if not isinstance(site, LocalSite):
            raise DeployError("evaluate: this site hosts no site-local data (data.sites)")
        return Message(encode_eval_reply(*site.evaluate(params, norm)), reply_to=msg)
    except GeoflError as err:
        return _error(msg, str(err))


def _mismatch(sections: list[str]) -> str:
    if sections == ["secure_aggregation"]:
        return (
            "secure aggregation differs from the server's; give the site's node config "
            "secure-aggregation= the server's setting (privacy.secure_aggregation)"
        )
    if sections == ["randomness"]:
        return (
            "randomness differs from the server's; give the site's node config randomness= "
            "the server's mode (seeded or secure; default secure)"
        )
    return (
        f"config differs from the server's in {', '.join(sections)}; give the site the "
        "server's experiment config (only data paths may differ)"
    )
