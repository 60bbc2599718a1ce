"""A warm site: one long-lived process per SuperNode that runs every ClientApp task.

Why: Flower 1.42's SuperNode (``--isolation subprocess``) has its SuperExec start a fresh
``flwr-clientapp`` process for every message, which imports torch and geofl and rebuilds
the site's data and client program before a few milliseconds of client step run; on
loopback that was ~10 s per round (issue 33). With ``--isolation process`` the SuperNode
only queues the task on its Runtime API; :func:`serve_tasks` acquires it there, as
Flower's SuperExec does, and runs geofl's :data:`~geofl.deploy.flower.client_app` in this
process, whose imports and built sites (:mod:`geofl.deploy.flower` caches them) stay warm
between messages. A task is exactly what ``flwr-clientapp`` does with it — pull the
message and context, run the ClientApp, push the reply and the updated context — minus
the FAB install and app import: only geofl's installed ClientApp ever runs here, and a
run of any other app gets an error reply.

Second, the SuperNode itself sleeps 3 s whenever the SuperLink has no message for it (a
constant in ``flwr.supernode.start_client_internal``) and 0.5 s between looks for a
reply to send, so every round waited ~3 s for the node to look again.
:func:`run_supernode` runs Flower's own ``flower-supernode`` with those idle waits capped
at ``poll_s`` (default 0.1 s, a loopback setting: each idle node then asks the SuperLink
``1/poll_s`` times a second; over a WAN with many sites ``--poll 1`` or more keeps the
SuperLink's load down and still saves the 3 s).

Third, Flower pulls a message's objects (its records and arrays, each stored apart) with
an exponential backoff that starts at 1 s (``PULL_INITIAL_BACKOFF`` in
``flwr.supercore.constant``, a constant no setting changes), and a message is visible
before its objects are: the SuperLink lists a message once its sender pushed its header,
before the objects that follow (``flwr.supernode.start_client_internal`` pulls a
request's, ``flwr.superlink.grid.http_grid.HttpGrid.pull_messages`` a reply's), and a
SuperNode creates the ClientApp task before it pulls the message's objects from the
SuperLink. A reader quick enough to see the message first finds an object missing and
sleeps 1 s (then 2 s, 4 s…), so a round lost a second or more to it: in the site's pull
nearly always, in the SuperNode's or the ServerApp's often. The warm site passes
:func:`~geofl.deploy.objectpulls.object_pull_waits` (a look after ``poll_s / 5``,
doubling up to ``poll_s``) to Flower's ``pull_and_inflate_object_from_tree`` (public
arguments; :func:`pull_task_input`); where Flower offers no argument,
:func:`~geofl.deploy.objectpulls.speed_up_object_pulls` binds the same waits into the
``pull_objects`` of the SuperNode's loop (:func:`run_supernode`) and of the ServerApp's
grid module (:func:`geofl.deploy.flower.server_main`, every 50 ms).

A site runs ``python -m geofl.deploy.warmsite supernode [--poll S] [--no-auth] --
<flower-supernode args>`` instead of ``flower-supernode <args>``
(:class:`geofl.deploy.loopback.Loopback` does): the SuperNode, with ``--isolation
process`` and capped waits, and beside it its warm site (``python -m
geofl.deploy.warmsite site --runtime-api-address HOST:PORT``). It refuses to start
without its key (:func:`node_key_problem`; one line, exit 2) unless ``--insecure`` or
``--no-auth``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from threading import Event
from types import ModuleType
from typing import TYPE_CHECKING, Any

from geofl.deploy.objectpulls import object_pull_waits, speed_up_object_pulls

if TYPE_CHECKING:  # flwr is the deploy extra: imported where a site runs
    from flwr.app import Context, Message
    from flwr.supercore.run import Run

__all__ = [
    "APP_ID",
    "DEFAULT_POLL_S",
    "KEY_OPTION",
    "main",
    "node_key_problem",
    "pull_task_input",
    "run_supernode",
    "run_task",
    "serve_tasks",
]

log = logging.getLogger("geofl")

#: The Flower app a warm site runs (``publisher/name`` of :func:`geofl.deploy.loopback.
#: write_app`'s pyproject): a run of another app is answered with an error.
APP_ID = "geofl/geofl-app"

#: Seconds between a warm site's looks for a task, and a fast SuperNode's idle waits.
DEFAULT_POLL_S = 0.1


def run_task(
    address: str, token: str, app: Callable[..., Any], poll_s: float = DEFAULT_POLL_S
) -> None:
    """Run one acquired ClientApp task (its ``token``) with ``app`` in this process.

    Mirrors ``flwr.supernode.runtime.run_clientapp`` (heartbeat, pull the task input, run,
    push the reply, push the task output with the context) but never exits the process:
    an exception in ``app`` becomes the message's error reply, as there. The message's
    objects are pulled with :func:`object_pull_waits` of ``poll_s``.
    """
    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
    from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

    client = _runtime_client(address, token)
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    context, status, details = None, SubStatus.FAILED, "the warm site failed the task"
    try:
        message, context, run = pull_task_input(client, poll_s)
        try:
            if run.fab_id != APP_ID:
                raise RuntimeError(f"this warm site runs {APP_ID} only, not {run.fab_id}")
            reply = app(message=message, context=context)
            status, details = SubStatus.COMPLETED, ""
        except Exception as err:  # the app's failure is the message's answer
            log.exception("warm site: the ClientApp raised")
            reason = f"{type(err)}:<'{err}'>"
            reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason), reply_to=message)
            details = reason
        push_message(client, reply, context)
    finally:
        push_task_output(client, context, status, details)
        heartbeat.stop()
        client.close()


def pull_task_input(client: Any, poll_s: float) -> tuple[Message, Context, Run]:
    """The task's message, context and run from the SuperNode's Runtime API ``client``.

    Flower's ``run_clientapp.pull_task_input`` (which also returns the FAB, unused here:
    nothing is installed), with the message's objects pulled with
    :func:`object_pull_waits` of ``poll_s``: the SuperNode created the task before it
    pulled those objects from the SuperLink, so they are often still missing.
    """
    from flwr.app import Message
    from flwr.common.serde import context_from_proto, run_from_proto
    from flwr.proto.node_pb2 import Node
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullTaskInputRequest
    from flwr.supercore.inflatable.inflatable_protobuf_utils import (
        make_confirm_message_received_fn_protobuf,
        make_pull_object_fn_protobuf,
    )
    from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
    from flwr.supercore.task_identity import TaskIdentity

    res = client.PullTaskInput(PullTaskInputRequest())
    TaskIdentity.task_id, TaskIdentity.run_id = res.task_id, res.run.run_id
    TaskIdentity.node_id = res.context.node_id
    context, run = context_from_proto(res.context), run_from_proto(res.run)
    pulled = client.PullMessages(PullAppMessagesRequest())
    if not pulled.messages_list:
        raise RuntimeError("the SuperNode's Runtime API has no message for this task")
    node, tree = Node(node_id=context.node_id), pulled.message_object_trees[0]
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(
            client.ConfirmMessageReceived, node, context.run_id
        ),
        return_type=Message,
        **object_pull_waits(poll_s),
    )
    message.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's: not deflated
    return message, context, run


def _runtime_client(address: str, token: str | None) -> Any:
    """An HTTP client of the SuperNode's Runtime API (loopback: no TLS, as Flower's
    SuperExec of a SuperNode without ``--ssl-certfile``)."""
    from flwr.supercore.interceptors import (
        RuntimeTokenHttpInterceptor,
        RuntimeVersionHttpInterceptor,
    )
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    interceptors: list[Any] = [RuntimeVersionHttpInterceptor(component_name="flwr-clientapp")]
    if token is not None:
        interceptors.append(RuntimeTokenHttpInterceptor(token))
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,
        root_certificates=None,
        interceptors=interceptors,
        retry_invoker=make_simple_http_retry_invoker(),
    )


def serve_tasks(address: str, poll_s: float = DEFAULT_POLL_S, stop: Event | None = None) -> int:
    """Acquire and run ClientApp tasks from the SuperNode's Runtime API at ``address``
    until ``stop`` is set; how many ran.

    geofl is imported before the first look, so that the first message does not pay for
    it either.
    """
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType

    from geofl.deploy.flower import client_app

    stop = stop or Event()
    acquirer = _runtime_client(address, None)
    done = 0
    try:
        while not stop.is_set():
            res = acquirer.AcquireTask(
                AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
            )
            if res.HasField("task") and res.token:
                try:
                    run_task(address, res.token, client_app, poll_s)
                except Exception:  # a task lost in transport: the server's deadline sees it
                    log.exception("warm site: task %d failed", res.task.task_id)
                done += 1
                continue  # another message may be queued already
            stop.wait(poll_s)
    finally:
        acquirer.close()
    return done


class _CappedClock:
    """The ``time`` module, with ``sleep`` capped at ``cap`` seconds."""

    def __init__(self, cap: float) -> None:
        self.cap = cap

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.cap))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def cap_supernode_waits(poll_s: float, module: ModuleType | None = None) -> bool:
    """Cap the SuperNode loop's idle waits (3 s without a message, 0.5 s between looks
    for a reply) at ``poll_s``; False, changing nothing, when this Flower has no such
    loop (another version)."""
    if module is None:
        import flwr.supernode.start_client_internal as loop

        module = loop
    if getattr(module, "time", None) is not time:
        return False
    setattr(module, "time", _CappedClock(poll_s))  # noqa: B010 - any module, checked above
    return True


def run_supernode(argv: Sequence[str], poll_s: float = DEFAULT_POLL_S) -> None:
    """Run ``flower-supernode`` with ``argv`` in ``--isolation process``, its idle waits
    capped at ``poll_s`` and its object pulls sped up (:func:`speed_up_object_pulls`), and
    its warm site process beside it (:func:`serve_tasks` on its Runtime API; the site exits
    with the node)."""
    import flwr.supernode.start_client_internal as loop
    from flwr.supernode.cli.flower_supernode import flower_supernode

    node = _runtime_of(argv)
    if not cap_supernode_waits(poll_s, loop):
        log.warning("this Flower's SuperNode loop is unknown: its idle waits stay as they are")
    if not speed_up_object_pulls(poll_s, loop):
        log.warning("this Flower's SuperNode pulls objects otherwise: its waits stay as they are")
    site = [sys.executable, "-m", "geofl.deploy.warmsite", "site", "--poll", str(poll_s)]
    site += ["--runtime-api-address", node, "--parent-pid", str(os.getpid())]
    subprocess.Popen(site)  # it exits with the node (--parent-pid)
    sys.argv = ["flower-supernode", *argv, "--isolation", "process"]
    flower_supernode()


def _runtime_of(argv: Sequence[str]) -> str:
    """The ``HOST:PORT`` of the Runtime API the SuperNode of ``argv`` serves."""
    from flwr.supercore.constant import SUPERNODE_UVICORN_DEFAULT_PORT, UVICORN_DEFAULT_HOST

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--host", default=UVICORN_DEFAULT_HOST)
    p.add_argument("--port", default=str(SUPERNODE_UVICORN_DEFAULT_PORT))
    known, _ = p.parse_known_args(list(argv))
    host = "127.0.0.1" if known.host in ("0.0.0.0", "") else known.host
    return f"[{host}]:{known.port}" if ":" in host else f"{host}:{known.port}"


#: The SuperNode's key option (``flower-supernode --auth-supernode-private-key``).
KEY_OPTION = "--auth-supernode-private-key"


def node_key_problem(argv: Sequence[str], no_auth: bool = False) -> str | None:
    """Why a site must not start with the SuperNode arguments ``argv``, or None.

    A site connects with its key (SuperNode authentication: only registered sites join,
    so no stranger claims a site's clients or joins secure aggregation) unless it runs
    ``--insecure`` (loopback rehearsals) or the operator says ``no_auth`` (a SuperLink
    with TLS but without ``--enable-supernode-auth``). Checked before anything starts: a
    SuperNode without a key would otherwise be refused by the SuperLink after it started.
    """
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    p.add_argument("--insecure", action="store_true")
    p.add_argument(KEY_OPTION, default=None)
    try:
        known, _ = p.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return f"{KEY_OPTION} needs the key file after it (geofl deploy key DIR NAME)"
    if known.insecure:
        return None
    key = known.auth_supernode_private_key
    if key is None:
        if no_auth:
            return None
        return (
            f"a SuperNode without a key: give {KEY_OPTION} FILE (geofl deploy key DIR NAME, "
            "then flwr supernode register NAME.pub on the server), or --no-auth before -- "
            "for a SuperLink without --enable-supernode-auth"
        )
    if not os.path.isfile(key) or not os.access(key, os.R_OK):
        return f"{KEY_OPTION} {key}: no readable key file there (geofl deploy key DIR NAME)"
    return None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m geofl.deploy.warmsite", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    site = sub.add_parser("site", help="serve a SuperNode's ClientApp tasks in this process")
    site.add_argument("--runtime-api-address", required=True, help="the SuperNode's HOST:PORT")
    site.add_argument("--parent-pid", type=int, default=None, help="exit when it exits")
    site.add_argument("--poll", type=float, default=DEFAULT_POLL_S, help="seconds")
    node = sub.add_parser("supernode", help="flower-supernode and its warm site")
    node.add_argument("--poll", type=float, default=DEFAULT_POLL_S, help="seconds")
    node.add_argument(
        "--no-auth", action="store_true", help="TLS without a key (no SuperNode auth)"
    )
    node.add_argument("args", nargs=argparse.REMAINDER, help="-- flower-supernode's args")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``site`` or ``supernode`` (module docstring)."""
    args = _parser().parse_args(argv)
    if not 0.001 <= args.poll <= 60:
        print(f"--poll {args.poll}: give seconds in [0.001, 60]", file=sys.stderr)
        return 2
    if args.cmd == "supernode":
        rest = args.args[1:] if args.args[:1] == ["--"] else args.args
        why = node_key_problem(rest, args.no_auth)
        if why is not None:
            print(f"error: {why}", file=sys.stderr)
            return 2
        run_supernode(rest, args.poll)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.parent_pid is not None:
        from flwr.supercore.app_utils import start_parent_process_monitor

        start_parent_process_monitor(args.parent_pid)
    try:
        serve_tasks(args.runtime_api_address, args.poll)
    except KeyboardInterrupt:  # the parent monitor's SIGINT, or Ctrl-C
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
