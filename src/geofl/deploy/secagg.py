"""Secure aggregation in a deployment: a round's updates through Flower's SecAgg+.

With ``privacy.secure_aggregation`` (or ``geofl deploy loopback --secagg``) the server never
receives an individual update. Each round, :class:`SecAggRunner` runs Flower's own
``SecAggPlusWorkflow`` (Bell et al. 2020) over the sites that host the round's trained
clients, and every site answers through Flower's ``secaggplus_mod`` (:func:`secagg_mod`):

1. the site trains each of its requested clients exactly as without secure aggregation
   (same client step, state and ledger: :class:`~geofl.deploy.site.Site`);
2. it sums them itself, :func:`site_sum`: v = Σ_k w_k [Δ_k, loss_k] / W with W = Σ_k w_k,
   w_k the client's released n_k (``data_size``) or 1 (``uniform``) — the weighting the
   server would have applied, so the sum over sites gives the server's weighted mean;
3. ``secaggplus_mod`` encodes (W/W_max)·v in fixed point, masks it (pairwise masks
   that cancel in the sum, plus a private one the server removes only for sites that
   delivered) and sends only the masked integers; the workflow unmasks the sum and
   divides by ΣW/W_max: the weighted mean of the round's Δ_k (and of the losses).

The server's round loop is the simulator's (:class:`~geofl.engine.run.FederatedRun`): every
admitted client's "upload" is the round's mean, so the method's linear server side (mean
aggregator over data_size or uniform weights: :mod:`geofl.config.secagg`) returns that
mean, and DP-FTRL's sum of K equal rows is K·mean = Σ_k Δ_k. What crosses in clear per
client is its public ledger (the mechanism parameters of its DP events), its ε, or that it
declined the round: accounting works as without secure aggregation. Per-client n_k,
losses and label histograms never leave the site; Flower's ``num_examples`` (a site's W)
is zeroed after masking, so the server learns only ΣW/W_max (the factor it divides by).

Quantisation (``privacy.secure_aggregation``: c, Q, W_max): each coordinate of
(W/W_max)·v is clipped to [-c, c] and stochastically rounded to a grid of step 2c/Q, so a
coordinate of the mean is off by at most S·(2c/Q)·W_max/ΣW over S sites (zero in
expectation). A site whose values exceed ±c is clipped and logs a warning.

Dropouts: a site that stops answering mid-protocol is recovered from the others' shares
while at least ⌈2/3⌉ of a round's sites (at least 2) answer; otherwise the round's
updates are lost (``lost_in_transit``) and the model stays. A round needs two sites with
trained clients: the sum over one site is its update.

The server's view: every reply the workflow receives is described (record names, array
shapes, keys; never values) in ``secagg_view.jsonl`` in the seed directory, one line per
reply, so an audit — and the loopback test — can check that no individual update arrived.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
from flwr.serverapp import Grid

from geofl.client.state import ClientState
from geofl.client.step import ClientResult
from geofl.config.training import SecureAggregationConfig
from geofl.deploy.wire import decode_reply, exchange
from geofl.engine.clients.runner import LostUpload, StepOutcome
from geofl.errors import BudgetExhaustedError
from geofl.update import ClientUpdate, UpdateMeta

__all__ = [
    "RECONSTRUCTION_THRESHOLD",
    "VIEW_FILE",
    "SecureSum",
    "client_record",
    "describe_reply",
    "is_secagg",
    "merge_requests",
    "secagg_mod",
    "secure_outcome",
    "secure_sum",
    "site_sum",
    "split_requests",
]

log = logging.getLogger("geofl")

#: The server's view of the protocol (one line per reply received), in the seed directory.
VIEW_FILE = "secagg_view.jsonl"

#: Fraction of a round's sites whose shares rebuild a dropped site's masks (Flower's
#: ``reconstruction_threshold``; at least 2). Above one half, so a server that claims a
#: live site dropped cannot gather both its mask seed's and its key's shares.
RECONSTRUCTION_THRESHOLD = 2 / 3

#: Per-client records in a site's reply (``fitres.metrics``): ``client.<k>`` → JSON.
CLIENT_KEY = "client."

#: Flower's clear weight record in a site's reply (zeroed once the weight is masked).
NUM_EXAMPLES = "fitres.num_examples"

#: In a site's reply metrics: whether the loss coordinate of its sum is released.
LOSS_KEY = "loss_released"


def is_secagg(msg: Message) -> bool:
    """Whether ``msg`` is a step of the SecAgg+ protocol (it carries its config record)."""
    return RECORD_KEY_CONFIGS in msg.content.config_records


# ------------------------------------------------------------------------------ site side
def secagg_mod(msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
    """Flower's ``secaggplus_mod`` for SecAgg+ messages (others pass straight through),
    with the site's weight W removed from the reply once it is folded into the masked
    vector: the workflow needs only the masked factor, and W is the sum of its clients'
    n_k."""
    if msg.metadata.message_type != MessageType.TRAIN or not is_secagg(msg):
        return call_next(msg, ctxt)
    reply = secaggplus_mod(msg, ctxt, call_next)
    if NUM_EXAMPLES in reply.content.metric_records:
        reply.content.metric_records[NUM_EXAMPLES] = MetricRecord({"num_examples": 0})
    return reply


def merge_requests(requests: Mapping[int, RecordDict]) -> RecordDict:
    """One site's ``train`` requests (client → content) as one message content: each
    record under ``<name>.<client>``."""
    out = RecordDict()
    for k, content in requests.items():
        for name, record in content.items():
            out[f"{name}.{k}"] = record
    return out


def split_requests(content: RecordDict) -> dict[int, RecordDict]:
    """The per-client requests of :func:`merge_requests` (the SecAgg+ record is not one)."""
    out: dict[int, RecordDict] = {}
    for key, record in content.items():
        name, _, client = key.rpartition(".")
        if key == RECORD_KEY_CONFIGS or not (client.isascii() and client.isdigit()):
            continue
        out.setdefault(int(client), RecordDict())[name] = record
    return out


def site_sum(
    replies: Mapping[int, RecordDict],
    dim: int,
    weighting: str,
    settings: SecureAggregationConfig,
) -> RecordDict:
    """A site's SecAgg+ input from its clients' replies: the FitRes content whose
    parameters are v = Σ_k w_k [Δ_k, loss_k] / W, whose ``num_examples`` is W = Σ_k w_k
    (w_k: the released n_k for ``data_size``, else 1), and whose metrics hold each
    client's public record (ledger and ε, a refusal, or an error) and whether the loss
    is released (a client that keeps it, DP-SGD's NaN, keeps it for the whole site: its
    coordinate is sent as 0)."""
    records: dict[str, Any] = {}
    rows: list[tuple[int, np.ndarray]] = []
    for k, content in sorted(replies.items()):
        rec, part = _client_part(k, content, dim, weighting)
        records[f"{CLIENT_KEY}{k}"] = json.dumps(rec)
        if part is not None:
            rows.append(part)
    total = sum(w for w, _ in rows)
    vector = np.zeros(dim + 1)
    for w, row in rows:
        vector += (w / max(total, 1)) * np.nan_to_num(row, nan=0.0)
    records[LOSS_KEY] = bool(rows) and all(np.isfinite(r[-1]) for _, r in rows)
    if not records[LOSS_KEY]:
        vector[-1] = 0.0
    _warn_clipping(vector, total, settings)
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([vector]), total, records)
    return compat.fitres_to_recorddict(fitres, keep_input=True)


def _client_part(
    k: int, content: RecordDict, dim: int, weighting: str
) -> tuple[dict[str, Any], tuple[int, np.ndarray] | None]:
    """Client ``k``'s public record and, when its update enters the sum, (w_k, its row
    [Δ_k, loss_k]). An update the plain server would refuse as malformed (not ``[D]``,
    not finite) is refused here, before the sum, where the server cannot see it."""
    site = content.config_records.get("site")
    if site is not None and "error" in site:
        return {"error": str(site["error"])}, None
    res = decode_reply(content)
    if isinstance(res, BudgetExhaustedError):
        return {"declined": True, "epsilon": res.epsilon, "target": res.target}, None
    delta = res.update.delta.double().numpy().ravel()
    if delta.size != dim or not np.isfinite(delta).all():
        why = f"client {k}'s update is not {dim} finite values; the site left it out of the sum"
        return {"error": why}, None
    w = int(res.update.meta.num_samples) if weighting == "data_size" else 1
    public = {"dp_events": [dict(e) for e in res.state.dp_events], "epsilon": res.epsilon}
    return public, (w, np.append(delta, res.update.meta.train_loss))


def _warn_clipping(vector: np.ndarray, total: int, s: SecureAggregationConfig) -> None:
    """Log when SecAgg+'s clipping to ±c will change this site's contribution."""
    scaled = np.abs(vector) * (total / s.max_weight)
    clipped = int((scaled > s.clipping_range).sum())
    if clipped:
        log.warning(
            "secure aggregation clips %d of %d coordinates of this site's sum to ±%g "
            "(privacy.secure_aggregation.clipping_range; raise it or max_weight)",
            clipped,
            scaled.size,
            s.clipping_range,
        )


# ---------------------------------------------------------------------------- server side
class SecureSum(Strategy):
    """The workflow's strategy: it names the round's sites and keeps what SecAgg+ gives
    the server.

    Attributes:
        mean: ``[D + 1]`` the unmasked weighted mean of the sites' vectors (Δ, then the
            loss); None when the protocol halted before the unmask stage.
        records: Node → client → the public record that node sent for the client
            (ledger and ε, a refusal, or an error), as text: a site speaks only for the
            clients it hosts (:func:`secure_outcome` reads the hosting node's).
        answered: The nodes whose masked vectors entered the sum.
        loss_released: Whether every answering site released its clients' losses (else
            the mean loss is NaN: not released, as DP-SGD keeps it).
    """

    def __init__(self, proxies: Sequence[ClientProxy]) -> None:
        self.proxies = list(proxies)
        self.mean: np.ndarray | None = None
        self.records: dict[int, dict[int, str]] = {}
        self.answered: set[int] = set()
        self.loss_released = True

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        return [(p, FitIns(Parameters([], ""), {})) for p in self.proxies]

    def aggregate_fit(
        self, server_round: int, results: Any, failures: Any
    ) -> tuple[Parameters | None, dict[str, Any]]:
        for proxy, fitres in results:
            node = int(cast(GridClientProxy, proxy).node_id)
            self.answered.add(node)
            self.loss_released &= fitres.metrics.get(LOSS_KEY) is True
            mine = self.records.setdefault(node, {})
            for key, text in fitres.metrics.items():
                client = str(key)[len(CLIENT_KEY) :]
                if str(key).startswith(CLIENT_KEY) and client.isascii() and client.isdigit():
                    mine[int(client)] = str(text)
        if results:
            (self.mean,) = parameters_to_ndarrays(results[0][1].parameters)
        return None, {}

    def configure_evaluate(self, *args: Any) -> list[tuple[ClientProxy, Any]]:
        return []

    def aggregate_evaluate(self, *args: Any) -> tuple[float | None, dict[str, Any]]:
        return None, {}

    def evaluate(self, *args: Any) -> None:
        return None


class _Workflow(SecAggPlusWorkflow):
    """Flower's SecAgg+ workflow with each site's geofl requests as its stage-2 content
    (the workflow's own content would be a legacy ``FitIns``)."""

    def __init__(self, contents: Mapping[int, RecordDict], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.contents = contents

    def setup_stage(self, grid: Grid, context: LegacyContext, state: WorkflowState) -> bool:
        ok = bool(super().setup_stage(grid, context, state))
        state.nid_to_fitins = {nid: self.contents[nid] for nid in state.nid_to_fitins}
        return ok


class _ViewGrid:
    """A Grid for the workflow: its exchanges poll as fast as geofl's
    (:func:`~geofl.deploy.wire.exchange`), and every reply is described to ``seen``."""

    def __init__(self, grid: Grid, timeout: float, seen: Callable[[Message], None]) -> None:
        self.grid, self.timeout, self.seen = grid, timeout, seen

    def send_and_receive(
        self, messages: Sequence[Message], *, timeout: float | None = None
    ) -> list[Message]:
        ids, got = exchange(self.grid, list(messages), timeout or self.timeout)
        replies = [got[i] for i in ids if i in got]
        for rep in replies:
            self.seen(rep)
        return replies

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)


def describe_reply(msg: Message, round_idx: int) -> dict[str, Any]:
    """What the server received in ``msg``: record names, array shapes, keys (no values)."""
    c = msg.content
    view: dict[str, Any] = {"round": round_idx, "node": int(msg.metadata.src_node_id)}
    view["error"] = msg.has_error()
    if msg.has_error():
        return view
    view["arrays"] = {
        n: {k: list(a.shape) for k, a in r.items()} for n, r in c.array_records.items()
    }
    view["configs"] = {n: sorted(r) for n, r in c.config_records.items()}
    view["metrics"] = {n: sorted(r) for n, r in c.metric_records.items()}
    protocol = c.config_records.get(RECORD_KEY_CONFIGS)
    masked = None if protocol is None else protocol.get(Key.MASKED_PARAMETERS)
    if masked is not None:
        view["masked_bytes"] = [len(b) for b in cast(list[bytes], masked)]
    return view


def secure_sum(
    grid: Grid,
    contents: Mapping[int, RecordDict],
    settings: SecureAggregationConfig,
    timeout: float,
    round_idx: int,
    view: Path | None = None,
) -> SecureSum:
    """Run one SecAgg+ round over the sites of ``contents`` (node → its merged requests,
    :func:`merge_requests`); what the server learns. ``view``: where the description of
    every reply is appended (None: nowhere)."""
    sums = SecureSum([GridClientProxy(n, grid, 0) for n in contents])
    base = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={})
    context = LegacyContext(base, strategy=sums)
    context.state[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: round_idx})
    context.state[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow = _Workflow(
        contents,
        num_shares=1.0,
        reconstruction_threshold=RECONSTRUCTION_THRESHOLD,
        max_weight=settings.max_weight,
        clipping_range=settings.clipping_range,
        quantization_range=settings.quantization_range,
        modulus_range=settings.modulus_range,
        timeout=timeout,
    )
    views: list[dict[str, Any]] = []
    watched = _ViewGrid(grid, timeout, lambda m: views.append(describe_reply(m, round_idx)))
    workflow(cast(Grid, watched), context)
    if view is not None:
        with view.open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(v, sort_keys=True) + "\n" for v in views)
    return sums


def secure_outcome(k: int, node: int, round_idx: int, sums: SecureSum) -> StepOutcome:
    """Client ``k``'s outcome (hosted on ``node``): its public record, with the round's
    mean as its upload; lost when the protocol halted, its site dropped out or sent no
    well-formed record for it."""
    if sums.mean is None:
        return LostUpload(
            k, f"secure aggregation of round {round_idx} halted: too few sites answered"
        )
    if node not in sums.answered:
        return LostUpload(k, f"site node {node} dropped out of secure aggregation")
    rec = client_record(sums.records.get(node, {}).get(k))
    if rec is None:
        return LostUpload(k, f"site node {node} sent no well-formed record for client {k}")
    if "error" in rec:
        return LostUpload(k, f"site node {node}: {rec['error']}")
    if rec.get("declined"):
        return BudgetExhaustedError(k, rec["epsilon"], rec["target"])
    mean = np.asarray(sums.mean, dtype=np.float64).ravel()
    loss = float(mean[-1]) if sums.loss_released else float("nan")
    meta = UpdateMeta(client_id=k, num_samples=1, round=round_idx, train_loss=loss)
    delta = torch.from_numpy(mean[:-1].astype(np.float32))
    state = ClientState({}, tuple(rec["dp_events"]))
    return ClientResult(ClientUpdate(delta, meta, {}, {}), state, {}, rec["epsilon"])


def client_record(text: str | None) -> dict[str, Any] | None:
    """A site's public record of one client (:func:`site_sum`) with its types checked:
    ``{"error": str}``, ``{"declined": true, "epsilon": float, "target": float}`` or
    ``{"dp_events": [object, …], "epsilon": float | null}``; None when it is none of them
    (what a broken or hostile site sends is refused, never trusted or raised on)."""
    try:
        rec = json.loads(text) if text is not None else None
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    if isinstance(rec.get("error"), str):
        return {"error": rec["error"]}
    if rec.get("declined") is True:
        eps, target = _number(rec.get("epsilon")), _number(rec.get("target"))
        ok = eps is not None and target is not None
        return {"declined": True, "epsilon": eps, "target": target} if ok else None
    events, eps = rec.get("dp_events"), rec.get("epsilon")
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        return None
    if eps is not None and _number(eps) is None:
        return None
    return {"dp_events": events, "epsilon": None if eps is None else _number(eps)}


def _number(value: object) -> float | None:
    """``value`` as a float when it is a JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
