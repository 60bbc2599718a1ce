"""Deployment round overhead (issue 33): nothing waits Flower's 1 s object-pull backoff.

Flower lists a message before its objects are stored and pulls a missing object again only
after 1 s (then 2 s, …; :mod:`geofl.deploy.objectpulls`). A round has three such readers —
the SuperNode pulling a request from the SuperLink, the warm site pulling it from its
SuperNode, the ServerApp pulling a reply — and each found the objects missing often enough
to cost the round a second or more. Here each reader gets a message whose objects are
stored 50 ms after its first look, as on loopback, and every wait before it looks again
must be the poll's (0.1 s), not Flower's first retry (0.8–1.2 s with its jitter). The
waits are recorded, not timed: the tests hold on a loaded machine.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common.serde import context_to_proto, fab_to_proto, message_to_proto, run_to_proto
from flwr.proto.message_pb2 import (
    ConfirmMessageReceivedResponse,
    PullObjectResponse,
    PushObjectResponse,
)
from flwr.proto.runtime_pb2 import (
    PullAppMessagesResponse,
    PullTaskInputResponse,
    PushAppMessagesResponse,
    PushTaskOutputResponse,
    SendTaskHeartbeatResponse,
)
from flwr.supercore.fab import Fab
from flwr.supercore.inflatable import inflatable_utils
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
    get_object_tree,
    iterate_object_tree,
)
from flwr.supercore.run import Run

from geofl.deploy import flower, warmsite
from geofl.errors import DeployError

#: Seconds until a message's objects are stored (after the reader's first look).
LATE_S = 0.05


@pytest.fixture(autouse=True)
def task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run/node identity Flower gives an app process (messages need it; a pulled task
    sets it: restored after each test)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1, raising=False)


class LateObjects:
    """A message's objects as a store that holds them only ``LATE_S`` after the first
    look (the sender, or the SuperNode, still pushing them)."""

    def __init__(self, message: Message) -> None:
        message.metadata.__dict__["_message_id"] = message.object_id
        self.message, self.tree = message, get_object_tree(message)
        self.contents = {k: o.deflate() for k, o in get_all_nested_objects(message).items()}
        self.first_look: float | None = None

    @property
    def ids(self) -> list[str]:
        return [t.object_id for t in iterate_object_tree(self.tree)]

    def stored(self) -> bool:
        self.first_look = self.first_look or time.monotonic()
        return time.monotonic() - self.first_look >= LATE_S

    def pull(self, object_id: str) -> bytes:
        """A ``pull_object_fn`` of Flower's ``pull_objects``."""
        if not self.stored():
            raise inflatable_utils.ObjectUnavailableError(object_id)
        return self.contents[object_id]


def _request() -> Message:
    content = RecordDict({"directives": ConfigRecord({"round": 1, "client": 0})})
    return Message(content, dst_node_id=7, message_type="train", group_id="1")


class FakeRuntimeApi:
    """A SuperNode's Runtime API holding one task whose message's objects arrive late."""

    def __init__(self) -> None:
        self.objects = LateObjects(_request())
        self.replies: list[Any] = []
        self.status = ""

    def PullTaskInput(self, _req: Any) -> PullTaskInputResponse:  # noqa: N802 - Flower's
        run = Run.create_empty(1)
        run.fab_id = warmsite.APP_ID
        context = Context(1, 7, {}, RecordDict(), {})  # type: ignore[arg-type]
        fab = fab_to_proto(Fab("0" * 64, b"", {}))
        return PullTaskInputResponse(
            context=context_to_proto(context), run=run_to_proto(run), fab=fab, task_id=3
        )

    def PullMessages(self, _req: Any) -> PullAppMessagesResponse:  # noqa: N802
        msg = message_to_proto(self.objects.message)
        return PullAppMessagesResponse(
            messages_list=[msg], message_object_trees=[self.objects.tree]
        )

    def PullObject(self, req: Any) -> PullObjectResponse:  # noqa: N802
        if not self.objects.stored():
            return PullObjectResponse(object_found=True, object_available=False)
        content = self.objects.contents[req.object_id]
        return PullObjectResponse(object_found=True, object_available=True, object_content=content)

    def ConfirmMessageReceived(self, _req: Any) -> ConfirmMessageReceivedResponse:  # noqa: N802
        return ConfirmMessageReceivedResponse()

    def PushMessages(self, req: Any) -> PushAppMessagesResponse:  # noqa: N802
        self.replies.extend(req.messages_list)
        ids = [t.object_id for t in iterate_object_tree(req.message_object_trees[0])]
        return PushAppMessagesResponse(objects_to_push=ids, session_id="s")

    def PushObject(self, _req: Any) -> PushObjectResponse:  # noqa: N802
        return PushObjectResponse(stored=True)

    def PushTaskOutput(self, req: Any) -> PushTaskOutputResponse:  # noqa: N802
        self.status = req.sub_status
        return PushTaskOutputResponse()

    def SendTaskHeartbeat(self, _req: Any) -> SendTaskHeartbeatResponse:  # noqa: N802
        return SendTaskHeartbeatResponse(success=True)

    def close(self) -> None: ...


def _echo(message: Message, context: Context) -> Message:
    return Message(message.content, reply_to=message)


@pytest.fixture
def retry_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait Flower's ``pull_objects`` makes before it retries a missing object, in
    seconds (its waits are ``threading.Event.wait`` calls with a timeout): what a late object
    costs, read off the code's own choice instead of a wall clock."""
    waits: list[float] = []

    class RecordingEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            if timeout is not None:
                waits.append(timeout)
            return super().wait(timeout)

    monkeypatch.setattr(
        inflatable_utils,
        "threading",
        types.SimpleNamespace(Event=RecordingEvent, Lock=threading.Lock),
    )
    return waits


def _short(waits: list[float], who: str) -> None:
    """Every retry wait at most the 0.1 s poll (±20 % jitter), and at least one (the
    objects were late): Flower's own first wait is 1 s."""
    assert waits, "no retry: the objects were not late"
    assert max(waits) <= 0.1 * 1.2, f"{who} waited {max(waits):.2f} s before looking again"


def test_a_warm_site_runs_a_task_whose_objects_arrive_late_without_a_1s_wait(
    monkeypatch: pytest.MonkeyPatch, retry_waits: list[float]
) -> None:
    """The SuperNode creates the task before it has pulled the message's objects from the
    SuperLink: the warm site's first look finds them missing."""
    for name in ("flwr.supercore.heartbeat", "flwr.supernode.runtime.run_clientapp"):
        importlib.import_module(name)  # what run_task imports: outside the timing

    api = FakeRuntimeApi()
    monkeypatch.setattr(warmsite, "_runtime_client", lambda address, token: api)
    warmsite.run_task("127.0.0.1:1", "token", _echo)
    assert api.status == "completed" and len(api.replies) == 1
    _short(retry_waits, "the site")


def test_the_site_pulls_the_message_flower_would_have_pulled() -> None:
    api = FakeRuntimeApi()
    message, context, run = warmsite.pull_task_input(api, poll_s=0.1)
    assert message.object_id == api.objects.message.object_id
    assert message.metadata.message_id == api.objects.tree.object_id
    assert message.content.config_records["directives"]["client"] == 0
    assert (context.node_id, run.fab_id) == (7, warmsite.APP_ID)


def test_a_warm_supernode_pulls_late_request_objects_without_a_1s_wait(
    monkeypatch: pytest.MonkeyPatch, retry_waits: list[float]
) -> None:
    """The SuperNode sees a request on the SuperLink before the ServerApp has pushed its
    objects (``run_supernode`` with Flower's SuperNode and the site process stubbed)."""
    import flwr.supernode.start_client_internal as loop

    cli = importlib.import_module("flwr.supernode.cli.flower_supernode")  # the package's
    # attribute of that name is the function

    monkeypatch.setattr(loop, "pull_objects", loop.pull_objects)  # restored afterwards
    monkeypatch.setattr(loop, "time", loop.time)
    monkeypatch.setattr(sys, "argv", sys.argv)
    monkeypatch.setattr(cli, "flower_supernode", lambda: None)
    monkeypatch.setattr(warmsite.subprocess, "Popen", lambda args: None)
    warmsite.run_supernode(["--insecure", "--superlink", "127.0.0.1:1"], poll_s=0.1)
    late = LateObjects(_request())
    got = loop.pull_objects(late.ids, pull_object_fn=late.pull)
    assert set(got) == set(late.ids)
    _short(retry_waits, "the SuperNode")


def test_the_serverapp_pulls_late_reply_objects_without_a_1s_wait(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, retry_waits: list[float]
) -> None:
    """The ServerApp's grid sees a reply before the SuperNode has pushed its objects: the
    ServerApp binds shorter waits into its grid's module before anything else."""
    import flwr.superlink.grid.http_grid as http_grid

    monkeypatch.setattr(http_grid, "pull_objects", http_grid.pull_objects)  # restored

    def no_setup(*args: object) -> None:
        raise DeployError("no setup in this test")

    monkeypatch.setattr(flower, "load_setup", no_setup)
    context = Context(1, 0, {}, RecordDict(), {"config": "x.yaml", "out": str(tmp_path)})  # type: ignore[arg-type]
    flower.server_main(http_grid.HttpGrid(token="t"), context)
    late = LateObjects(Message(RecordDict({"site": ConfigRecord({"client": 0})}), 0, "train"))
    got = http_grid.pull_objects(late.ids, pull_object_fn=late.pull)
    assert set(got) == set(late.ids)
    _short(retry_waits, "the ServerApp")


def test_faster_pulls_still_end_at_once_when_an_object_is_gone(retry_waits: list[float]) -> None:
    """A message whose objects were dropped (its upload session expired) fails its pull at
    once, not after the uncounted tries."""

    def gone(object_id: str) -> bytes:
        raise inflatable_utils.ObjectPullError(object_id, "the object could not be found.")

    from geofl.deploy.objectpulls import object_pull_waits

    pull = functools.partial(inflatable_utils.pull_objects, **object_pull_waits(0.1))
    with pytest.raises(inflatable_utils.ObjectPullError):
        pull(["a" * 64], pull_object_fn=gone)
    assert retry_waits == []  # no retry of a gone object


def test_speed_up_object_pulls_binds_only_flowers_pull_objects() -> None:
    from geofl.deploy import objectpulls

    fake = types.ModuleType("fake_grid")
    fake.pull_objects = inflatable_utils.pull_objects  # type: ignore[attr-defined]
    assert objectpulls.speed_up_object_pulls(0.1, fake)
    assert fake.pull_objects.keywords["backoff_cap"] == 0.1  # type: ignore[attr-defined]
    assert objectpulls.speed_up_object_pulls(1.0, fake)  # again: rebinds, never nests
    bound = fake.pull_objects  # type: ignore[attr-defined]
    assert bound.func is inflatable_utils.pull_objects and bound.keywords["backoff_cap"] == 1.0
    other = types.ModuleType("other_grid")
    other.pull_objects = len  # type: ignore[attr-defined]
    assert not objectpulls.speed_up_object_pulls(0.1, other) and other.pull_objects is len  # type: ignore[attr-defined]
    assert not objectpulls.speed_up_object_pulls(0.1, types.ModuleType("no_pulls"))


def test_this_flower_pulls_objects_where_geofl_shortens_the_waits() -> None:
    """Flower 1.42 calls ``pull_objects`` through these modules' globals: an upgrade that
    changes that shows here, not as slow rounds."""
    import flwr.superlink.grid.http_grid as http_grid
    import flwr.supernode.start_client_internal as loop

    for module in (http_grid, loop):
        found = module.pull_objects
        found = found.func if isinstance(found, functools.partial) else found
        assert found is inflatable_utils.pull_objects, module.__name__


def test_object_pull_waits_never_exceed_the_poll() -> None:
    from geofl.deploy.objectpulls import object_pull_waits

    waits = object_pull_waits(0.1)
    assert waits["initial_backoff"] <= waits["backoff_cap"] == 0.1
    assert waits["max_tries_per_object"] is None  # bounded by Flower's PULL_MAX_TIME instead
