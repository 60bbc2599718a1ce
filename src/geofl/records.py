"""The typed round record: what one round did, as written to ``rounds.jsonl``.

Produced by the scheduler, read by subscribers (governance, progress), reports and
analyses. One line of ``rounds.jsonl`` is :meth:`RoundRecord.to_json` of one record;
:meth:`RoundRecord.from_json` reads it back — including records written before the record
was typed (rejections as bare strings, no status), so older run directories still load.
The line is strict JSON: a NaN or ±inf statistic is written as null
(:func:`geofl.io.dumps_line`) and read back as NaN (a client's ε as inf), so every line the
writer emits is one the reader accepts.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from geofl.errors import RunDirError
from geofl.tasks.base import SplitMetrics

__all__ = [
    "Rejection",
    "RejectionReason",
    "RoundRecord",
    "RoundStatus",
    "TaskInfo",
    "metrics_from_json",
    "metrics_to_json",
    "read_rounds",
]


@dataclass(frozen=True)
class TaskInfo:
    """What reports need to know of a run's task (``run.json["task"]``).

    Attributes:
        name: Task registry key.
        primary_metric: The metric that selected the best model.
        direction: ``"max"`` or ``"min"``: which way the primary metric improves.
    """

    name: str = "classification"
    primary_metric: str = "accuracy"
    direction: str = "max"

    def to_json(self) -> dict[str, str]:
        """``{"name", "primary_metric", "direction"}``."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> TaskInfo:
        """Read ``run.json["task"]``; a run written before tasks existed (no entry, or not
        an object) ran single-label classification."""
        if not isinstance(data, Mapping):
            return cls()
        default = cls()
        return cls(
            name=str(data.get("name") or default.name),
            primary_metric=str(data.get("primary_metric") or default.primary_metric),
            direction="min" if data.get("direction") == "min" else "max",
        )


#: JSON key prefix of a per-class vector (``per_class_accuracy``, ``per_class_ap``).
PER_CLASS = "per_class_"


def metrics_to_json(m: SplitMetrics) -> dict[str, Any]:
    """The JSON object of one split's metrics: scalars by name, then ``per_class_<name>``
    vectors, then ``n`` (and ``notes`` when there are any).

    For classification this is exactly the layout written before tasks existed
    (``accuracy``, ``macro_f1``, ``loss``, ``per_class_accuracy``, ``n``).
    """
    out: dict[str, Any] = dict(m.values)
    out.update({PER_CLASS + k: list(v) for k, v in m.per_class.items()})
    out["n"] = m.n
    if m.notes:
        out["notes"] = list(m.notes)
    return out


def metrics_from_json(data: Mapping[str, Any]) -> SplitMetrics:
    """Read :func:`metrics_to_json`'s object back (JSON null → NaN).

    Raises:
        TypeError, ValueError: on values of the wrong type.
    """
    values: dict[str, float] = {}
    per_class: dict[str, list[float]] = {}
    for key, value in data.items():
        if key in ("n", "notes"):
            continue
        if key.startswith(PER_CLASS) and isinstance(value, list):
            per_class[key[len(PER_CLASS) :]] = [_nan_float(x) for x in value]
        else:
            values[key] = _nan_float(value)
    notes = data.get("notes") or ()
    return SplitMetrics(values, per_class, int(data.get("n") or 0), tuple(str(x) for x in notes))


def _nan_float(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | None):
        raise TypeError(f"metric value {x!r} is not a number")
    return float("nan") if x is None else float(x)


class RoundStatus(enum.StrEnum):
    """How a round ended."""

    #: The strategy aggregated at least one accepted update into a new global model.
    AGGREGATED = "aggregated"
    #: The sampler drew no client (Poisson sampling); the model is unchanged.
    EMPTY_COHORT = "empty_cohort"
    #: Clients were sampled but no valid update arrived; the model is unchanged.
    NO_UPDATES = "no_updates"
    #: The aggregator refused the round's updates (e.g. too few for Krum); unchanged.
    AGGREGATION_FAILED = "aggregation_failed"


class RejectionReason(enum.StrEnum):
    """Why a sampled client's update was not aggregated."""

    #: The network model lost the upload.
    LOST_IN_TRANSIT = "lost in transit"
    #: Validation refused it (shape, dtype, non-finite values, bad metadata).
    MALFORMED = "malformed"
    #: The client declined: the round would have taken it past its target ε.
    BUDGET_EXHAUSTED = "privacy budget exhausted"
    #: The 003 uplink kept it on the tractor (checkpointer or NQI below τ_NQI); it is
    #: coalesced into a later upload.
    HELD_BACK = "held back"


@dataclass(frozen=True)
class Rejection:
    """One refused update: whose, why, and the validator's detail."""

    client: int
    reason: RejectionReason
    detail: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rejection:
        """Read a rejection; pre-typed records stored the validator's text as ``reason``."""
        text = str(data.get("reason", ""))
        try:
            reason = RejectionReason(text)
        except ValueError:
            return cls(int(data["client"]), RejectionReason.MALFORMED, text)
        return cls(int(data["client"]), reason, str(data.get("detail", "")))


@dataclass(frozen=True)
class RoundRecord:
    """Everything one round produced.

    Attributes:
        round: 1-based round index.
        status: How the round ended.
        participants: Ids of the clients whose updates were accepted (aggregation order).
        weights: Effective aggregation weight of each participant (aligned with
            ``participants``; empty when nothing was aggregated): what the aggregator
            really used — Krum's selected rows, trimmed-mean shares — not nominal weights.
        rejected: Sampled clients whose updates were refused.
        excluded: Sampled clients barred by a permission gate before training.
        cohort: The clients the sampler drew (before the gate).
        sampling: Sampler name and, for Poisson sampling, its rate (for amplification).
        train_loss: Sample-weighted mean local training loss of the participants.
        train_metrics: The task's primary metric over the participants' local training
            batches (sample-weighted mean), by name; None when nothing was aggregated.
            Written as ``train_<name>`` keys (``train_accuracy`` for classification, as
            before tasks existed); :attr:`train_accuracy` reads the classification value.
        bytes_up: Bytes uploaded by the participants (Δw plus extra tensors).
        bytes_down: Bytes broadcast to the trained clients (model plus payload tensors).
        aggregation_error: The aggregator's refusal, when status is AGGREGATION_FAILED.
        update_norms: ‖Δw_k‖₂ of each participant's received update.
        update_noise: σ̂_k = 1.4826·MAD of each participant's received update
            (:func:`geofl.update.noise_scale`), the server's estimate of its perturbation
            intensity (000 Eq. 20); empty in records written before it existed.
        client_log: Client-local logs by client id (kept client-side in a deployment).
        time_s: Wall time of the round's phases.
        model_sha256: Hash of the new global model (000 §3.5 commitments).
        update_set_sha256: Hash of the accepted update set.
        val: Validation metrics, when the round was evaluated.
        test: Test metrics, when the round was evaluated.
        strategy: Scalars the strategy reports (e.g. FedNova's τ_eff, the server
            control-variate norm).
        epsilon: ε(δ) each client that released something private this round reports
            after it, by client id (written only when non-empty).
        uplink: The 003 uplink's figures of the round (bytes by hop, pipeline and status
            counts, airtime, energy proxy, envelope rejections), when the method has one.
        lr: The client learning rate η_l sent for this round when the run schedules it
            (``train.lr_schedule``, 001 §6.1.2); None (and absent from the JSON) otherwise.
        hierarchy: The 003 hierarchy's figures of the round (staleness and GEO weight of
            every incorporated update, delivery, latency and bytes per hop, failovers;
            :mod:`geofl.engine.hierarchy.stats`), when the method has one.
    """

    round: int
    status: RoundStatus
    participants: list[int]
    weights: list[float]
    rejected: list[Rejection] = field(default_factory=list)
    excluded: list[int] = field(default_factory=list)
    cohort: list[int] = field(default_factory=list)
    sampling: dict[str, Any] = field(default_factory=dict)
    train_loss: float | None = None
    train_metrics: dict[str, float | None] = field(default_factory=dict)
    bytes_up: int = 0
    bytes_down: int = 0
    aggregation_error: str | None = None
    update_norms: list[float] = field(default_factory=list)
    update_noise: list[float] = field(default_factory=list)
    client_log: dict[str, Any] = field(default_factory=dict)
    time_s: dict[str, float] = field(default_factory=dict)
    model_sha256: str = ""
    update_set_sha256: str = ""
    val: SplitMetrics | None = None
    test: SplitMetrics | None = None
    strategy: dict[str, float] = field(default_factory=dict)
    epsilon: dict[str, float] = field(default_factory=dict)
    lr: float | None = None
    uplink: dict[str, Any] | None = None
    hierarchy: dict[str, Any] | None = None

    @property
    def evaluated(self) -> bool:
        """Whether this round carries val/test metrics."""
        return self.test is not None

    @property
    def train_accuracy(self) -> float | None:
        """Sample-weighted running training accuracy (classification), else None."""
        return self.train_metrics.get("accuracy")

    def client_scalars(self, prefix: str) -> dict[int, float]:
        """Per-client strategy scalars ``<prefix>.<client id>`` by client id.

        Strategies report per-client values as scalars named with the client id last
        (DUAL-SHIELD's ``hra.reputation.3``); this reads one such family back, e.g.
        ``record.client_scalars("hra.reputation")`` for a reputation-trajectory plot.
        """
        head = prefix + "."
        return {
            int(key[len(head) :]): value
            for key, value in self.strategy.items()
            if key.startswith(head) and key[len(head) :].isdigit()
        }

    @property
    def failed_clients(self) -> list[int]:
        """Clients whose upload was refused for any reason."""
        return [r.client for r in self.rejected]

    def to_json(self) -> dict[str, Any]:
        """The JSON object written as one line of ``rounds.jsonl`` (enums as strings;
        ``train_metrics`` flattened to ``train_<name>`` keys in its place)."""
        out: dict[str, Any] = {}
        for key, value in asdict(replace(self, val=None, test=None)).items():
            if key == "train_metrics":
                out.update({f"train_{k}": v for k, v in self.train_metrics.items()})
            elif key not in ("val", "test"):
                out[key] = value
        out["status"] = str(self.status)
        out["rejected"] = [
            {"client": r.client, "reason": str(r.reason), "detail": r.detail} for r in self.rejected
        ]
        for split in ("val", "test"):
            metrics = getattr(self, split)
            if metrics is not None:
                out[split] = metrics_to_json(metrics)
        out["strategy"] = out.pop("strategy")
        eps = out.pop("epsilon")
        if eps:
            out["epsilon"] = eps
        noise = out.pop("update_noise")
        if noise:  # absent where nothing was aggregated, as in records before σ̂ existed
            out["update_noise"] = noise
        lr = out.pop("lr")
        if lr is not None:  # only runs with a schedule: other records stay as they were
            out["lr"] = lr
        uplink = out.pop("uplink")
        if uplink is not None:  # only runs with an uplink
            out["uplink"] = uplink
        hierarchy = out.pop("hierarchy")
        if hierarchy is not None:  # only runs with the 003 hierarchy
            out["hierarchy"] = hierarchy
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoundRecord:
        """Read one ``rounds.jsonl`` object (current or pre-typed layout).

        Raises:
            KeyError, TypeError, ValueError: on a record missing ``round``/``participants``
                or with values of the wrong type (callers name the file and line).
        """
        participants = [int(c) for c in data["participants"]]
        weights = [_num(w) for w in data.get("weights") or []]
        status = data.get("status")
        if status is None:  # pre-typed records: infer from what they held
            status = (
                RoundStatus.AGGREGATION_FAILED
                if data.get("aggregation_error")
                else RoundStatus.AGGREGATED
                if participants
                else RoundStatus.NO_UPDATES
            )
        return cls(
            round=int(data["round"]),
            status=RoundStatus(status),
            participants=participants,
            weights=weights,
            rejected=[Rejection.from_json(r) for r in data.get("rejected") or []],
            excluded=[int(c) for c in data.get("excluded") or []],
            cohort=[int(c) for c in data.get("cohort") or []],
            sampling=dict(data.get("sampling") or {}),
            train_loss=_opt_float(data.get("train_loss")),
            train_metrics={
                k.removeprefix("train_"): _opt_float(v)
                for k, v in data.items()
                if k.startswith("train_") and k != "train_loss"
            },
            bytes_up=int(data.get("bytes_up") or 0),
            bytes_down=int(data.get("bytes_down") or 0),
            aggregation_error=data.get("aggregation_error"),
            update_norms=[_num(x) for x in data.get("update_norms") or []],
            update_noise=[_num(x) for x in data.get("update_noise") or []],
            client_log=dict(data.get("client_log") or {}),
            time_s={str(k): _num(v) for k, v in (data.get("time_s") or {}).items()},
            model_sha256=str(data.get("model_sha256") or ""),
            update_set_sha256=str(data.get("update_set_sha256") or ""),
            val=_opt_metrics(data.get("val")),
            test=_opt_metrics(data.get("test")),
            strategy={str(k): _num(v) for k, v in (data.get("strategy") or {}).items()},
            epsilon={str(k): _eps(v) for k, v in (data.get("epsilon") or {}).items()},
            lr=_opt_float(data.get("lr")),
            uplink=dict(data["uplink"]) if data.get("uplink") is not None else None,
            hierarchy=dict(data["hierarchy"]) if data.get("hierarchy") is not None else None,
        )


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


def _num(x: Any) -> float:
    """A statistic of the record (a norm, a weight, a strategy scalar); null — how the
    writer (:func:`geofl.io.to_jsonable`) encodes NaN and ±inf — reads as NaN."""
    return math.nan if x is None else float(x)


def _eps(x: Any) -> float:
    """A client's ε; null reads as inf (ε is never NaN: a non-finite ε is unbounded)."""
    return math.inf if x is None else float(x)


def _opt_metrics(x: Any) -> SplitMetrics | None:
    if x is None:
        return None
    if not isinstance(x, Mapping):
        raise TypeError(f"split metrics must be an object, got {type(x).__name__}")
    return metrics_from_json(x)


def read_rounds(path: Path, *, strict: bool = True) -> list[RoundRecord]:
    """Every record of a ``rounds.jsonl``.

    Args:
        path: The file (absent → empty list).
        strict: Raise on a damaged line anywhere; otherwise stop at the first damaged line
            (a torn final line after a crash).

    Raises:
        RunDirError: naming the file and line of a damaged record (``strict``).
    """
    path = Path(path)
    if not path.exists():
        return []
    out: list[RoundRecord] = []
    lines = path.read_bytes().splitlines()
    for i, raw in enumerate(lines, start=1):
        try:
            out.append(RoundRecord.from_json(json.loads(raw.decode("utf-8"))))
        except (ValueError, KeyError, TypeError) as err:
            if not strict:
                break
            raise RunDirError(
                f"{path}:{i}: damaged round record ({type(err).__name__}: {err}); "
                "restore the file or start a new run"
            ) from None
    return out


def records_of(rows: Sequence[Mapping[str, Any]]) -> list[RoundRecord]:
    """Typed records from already-parsed JSON objects."""
    return [RoundRecord.from_json(r) for r in rows]
