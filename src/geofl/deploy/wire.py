"""What crosses between the ServerApp and a site, as Flower records.

Server → site (one message per trained client, type ``train``):

* ``model`` — :class:`~flwr.app.ArrayRecord`: ``params`` (``[D]`` float32 global model)
  and ``payload.<name>`` (the strategy's broadcast tensors, e.g. SCAFFOLD's ``control``);
* ``directives`` — :class:`~flwr.app.ConfigRecord`: ``round``, ``client``,
  ``extra.<key>`` (per-client scalar directives), ``fingerprint`` (the config the server
  runs), ``admitted_round`` (the round of the client's last admitted upload, 0: none — the
  site keeps the tensors it staged then and forgets those of any later step, whose upload
  was refused or lost; :mod:`geofl.deploy.sitestate`), ``resume_round`` (the round of the
  checkpoint the server resumed from, 0: a fresh run) and ``ledger_events`` (how many
  events the client's privacy ledger has on the server); with site-local data ``model``
  also holds ``norm.mean``/``norm.std``, the global band statistics
  (:mod:`geofl.deploy.sitedata`, which also defines the ``evaluate`` message).

Site → server (the reply):

* ``update`` — ArrayRecord: ``delta`` (``[D]`` float32 Δw), ``upload.<name>``,
  ``label_histogram`` when shared;
* ``meta`` — :class:`~flwr.app.MetricRecord`: ``num_samples``, ``train_loss``, ``steps``,
  ``bytes_sent``, ``scalar.<name>``, ``metric.<name>``, ``spatial_alpha``;
* ``site`` — ConfigRecord: ``client``, ``round``, ``dp_events`` (JSON list: the client's
  whole privacy ledger, public mechanism parameters only), ``epsilon`` (its ε after the
  round, when it accounts); a client that declines the round (privacy budget) sends only
  ``declined``, ``epsilon`` (what the round would reach) and ``target``. The client-local log
  never leaves the site.

Arrays travel as raw float32 bytes, so values are bit-exact on both sides.

Under secure aggregation (:mod:`geofl.deploy.secagg`) a site gets one message per round
stage of Flower's SecAgg+ instead: the stage-2 message carries the requests above of all
its trained clients (each record under ``<name>.<client>``), and its reply carries no
record of this module's reply — only the masked sum and, per client, the ``site`` record's
ledger, ε or refusal.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from geofl.client.state import ClientState
from geofl.client.step import ClientResult
from geofl.errors import BudgetExhaustedError, DeployError
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

__all__ = [
    "TrainRequest",
    "check_reply",
    "decode_norm",
    "decode_reply",
    "decode_request",
    "encode_declined",
    "encode_reply",
    "encode_request",
    "exchange",
]

PARAMS, PAYLOAD, UPLOAD, EXTRA = "params", "payload.", "upload.", "extra."
NORM_MEAN, NORM_STD = "norm.mean", "norm.std"


#: Seconds between two pulls of pending replies (Flower's ``Grid.send_and_receive`` waits
#: 3 s between pulls, which would add up to 3 s to every exchange).
PULL_INTERVAL = 0.05


def exchange(
    grid: Grid, msgs: Sequence[Message], timeout: float
) -> tuple[list[str], dict[str, Message]]:
    """Push ``msgs`` and pull their replies until all arrived or ``timeout`` seconds passed.

    Returns:
        The pushed messages' ids (in order) and the replies that arrived, by the id of the
        message they answer.
    """
    ids = list(grid.push_messages(msgs))
    got: dict[str, Message] = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(ids) and time.monotonic() < deadline:
        for rep in grid.pull_messages([i for i in ids if i not in got]):
            got[rep.metadata.reply_to_message_id] = rep
        if len(got) < len(ids):
            time.sleep(PULL_INTERVAL)
    return ids, got


def _array(t: torch.Tensor | np.ndarray) -> Array:
    return Array(np.ascontiguousarray(np.asarray(t)))


def _tensor(a: Array) -> torch.Tensor:
    return torch.from_numpy(np.array(a.numpy(), copy=True))


@dataclass(frozen=True)
class TrainRequest:
    """A decoded ``train`` message: the global model, directives and the server's word on
    the client's state.

    Attributes:
        params: ``[D]`` float32 global model.
        directives: The client's directives (payload tensors included).
        fingerprint: The server's config fingerprint.
        admitted_round: Round of the client's last admitted upload (0: none).
        resume_round: Round of the checkpoint the server resumed from (0: none).
        ledger_events: Events in the client's privacy ledger on the server.
        norm: With site-local data, the global ``(mean, std)`` the site standardises its
            data with (:mod:`geofl.deploy.sitedata`); None: none sent.
    """

    params: torch.Tensor
    directives: ClientDirectives
    fingerprint: str
    admitted_round: int = 0
    resume_round: int = 0
    ledger_events: int = 0
    norm: tuple[torch.Tensor, torch.Tensor] | None = None


def encode_request(
    params: torch.Tensor,
    d: ClientDirectives,
    fingerprint: str,
    admitted_round: int,
    *,
    resume_round: int = 0,
    ledger_events: int = 0,
    norm: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> RecordDict:
    """The ``train`` message content for client ``d.client_id``."""
    arrays = {PARAMS: _array(params)}
    if norm is not None:
        arrays.update({NORM_MEAN: _array(norm[0]), NORM_STD: _array(norm[1])})
    arrays.update({PAYLOAD + k: _array(v) for k, v in d.payload.items()})
    config: dict[str, Any] = {
        "round": d.round,
        "client": d.client_id,
        "fingerprint": fingerprint,
        "admitted_round": admitted_round,
        "resume_round": resume_round,
        "ledger_events": ledger_events,
    }
    for key, value in d.extra.items():
        if not isinstance(value, bool | int | float | str):
            raise DeployError(f"directive {key!r} of client {d.client_id} is not a scalar")
        config[EXTRA + key] = value
    return RecordDict({"model": ArrayRecord(arrays), "directives": ConfigRecord(config)})


def decode_request(content: RecordDict) -> TrainRequest:
    """Read a ``train`` message (inverse of :func:`encode_request`)."""
    arrays, config = content.array_records["model"], content.config_records["directives"]
    payload = {k[len(PAYLOAD) :]: _tensor(a) for k, a in arrays.items() if k.startswith(PAYLOAD)}
    extra = {k[len(EXTRA) :]: v for k, v in config.items() if k.startswith(EXTRA)}
    d = ClientDirectives(int(config["round"]), int(config["client"]), extra, payload)  # type: ignore[arg-type]
    return TrainRequest(
        _tensor(arrays[PARAMS]),
        d,
        str(config["fingerprint"]),
        int(config["admitted_round"]),  # type: ignore[arg-type]
        int(config["resume_round"]),  # type: ignore[arg-type]
        int(config["ledger_events"]),  # type: ignore[arg-type]
        decode_norm(arrays),
    )


def decode_norm(arrays: ArrayRecord) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The ``(mean, std)`` a message carries (None: none)."""
    if NORM_MEAN not in arrays:
        return None
    return _tensor(arrays[NORM_MEAN]), _tensor(arrays[NORM_STD])


def encode_reply(res: ClientResult) -> RecordDict:
    """A client step's upload (Δw, uploads, metadata) and its public ledger."""
    u, m = res.update, res.update.meta
    arrays = {"delta": _array(u.delta)}
    arrays.update({UPLOAD + k: _array(v) for k, v in u.tensors.items()})
    if m.label_histogram is not None:
        arrays["label_histogram"] = _array(np.asarray(m.label_histogram))
    metrics: dict[str, Any] = {
        "num_samples": int(m.num_samples),
        "train_loss": float(m.train_loss),
        "steps": int(m.steps),
        "bytes_sent": int(m.bytes_sent),
    }
    metrics.update({f"scalar.{k}": float(v) for k, v in m.scalars.items()})
    metrics.update({f"metric.{k}": float(v) for k, v in m.train_metrics.items()})
    if m.spatial_alpha is not None:
        metrics["spatial_alpha"] = float(m.spatial_alpha)
    site: dict[str, Any] = {
        "client": m.client_id,
        "round": m.round,
        "dp_events": json.dumps([dict(e) for e in res.state.dp_events]),
    }
    if res.epsilon is not None:
        site["epsilon"] = float(res.epsilon)
    return RecordDict(
        {"update": ArrayRecord(arrays), "meta": MetricRecord(metrics), "site": ConfigRecord(site)}
    )


def encode_declined(client: int, round_idx: int, epsilon: float, target: float) -> RecordDict:
    """A client's refusal of the round: its ε would reach ``epsilon`` > ``target``."""
    record = {"client": client, "round": round_idx, "epsilon": epsilon, "target": target}
    return RecordDict({"site": ConfigRecord({**record, "declined": True})})


def check_reply(content: RecordDict, *, histogram_allowed: bool) -> str | None:
    """Why the server refuses a site's reply before decoding it, or None.

    A method whose clients never send their label histogram (DP-SGD, or the
    ``withhold_histogram`` release step: :func:`~geofl.client.release.histogram_released`)
    refuses a reply carrying one: exact class counts are outside the client's ε, so a site
    that sends them runs another method (or was altered) and its upload is not admitted.
    """
    update = content.array_records.get("update")
    if not histogram_allowed and update is not None and "label_histogram" in update:
        return (
            "sent a label_histogram, which this method's clients never release (it is "
            "outside their ε); run the site with the server's config"
        )
    return None


def decode_reply(content: RecordDict) -> ClientResult | BudgetExhaustedError:
    """The server's view of a reply: a :class:`ClientResult` whose state holds only the
    client's public ledger, or the client's refusal of the round."""
    site = content.config_records["site"]
    if "declined" in site:
        return BudgetExhaustedError(
            int(site["client"]),  # type: ignore[arg-type]
            float(site["epsilon"]),  # type: ignore[arg-type]
            float(site["target"]),  # type: ignore[arg-type]
        )
    arrays, metrics = content.array_records["update"], content.metric_records["meta"]
    hist = arrays.get("label_histogram")
    meta = UpdateMeta(
        client_id=int(site["client"]),  # type: ignore[arg-type]
        num_samples=int(metrics["num_samples"]),  # type: ignore[arg-type]
        round=int(site["round"]),  # type: ignore[arg-type]
        label_histogram=None if hist is None else np.array(hist.numpy(), copy=True),
        train_loss=float(metrics["train_loss"]),  # type: ignore[arg-type]
        train_metrics=_prefixed(metrics, "metric."),
        steps=int(metrics["steps"]),  # type: ignore[arg-type]
        bytes_sent=int(metrics["bytes_sent"]),  # type: ignore[arg-type]
        scalars=_prefixed(metrics, "scalar."),
        spatial_alpha=float(metrics["spatial_alpha"]) if "spatial_alpha" in metrics else None,  # type: ignore[arg-type]
    )
    uploads = {k[len(UPLOAD) :]: _tensor(a) for k, a in arrays.items() if k.startswith(UPLOAD)}
    update = ClientUpdate(_tensor(arrays["delta"]), meta, {}, uploads)
    events = tuple(json.loads(str(site["dp_events"])))
    eps = site.get("epsilon")
    return ClientResult(update, ClientState({}, events), {}, None if eps is None else float(eps))  # type: ignore[arg-type]


def _prefixed(record: Mapping[str, Any], prefix: str) -> dict[str, float]:
    return {k[len(prefix) :]: float(v) for k, v in record.items() if k.startswith(prefix)}
