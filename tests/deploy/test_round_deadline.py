"""The deployment's fault policy, on an in-memory grid: a round waits for its replies up to
``round_timeout`` and then goes on with what arrived; a site that never answers (killed
mid-round) or answers with an error yields a lost upload naming the site, and the other
clients' results come through in cohort order."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Message, RecordDict

from geofl.client.state import ClientState
from geofl.client.step import ClientResult
from geofl.deploy.server import FlowerRunner
from geofl.deploy.wire import decode_request, encode_reply
from geofl.engine.scheduler import ClientJob, LostUpload
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta


class FakeGrid:
    """Answers train messages in memory: node 1 echoes an update, node 2 never answers,
    node 3 answers with a site error."""

    def __init__(self) -> None:
        self.sent: dict[str, Message] = {}
        self.replies: dict[str, Message] = {}

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for i, msg in enumerate(messages):
            mid = f"m{len(self.sent)}-{i}"
            self.sent[mid] = msg
            ids.append(mid)
            node = msg.metadata.dst_node_id
            if node == 1:
                req = decode_request(msg.content)
                d = req.directives
                meta = UpdateMeta(d.client_id, 10, d.round, steps=1)
                res = ClientResult(ClientUpdate(req.params + 1, meta), ClientState(), {})
                self.replies[mid] = Message(encode_reply(res), reply_to=msg)
            elif node == 3:
                err = RecordDict({"site": ConfigRecord({"error": "data missing"})})
                self.replies[mid] = Message(err, reply_to=msg)
        return ids

    def pull_messages(self, ids: Iterable[str]) -> list[Message]:
        out = []
        for mid in ids:
            rep = self.replies.pop(mid, None)
            if rep is not None:
                # the in-memory reply lacks the SuperLink's routing: point it at the request
                rep.metadata.__dict__["_reply_to_message_id"] = mid
                out.append(rep)
        return out


@pytest.fixture
def task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run/node identity Flower gives a ServerApp process (messages need it)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1, raising=False)


@pytest.mark.usefixtures("task_identity")
def test_round_goes_on_without_a_silent_site_after_its_deadline() -> None:
    grid = FakeGrid()
    runner = FlowerRunner(grid, {0: 1, 1: 2, 2: 3}, {}, round_timeout=0.5)  # type: ignore[arg-type]
    params = torch.zeros(4)
    jobs = [ClientJob(ClientDirectives(1, k), ClientState()) for k in (0, 1, 2)]
    t0 = time.monotonic()
    out = list(runner(params, jobs))
    assert time.monotonic() - t0 < 5.0
    assert isinstance(out[0], ClientResult)
    assert torch.equal(out[0].update.delta, torch.ones(4))
    assert isinstance(out[1], LostUpload) and "node 2 within 0.5 s" in out[1].detail
    assert isinstance(out[2], LostUpload) and "data missing" in out[2].detail
