"""Fuzzing client-update validation: every malformed update is rejected with a reason.

A well-formed update (``[D]`` float32 Δw, the extra tensors and metadata scalars the
strategy needs, a positive sample count, an optional label histogram) is generated and then
broken in one to three ways drawn from :data:`VARIANTS` — wrong shapes and dtypes, NaN/Inf
at random positions, huge norms, non-tensors, bad sample counts, bad histograms, missing or
extra tensors, bad scalars. :func:`~geofl.server.validate.validate_update` must never
raise: it returns a one-line reason for every malformed update (naming what the first
failed check looked at) and None for a well-formed one. Some variants are neither: a
finite huge update is *accepted* (robust aggregation is the defense against it, not
validation) and must then aggregate without a crash.

The same variants then go through the real :class:`~geofl.engine.scheduler.SyncScheduler`
(the malformed update replaces what a client's step produced, as if it arrived so over the
wire): the round proceeds with the others and every malformed update is in
``record.rejected`` as MALFORMED with a detail. A tiny end-to-end run does the same with a
malicious-client plug-in.

A variant with ``bug`` set (none at present) crashes or is misjudged today; it is left
out of the fuzzing and kept as an explicit strict-xfail regression (remove ``bug`` when
fixed). The bugs found so far (U1–U6) are fixed; their regressions close the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import pytest
import torch
import yaml
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from tests.conftest import tiny_raw
from torch import nn

import geofl.algorithms.fedavg
import geofl.algorithms.fednova
import geofl.algorithms.scaffold  # noqa: F401  (registers the algorithms)
from geofl.algorithms import ALGORITHMS, AlgorithmContext
from geofl.algorithms.fednova import A_NORM
from geofl.algorithms.scaffold import CONTROL_DELTA
from geofl.attacks.client import ATTACKS, ScalingParams
from geofl.client.data import ClientData
from geofl.client.state import ClientStateStore
from geofl.client.step import ClientProgram, ClientResult
from geofl.client.trainer import GradCorrection, LocalTrainParams, StatelessTrainer
from geofl.config.load import load_config
from geofl.engine.components import RunComponents
from geofl.engine.experiment import run_experiment
from geofl.engine.scheduler import SyncScheduler
from geofl.io import dumps_line, read_jsonl
from geofl.models.base import FlatModel
from geofl.network.links import NETWORK_MODELS
from geofl.records import RejectionReason, RoundStatus
from geofl.registry import NoParams
from geofl.rundir import seed_dir
from geofl.server.aggregators import build_mean
from geofl.server.consistency import ConsistencyParams, build_consistency
from geofl.server.sampling import Cohort
from geofl.server.tier import FlatTier
from geofl.server.validate import validate_update
from geofl.server.weighting import data_size_weights
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

D = 6  # flat model size
C = 4  # label classes
F32_MAX = float(torch.finfo(torch.float32).max)
EXTRA = "extra_upload"  # a second uploaded tensor name, besides SCAFFOLD's

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

T = TypeVar("T")
Verdict = Literal["reject", "accept", "either"]


def _choice(draw: st.DrawFn, seq: Sequence[T]) -> T:
    """A uniform choice (hypothesis's ``sampled_from`` favours the first items)."""
    x = draw(st.integers(0, 2**64 - 1))
    return seq[((x * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64) % len(seq)]


# --- the update under test ----------------------------------------------------------


@dataclass
class Case:
    """An update, what the strategy expects, and what validation must say about it."""

    delta: Any
    meta: Any
    tensors: Any
    tensor_names: tuple[str, ...]
    scalar_names: tuple[str, ...]
    applied: list[Variant] = field(default_factory=list)

    def update(self) -> ClientUpdate:
        return ClientUpdate(self.delta, self.meta, tensors=self.tensors)

    @property
    def verdict(self) -> Verdict:
        verdicts = {v.verdict for v in self.applied}
        if "reject" in verdicts:
            return "reject"
        return "either" if "either" in verdicts else "accept"

    @property
    def expected_reason(self) -> list[str]:
        """Words of which the reason must mention one: what the first failing check looks
        at, in validation order (an earlier part the validator may refuse counts too)."""
        first = min((v for v in self.applied if v.verdict == "reject"), key=lambda v: v.order)
        earlier = [v for v in self.applied if v.verdict == "either" and v.order < first.order]
        return [first.mentions or self.tensor_names[0], *(PART[v.order] for v in earlier)]


def _finite(lo: float = -100.0, hi: float = 100.0, width: int = 32) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, width=width)  # type: ignore[arg-type]


def _vector(draw: st.DrawFn, n: int = D) -> torch.Tensor:
    return torch.tensor(draw(st.lists(_finite(), min_size=n, max_size=n)), dtype=torch.float32)


Needs = tuple[tuple[str, ...], tuple[str, ...]]


@st.composite
def well_formed(draw: st.DrawFn, needs: Needs | None = None) -> Case:
    """A valid update for a strategy that needs the extra tensors and scalars ``needs``
    (drawn when None)."""
    if needs is None:
        needs = (
            _choice(draw, [(), (CONTROL_DELTA,), (CONTROL_DELTA, EXTRA)]),
            _choice(draw, [(), (A_NORM,)]),
        )
    names, scalar_names = needs
    counts = _counts(draw)
    hist = _choice(
        draw,
        [
            None,
            np.asarray(counts, dtype=np.int64),
            np.asarray(counts, dtype=np.float32),
            list(counts),
            torch.tensor(counts),
        ],
    )
    scalars: dict[str, Any] = {name: draw(_finite(1e-6, 1e6, 64)) for name in scalar_names}
    if draw(st.booleans()):  # scalars the strategy does not need may be any finite number
        scalars["other"] = draw(_finite(-1e6, 1e6, 64) | st.integers(-(10**6), 10**6))
    meta = UpdateMeta(
        client_id=draw(st.integers(0, 9)),
        num_samples=draw(st.integers(1, 10**6)),
        round=draw(st.integers(1, 100)),
        label_histogram=hist,
        train_loss=draw(_finite(0, 10) | st.just(math.nan)),
        train_metrics={"accuracy": draw(_finite(0, 1) | st.just(math.nan))},
        steps=draw(st.integers(0, 100)),
        bytes_sent=draw(st.integers(0, 10**6)),
        scalars=scalars,
    )
    tensors = {name: _vector(draw) for name in names}
    return Case(_vector(draw), meta, tensors, names, scalar_names)


# --- the ways to break it -----------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One way to break (or stretch) an update.

    Attributes:
        name: What it does.
        verdict: reject (malformed), accept (well-formed) or either (validation may decide,
            but nothing may crash).
        order: Validation order of the check that must catch it (delta, tensors,
            num_samples, scalars, histogram, other metadata).
        mentions: A word the rejection reason must contain ("" → the first tensor name).
        apply: Changes the case in place, drawing its parameters.
        applies: Whether it can apply to a case (e.g. needs an extra tensor).
        bug: Known bug that keeps it out of the fuzzing (see the xfail tests).
    """

    name: str
    verdict: Verdict
    order: int
    mentions: str
    apply: Callable[[st.DrawFn, Case], None]
    applies: Callable[[Case], bool] = lambda c: True
    bug: str | None = None


def _meta(case: Case, **changes: Any) -> None:
    case.meta = replace(case.meta, **changes)


def _delta_positions(draw: st.DrawFn, n: int = D) -> list[int]:
    return draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))


def _set_delta_values(values: Sequence[float], dtype: torch.dtype = torch.float32) -> Any:
    def apply(draw: st.DrawFn, case: Case) -> None:
        delta = torch.as_tensor(case.delta).to(dtype).clone()
        for i in _delta_positions(draw):
            delta[i] = _choice(draw, values)
        case.delta = delta

    return apply


def _tensor_for(draw: st.DrawFn, which: str) -> Any:
    """A malformed ``[D]`` tensor upload of one kind."""
    base = _vector(draw)
    return {
        "0-d": torch.tensor(1.0),
        "row": base.reshape(1, D),
        "column": base.reshape(D, 1),
        "short": base[: D - 1].clone(),
        "long": torch.cat([base, base[:1]]),
        "empty": torch.empty(0),
        "int64": base.to(torch.int64),
        "int8": base.to(torch.int8),
        "uint8": base.abs().to(torch.uint8),
        "bool": base > 0,
        "complex64": base.to(torch.complex64),
        "complex128": base.to(torch.complex128),
        "nan": torch.full((D,), math.nan),
        "inf": torch.full((D,), math.inf),
        "list": base.tolist(),
        "ndarray": base.numpy().copy(),
        "None": None,
        "float": 1.0,
        "str": "delta",
        "dict": {"delta": base},
        "sparse": base.to_sparse(),
    }[which]


MALFORMED_TENSORS = [
    "0-d",
    "row",
    "column",
    "short",
    "long",
    "empty",
    "int64",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
    "nan",
    "inf",
    "list",
    "ndarray",
    "None",
    "float",
    "str",
    "dict",
    "sparse",
]


def _bad_delta(draw: st.DrawFn, case: Case) -> None:
    case.delta = _tensor_for(draw, _choice(draw, MALFORMED_TENSORS))


def _other_float_dtype(draw: st.DrawFn, case: Case) -> None:
    case.delta = case.delta.to(_choice(draw, [torch.float16, torch.bfloat16, torch.float64]))


def _odd_layout(draw: st.DrawFn, case: Case) -> None:
    kind = _choice(draw, ["strided", "requires_grad", "expanded"])
    if kind == "strided":
        case.delta = torch.stack([case.delta, case.delta], dim=1)[:, 0]  # stride 2
    elif kind == "requires_grad":
        case.delta = case.delta.clone().requires_grad_(True)
    else:
        case.delta = case.delta[:1].expand(D)


def _missing_tensor(draw: st.DrawFn, case: Case) -> None:
    tensors = dict(case.tensors)
    del tensors[_choice(draw, sorted(tensors))]
    case.tensors = tensors


def _extra_tensor(draw: st.DrawFn, case: Case) -> None:
    case.tensors = {**case.tensors, draw(st.sampled_from(["unexpected", "delta", ""])): case.delta}


def _tensors_not_a_mapping(draw: st.DrawFn, case: Case) -> None:
    case.tensors = _choice(draw, [None, [case.delta], (case.delta,), "control_delta"])


def _bad_extra_tensor(draw: st.DrawFn, case: Case) -> None:
    case.tensors = {
        **case.tensors,
        case.tensor_names[0]: _tensor_for(draw, _choice(draw, MALFORMED_TENSORS)),
    }


def _hist(value: Callable[[st.DrawFn], Any]) -> Callable[[st.DrawFn, Case], None]:
    def apply(draw: st.DrawFn, case: Case) -> None:
        _meta(case, label_histogram=value(draw))

    return apply


def _counts(draw: st.DrawFn, n: int = C) -> list[int]:
    """Class counts with a positive sum."""
    counts = draw(st.lists(st.integers(0, 500), min_size=n, max_size=n))
    counts[draw(st.integers(0, n - 1))] = draw(st.integers(1, 500))
    return counts


def _hist_with(values: Sequence[float]) -> Callable[[st.DrawFn], Any]:
    def value(draw: st.DrawFn) -> Any:
        h = np.asarray(_counts(draw), dtype=np.float64)
        for i in _delta_positions(draw, C):
            h[i] = _choice(draw, values)
        return h

    return value


def _scalar(key: str | None, values: Sequence[Any]) -> Callable[[st.DrawFn, Case], None]:
    """Set scalar ``key`` (None: a required one if any, else an optional one)."""

    def apply(draw: st.DrawFn, case: Case) -> None:
        name = key or (case.scalar_names[0] if case.scalar_names else "other")
        _meta(case, scalars={**case.meta.scalars, name: _choice(draw, values)})

    return apply


def _drop_required_scalar(draw: st.DrawFn, case: Case) -> None:
    scalars = dict(case.meta.scalars)
    del scalars[case.scalar_names[0]]
    _meta(case, scalars=scalars)


def _num_samples(values: Sequence[Any]) -> Callable[[st.DrawFn, Case], None]:
    def apply(draw: st.DrawFn, case: Case) -> None:
        _meta(case, num_samples=_choice(draw, values))

    return apply


def _meta_field(name: str, values: Sequence[Any]) -> Callable[[st.DrawFn, Case], None]:
    def apply(draw: st.DrawFn, case: Case) -> None:
        _meta(case, **{name: _choice(draw, values)})

    return apply


def _has_tensors(c: Case) -> bool:
    return bool(c.tensor_names)


def _needs_scalar(c: Case) -> bool:
    return bool(c.scalar_names)


def _meta_untouched(c: Case) -> bool:
    """No metadata variant applied yet (dropping the metadata would undo it)."""
    return all(v.order < NUM_SAMPLES for v in c.applied)


# Validation order of the checks (the reason names the first one that fails).
DELTA, TENSORS, NUM_SAMPLES, SCALARS, HISTOGRAM, META = range(6)
PART = ["delta", "tensors", "num_samples", "scalar", "label_histogram", "meta"]

VARIANTS: list[Variant] = [
    # Δw
    Variant(
        "delta malformed (shape/dtype/non-finite/not a tensor)",
        "reject",
        DELTA,
        "delta",
        _bad_delta,
    ),
    Variant(
        "delta NaN/Inf at random positions",
        "reject",
        DELTA,
        "delta",
        _set_delta_values([math.nan, math.inf, -math.inf]),
    ),
    Variant(
        "delta NaN/Inf in float16/float64",
        "reject",
        DELTA,
        "delta",
        lambda d, c: _set_delta_values(
            [math.nan, -math.inf], _choice(d, [torch.float16, torch.float64])
        )(d, c),
    ),
    Variant(
        "delta huge but finite (1e30, float32 max)",
        "accept",
        DELTA,
        "",
        _set_delta_values([1e30, -1e30, F32_MAX, -F32_MAX, 1e38]),
    ),
    Variant(
        "delta all float32 max (sum overflows)",
        "accept",
        DELTA,
        "",
        lambda d, c: setattr(c, "delta", torch.full((D,), _choice(d, [F32_MAX, -F32_MAX]))),
    ),
    Variant(
        "delta tiny/subnormal/zero",
        "accept",
        DELTA,
        "",
        _set_delta_values([0.0, -0.0, 1e-45, -1e-40]),
    ),
    Variant("delta float16/bfloat16/float64", "accept", DELTA, "", _other_float_dtype),
    Variant("delta strided/requires_grad/expanded", "accept", DELTA, "", _odd_layout),
    Variant(
        "delta float64 beyond float32",
        "reject",
        DELTA,
        "delta",
        _set_delta_values([1e39, -1e300], torch.float64),
    ),
    Variant(
        "delta sparse",
        "reject",
        DELTA,
        "delta",
        lambda d, c: setattr(c, "delta", c.delta.to_sparse()),
    ),
    # extra uploaded tensors
    Variant("tensors: one missing", "reject", TENSORS, "tensors", _missing_tensor, _has_tensors),
    Variant("tensors: an unexpected one", "reject", TENSORS, "tensors", _extra_tensor),
    Variant("tensors: not a mapping", "reject", TENSORS, "tensors", _tensors_not_a_mapping),
    Variant("tensors: one malformed", "reject", TENSORS, "", _bad_extra_tensor, _has_tensors),
    Variant(
        "tensors: a non-string key",
        "reject",
        TENSORS,
        "tensors",
        lambda d, c: setattr(c, "tensors", {**c.tensors, 0: c.delta}),
        _has_tensors,
    ),
    # num_samples
    Variant(
        "num_samples zero/negative",
        "reject",
        NUM_SAMPLES,
        "num_samples",
        _num_samples([0, -1, -(10**9), -0.5, -math.inf]),
    ),
    Variant(
        "num_samples huge int / float / bool / numpy",
        "either",
        NUM_SAMPLES,
        "",
        _num_samples([10**12, 2**53 + 1, 10**30, 2.5, 1e-3, True, np.int64(7), np.float32(3)]),
    ),
    Variant(
        "num_samples NaN/+Inf",
        "reject",
        NUM_SAMPLES,
        "num_samples",
        _num_samples([math.nan, math.inf]),
    ),
    Variant(
        "num_samples beyond float64",
        "reject",
        NUM_SAMPLES,
        "num_samples",
        _num_samples([10**400]),
    ),
    Variant(
        "num_samples not a number",
        "reject",
        NUM_SAMPLES,
        "num_samples",
        _num_samples(["5", None, [5], b"5"]),
    ),
    # metadata scalars
    Variant(
        "scalar non-finite",
        "reject",
        SCALARS,
        "scalar",
        _scalar(None, [math.nan, math.inf, -math.inf]),
    ),
    Variant(
        "scalar not a number",
        "reject",
        SCALARS,
        "scalar",
        _scalar(None, ["1.0", None, [1.0], {"a": 1}, b"1"]),
    ),
    Variant(
        "required scalar missing", "reject", SCALARS, "scalar", _drop_required_scalar, _needs_scalar
    ),
    Variant(
        "required scalar zero/negative",
        "reject",
        SCALARS,
        "scalar",
        _scalar(A_NORM, [0, 0.0, -1e-9, -5]),
        _needs_scalar,
    ),
    Variant(
        "optional scalar negative/zero/huge",
        "accept",
        SCALARS,
        "",
        _scalar("other", [0, -1.5, -(10**9), 1e300, 2**70]),
    ),
    Variant(
        "scalar numpy/bool",
        "either",
        SCALARS,
        "",
        _scalar(None, [np.float32(1.0), np.float64(2.0), True]),
    ),
    Variant(
        "scalar beyond float64",
        "reject",
        SCALARS,
        "scalar",
        _scalar(None, [10**400]),
    ),
    Variant(
        "scalars not a mapping",
        "reject",
        SCALARS,
        "scalar",
        lambda d, c: _meta(c, scalars=_choice(d, [None, [1.0], "a_norm"])),
    ),
    # label histogram
    Variant(
        "histogram wrong shape",
        "reject",
        HISTOGRAM,
        "label_histogram",
        _hist(lambda d: _choice(d, [np.ones((2, C)), np.float64(3), 5, [[1, 2], [3, 4]]])),
    ),
    Variant(
        "histogram negative",
        "reject",
        HISTOGRAM,
        "label_histogram",
        _hist(_hist_with([-1.0, -1e-9, -1e300])),
    ),
    Variant(
        "histogram NaN/Inf",
        "reject",
        HISTOGRAM,
        "label_histogram",
        _hist(_hist_with([math.nan, math.inf, -math.inf])),
    ),
    Variant(
        "histogram all zero / empty",
        "reject",
        HISTOGRAM,
        "label_histogram",
        _hist(lambda d: _choice(d, [np.zeros(C), [0] * C, [], np.zeros(0)])),
    ),
    Variant(
        "histogram not numbers",
        "reject",
        HISTOGRAM,
        "label_histogram",
        _hist(
            lambda d: _choice(
                d, [["a", "b"], "abcd", [True, False], [1, None], {"a": 1}, np.array([object()])]
            )
        ),
    ),
    Variant(
        "histogram huge finite / other length",
        "either",
        HISTOGRAM,
        "",
        _hist(lambda d: _choice(d, [np.full(C, 1e308), np.ones(C + 3), [1], [2**62, 2**62]])),
    ),
    Variant(
        "histogram complex",
        "either",
        HISTOGRAM,
        "",
        _hist(lambda d: np.asarray(_counts(d), dtype=np.complex128)),
    ),
    Variant(
        "histogram ragged",
        "reject",
        HISTOGRAM,
        "label_histogram",
        _hist(lambda d: _choice(d, [[[1, 2], [3]], [1, [2, 3]]])),
    ),
    # other metadata
    Variant(
        "loss/accuracy non-finite (the documented default is NaN)",
        "accept",
        META,
        "",
        lambda d, c: _meta(
            c, train_loss=_choice(d, [math.nan, math.inf]), train_metrics={"accuracy": math.nan}
        ),
    ),
    Variant(
        "metadata missing",
        "reject",
        META,
        "meta",
        lambda d, c: setattr(c, "meta", None),
        _meta_untouched,
    ),
    Variant(
        "train_loss not a number",
        "reject",
        META,
        "train_loss",
        _meta_field("train_loss", ["low", None, [0.1]]),
    ),
    Variant(
        "train_metrics not numbers",
        "reject",
        META,
        "train_metrics",
        _meta_field("train_metrics", [{"accuracy": "high"}, {"accuracy": None}, [0.5], {1: 0.5}]),
    ),
    Variant(
        "client_id not an int64",
        "reject",
        META,
        "client_id",
        _meta_field("client_id", ["7", None, 2**70, 1.5]),
    ),
    Variant(
        "round not an int",
        "reject",
        META,
        "round",
        _meta_field("round", ["1", None, [1]]),
    ),
    Variant(
        "bytes_sent not an int",
        "reject",
        META,
        "bytes_sent",
        _meta_field("bytes_sent", ["100", None]),
    ),
]

FUZZED = [v for v in VARIANTS if v.bug is None]


@st.composite
def cases(
    draw: st.DrawFn, variants: Sequence[Variant] = FUZZED, most: int = 3, needs: Needs | None = None
) -> Case:
    """A well-formed update broken by 0–``most`` variants, each in a different part."""
    case = draw(well_formed(needs))
    k = draw(st.integers(0, most))
    for _ in range(k):
        # one variant per part of the update: a second would overwrite the first
        taken = {v.order for v in case.applied}
        if not isinstance(case.meta, UpdateMeta):  # no metadata left to break
            taken |= {NUM_SAMPLES, SCALARS, HISTOGRAM, META}
        usable = [v for v in variants if v.applies(case) and v.order not in taken]
        if not usable:
            break
        variant = _choice(draw, usable)
        variant.apply(draw, case)
        case.applied.append(variant)
    note(f"variants: {[v.name for v in case.applied]} → {case.verdict}")
    return case


def check_verdict(case: Case, reason: str | None) -> None:
    if case.verdict == "reject":
        assert isinstance(reason, str) and reason, f"malformed update accepted: {reason!r}"
        assert "\n" not in reason, reason
        assert any(word in reason for word in case.expected_reason), (case.expected_reason, reason)
    elif case.verdict == "accept":
        assert reason is None, f"well-formed update rejected: {reason}"
    else:
        assert reason is None or (isinstance(reason, str) and reason and "\n" not in reason)


@settings(FUZZ)
@given(case=cases())
def test_validate_update_rejects_every_malformed_update_with_a_reason(case: Case) -> None:
    reason = validate_update(case.update(), D, case.tensor_names, case.scalar_names)
    note(f"reason: {reason!r}")
    event(case.verdict)
    for v in case.applied:
        event(v.name)
    check_verdict(case, reason)


# --- through the real scheduler -----------------------------------------------------

K = 5
TRAIN = LocalTrainParams(lr=0.1, momentum=0.0, weight_decay=0.0)


class _HonestTrainer(StatelessTrainer):
    """Client k uploads Δ_k = (k + 1)·[1, …, 1] with n_k = 10 + k and a label histogram."""

    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
        correction: GradCorrection | None = None,
    ) -> ClientUpdate:
        k = data.client_id
        meta = UpdateMeta(
            client_id=k,
            num_samples=10 + k,
            round=directives.round,
            label_histogram=np.asarray(data.label_histogram),
            train_loss=1.0,
            train_metrics={"accuracy": 0.5},
            steps=2,
        )
        return ClientUpdate(torch.full((D,), k + 1.0), meta)


class _Wire(SyncScheduler):
    """A scheduler whose uploads from some clients arrive as ``arrive[k](update)``."""

    arrive: dict[int, Callable[[ClientUpdate], ClientUpdate]]

    def run_client(
        self, global_params: torch.Tensor, client: int, directives: ClientDirectives
    ) -> ClientResult:
        res = super().run_client(global_params, client, directives)
        if client in self.arrive:
            res = replace(res, update=self.arrive[client](res.update))
        return res


def scheduler(
    algorithm: str = "fedavg",
    arrive: dict[int, Callable[[ClientUpdate], ClientUpdate]] | None = None,
    *,
    consistency: bool = False,
) -> _Wire:
    weighting = build_consistency(ConsistencyParams()) if consistency else data_size_weights
    tier = FlatTier(weighting, build_mean(NoParams()))
    alg = ALGORITHMS.build(algorithm, {}, ctx=AlgorithmContext(tier, 1.0, K, D, TRAIN))
    hists = [np.array([5, k, 1, 0]) for k in range(K)]
    clients = [
        ClientData(k, torch.zeros(5, 1, 1, 1), torch.zeros(5, dtype=torch.long), hists[k])
        for k in range(K)
    ]
    comps = RunComponents(
        task=ClassificationTask(1),
        workspace=FlatModel(nn.Linear(D, 1, bias=False)),
        program=ClientProgram(_HonestTrainer(), TRAIN, alg.client),
        strategy=alg.strategy,
        store=ClientStateStore(K, alg.client.state_specs(D)),
        sampler=lambda n, r, rng: Cohort(list(range(K)), "test", None),
        network=NETWORK_MODELS.build("ideal"),
        clients=clients,
    )
    sched = _Wire(comps, seed=0)
    sched.arrive = arrive or {}
    return sched


W0 = torch.linspace(-1.0, 1.0, D)
ALGORITHM_NEEDS: dict[str, Needs] = {
    "fedavg": ((), ()),
    "scaffold": ((CONTROL_DELTA,), ()),
    "fednova": ((), (A_NORM,)),
}


def _arrives_as(case: Case) -> Callable[[ClientUpdate], ClientUpdate]:
    """Replace what the client produced by the case's Δw, tensors and metadata (keeping the
    sender's id unless a variant breaks it: a well-formed update claims its sender's id)."""
    breaks_id = any(v.mentions == "client_id" for v in case.applied)

    def arrive(update: ClientUpdate) -> ClientUpdate:
        meta = case.meta
        if isinstance(meta, UpdateMeta) and not breaks_id:
            meta = replace(meta, client_id=update.meta.client_id)
        return ClientUpdate(case.delta, meta, dict(update.local_log), case.tensors)

    return arrive


@st.composite
def rounds(draw: st.DrawFn) -> tuple[str, dict[int, Case]]:
    """An algorithm and, for 1–4 of the K clients, a (possibly) malformed upload."""
    algorithm = _choice(draw, sorted(ALGORITHM_NEEDS))
    senders = draw(st.lists(st.integers(0, K - 1), min_size=1, max_size=K - 1, unique=True))
    needs = ALGORITHM_NEEDS[algorithm]
    return algorithm, {k: draw(cases(most=2, needs=needs)) for k in sorted(senders)}


@settings(FUZZ)
@given(spec=rounds())
def test_a_round_proceeds_without_the_malformed_updates(
    spec: tuple[str, dict[int, Case]],
) -> None:
    algorithm, broken = spec
    # the validator's own verdict decides which must be rejected (its correctness is the
    # test above); here: nothing crashes, the rejected are recorded, the rest aggregate
    sched = scheduler(algorithm, {k: _arrives_as(c) for k, c in broken.items()})
    out = sched.round(W0, 1)
    rec = out.record
    dumps_line(rec.to_json())  # the record is writable
    rejected = {r.client: r for r in rec.rejected}
    for k, case in broken.items():
        check_verdict(case, rejected[k].detail if k in rejected else None)
        if k in rejected:
            assert rejected[k].reason is RejectionReason.MALFORMED and rejected[k].detail
    honest = [k for k in range(K) if k not in broken]
    assert set(rec.participants) == set(range(K)) - set(rejected)
    assert set(honest) <= set(rec.participants)
    assert rec.status is RoundStatus.AGGREGATED
    assert len(rec.weights) == len(rec.participants)
    huge = any("huge" in v.name or "max" in v.name for c in broken.values() for v in c.applied)
    if not huge:
        assert bool(torch.isfinite(out.params).all()), out.params


@pytest.mark.parametrize("algorithm", sorted(ALGORITHM_NEEDS))
@pytest.mark.parametrize("value", [1e30, -1e30, F32_MAX], ids=["1e30", "-1e30", "f32max"])
def test_a_huge_but_finite_update_is_accepted_and_aggregated(algorithm: str, value: float) -> None:
    # validation only refuses what is malformed; a huge update is the robust
    # aggregators' business (Krum, median, norm bound), and must aggregate without a crash
    out = scheduler(algorithm, {2: lambda u: replace(u, delta=torch.full((D,), value))}).round(
        W0, 1
    )
    rec = out.record
    assert rec.status is RoundStatus.AGGREGATED and rec.rejected == []
    assert rec.participants == list(range(K))
    assert bool(torch.isfinite(out.params).all()), out.params
    dumps_line(rec.to_json())


# --- end to end: a malicious-client plug-in in a tiny run ---------------------------

MALFORMED_ATTACK = "test_fuzz_malformed_upload"


class _MalformedUpload:
    """Round r: client uploads the r-th malformed kind (tensor-valued, so the client step
    can still count its bytes)."""

    KINDS = ("long", "int64", "inf", "negative n", "bad histogram")

    def __init__(self, params: ScalingParams) -> None:
        self.clients = frozenset(params.clients)

    def __call__(self, update: ClientUpdate, directives: Any, generator: Any) -> ClientUpdate:
        kind = self.KINDS[(directives.round - 1) % len(self.KINDS)]
        delta = update.delta
        if kind == "long":
            return replace(update, delta=torch.cat([delta, delta[:3]]))
        if kind == "int64":
            return replace(update, delta=delta.to(torch.int64))
        if kind == "inf":
            return replace(update, delta=delta.clone().index_fill_(0, torch.tensor([0]), math.inf))
        if kind == "negative n":
            return replace(update, meta=replace(update.meta, num_samples=-3))
        return replace(update, meta=replace(update.meta, label_histogram=np.array([-1.0, 2.0])))


if MALFORMED_ATTACK not in ATTACKS:
    ATTACKS.register(MALFORMED_ATTACK, params=ScalingParams)(_MalformedUpload)


def test_a_tiny_run_rejects_a_malformed_client_every_round(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny_raw()))
    attack = f"methods.1.attack={{name: {MALFORMED_ATTACK}, clients: [1, 3]}}"
    cfg = load_config(path, ["federation.rounds=3", attack])
    run = run_experiment(cfg, tmp_path / "run")
    records = read_jsonl(seed_dir(run, "fedavg", 3) / "rounds.jsonl")
    assert len(records) == 3
    for rec in records:
        assert rec["status"] == "aggregated"
        assert [r["client"] for r in rec["rejected"]] == [1, 3]
        assert {r["reason"] for r in rec["rejected"]} == {"malformed"}
        assert all(r["detail"] for r in rec["rejected"])
        assert rec["participants"] == [0, 2]
        assert rec["test"]["accuracy"] > 0
    details = [records[i]["rejected"][0]["detail"] for i in range(3)]
    assert "shape" in details[0] and "dtype" in details[1] and "non-finite" in details[2]


# --- regressions of fixed bugs (U1–U6) ----------------------------------------------


def _update(delta: Any = None, tensors: Any = None, **meta: Any) -> ClientUpdate:
    fields: dict[str, Any] = {"client_id": 1, "num_samples": 10, "round": 1, **meta}
    return ClientUpdate(
        torch.ones(D) if delta is None else delta, UpdateMeta(**fields), tensors=tensors or {}
    )


@pytest.mark.parametrize(
    ("update", "needs", "word"),
    [
        pytest.param(_update(num_samples="10"), ((), ()), "num_samples", id="num_samples-str"),
        pytest.param(_update(num_samples=None), ((), ()), "num_samples", id="num_samples-None"),
        pytest.param(_update(scalars={"a_norm": 10**400}), ((), ()), "scalar", id="scalar-10e400"),
        pytest.param(_update(scalars=None), ((), ()), "scalar", id="scalars-None"),
        pytest.param(_update(scalars=[1.0]), ((), ()), "scalar", id="scalars-list"),
        pytest.param(
            _update(label_histogram=[[1, 2], [3]]), ((), ()), "label_histogram", id="hist-ragged"
        ),
        pytest.param(
            _update(tensors={CONTROL_DELTA: torch.ones(D), 0: torch.ones(D)}),
            ((CONTROL_DELTA,), ()),
            "tensors",
            id="tensor-key-int",
        ),
        pytest.param(ClientUpdate(torch.ones(D), None), ((), ()), "meta", id="meta-None"),  # type: ignore[arg-type]
    ],
)
def test_validate_update_returns_a_reason_for_malformed_metadata(
    update: ClientUpdate, needs: Needs, word: str
) -> None:
    # U1: these raised (sorted() of mixed keys, None <= 0, None.items(), math.isfinite of
    # 10**400, np.asarray of a ragged list) instead of returning a reason
    reason = validate_update(update, D, *needs)
    assert isinstance(reason, str) and word in reason


@pytest.mark.parametrize("n", [math.nan, math.inf, 10**400], ids=["nan", "inf", "1e400"])
def test_non_finite_num_samples_is_rejected(n: float) -> None:
    # U2: nan <= 0 is False, so a NaN count passed the positivity check
    assert validate_update(_update(num_samples=n), D) is not None


@pytest.mark.parametrize("n", [math.nan, math.inf, 10**400], ids=["nan", "inf", "1e400"])
def test_non_finite_num_samples_does_not_crash_the_round(n: float) -> None:
    # U2: the weights became NaN (aggregators.py ValueError) or the count overflowed float64
    # (weighting.py OverflowError) and the round crashed
    _assert_round_survives({1: lambda u: replace(u, meta=replace(u.meta, num_samples=n))})


def _assert_round_survives(
    arrive: dict[int, Callable[[ClientUpdate], ClientUpdate]], **kw: Any
) -> None:
    """The round aggregates the honest clients and rejects the others as MALFORMED."""
    out = scheduler(arrive=arrive, **kw).round(W0, 1)
    rec = out.record
    assert rec.status is RoundStatus.AGGREGATED
    assert [(r.client, r.reason) for r in rec.rejected] == [
        (k, RejectionReason.MALFORMED) for k in sorted(arrive)
    ]
    assert rec.participants == [k for k in range(K) if k not in arrive]
    assert bool(torch.isfinite(out.params).all()), out.params


def test_float64_delta_beyond_float32_is_rejected() -> None:
    # U3: finite in float64, inf once the scheduler copies it into its float32 row
    big = torch.full((D,), 1e300, dtype=torch.float64)
    reason = validate_update(_update(delta=big), D)
    assert isinstance(reason, str) and "delta" in reason and "float32" in reason
    _assert_round_survives({1: lambda u: replace(u, delta=big)})


def test_float64_delta_within_float32_is_accepted() -> None:
    fits = torch.full((D,), F32_MAX, dtype=torch.float64)
    assert validate_update(_update(delta=fits), D) is None
    assert validate_update(_update(delta=fits.neg()), D) is None


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("train_loss", "low"),
        ("train_metrics", {"accuracy": None}),
        ("bytes_sent", "100"),
        ("client_id", "seven"),
        ("client_id", 2**70),
        ("round", "1"),
    ],
)
def test_malformed_metadata_fields_do_not_crash_the_round(field_name: str, value: Any) -> None:
    # U4: round_record.sync_record, hashing.update_set_sha256 and FlatTier.combine used fields
    # validate_update never checked
    reason = validate_update(_update(**{field_name: value}), D)
    assert isinstance(reason, str) and field_name in reason
    _assert_round_survives({1: lambda u: replace(u, meta=replace(u.meta, **{field_name: value}))})


@pytest.mark.parametrize("claimed", [3, 99, -1])
def test_a_client_cannot_claim_another_client_id(claimed: int) -> None:
    # U4b: the record credited the update to the client_id it claimed, not to its sender
    out = scheduler(arrive={1: lambda u: replace(u, meta=replace(u.meta, client_id=claimed))})
    rec = out.round(W0, 1).record
    accepted_as_sender = sorted(rec.participants) == list(range(K))
    rejected = [r.client for r in rec.rejected] == [1]
    assert accepted_as_sender or rejected, rec.participants
    assert rejected and rec.rejected[0].reason is RejectionReason.MALFORMED
    assert "client_id" in str(rec.rejected[0].detail)


def test_the_network_sees_an_upload_under_its_sender_not_its_claim() -> None:
    # client 1 claims to be client 3, whose upload the network loses this round: client 1
    # is refused as malformed, not lost under client 3's name
    sched = scheduler(arrive={1: lambda u: replace(u, meta=replace(u.meta, client_id=3))})
    outage = NETWORK_MODELS.build("scripted_outage", {"outages": {3: [1]}})
    sched.c = replace(sched.c, network=outage)
    rec = sched.round(W0, 1).record
    assert [(r.client, r.reason) for r in rec.rejected] == [
        (1, RejectionReason.MALFORMED),
        (3, RejectionReason.LOST_IN_TRANSIT),
    ]
    assert rec.participants == [0, 2, 4]


def test_sparse_delta_does_not_crash_the_round() -> None:
    # U5: copy_() from a sparse tensor into the dense row raised
    out = scheduler(arrive={1: lambda u: replace(u, delta=u.delta.to_sparse())}).round(W0, 1)
    assert out.record.status is RoundStatus.AGGREGATED
    _assert_round_survives({1: lambda u: replace(u, delta=u.delta.to_sparse())})


def test_one_wrong_length_histogram_does_not_fail_a_consistency_round() -> None:
    # U6: validate_update did not know the class count, so one client's histogram of
    # another length reached the consistency weighting, which refused the whole round
    longer = lambda u: replace(u, meta=replace(u.meta, label_histogram=np.ones(C + 1)))  # noqa: E731
    _assert_round_survives({1: longer}, consistency=True)
