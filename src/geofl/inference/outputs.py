"""From network outputs to prediction columns, per task (the columns of ``geofl predict``).

Every prediction CSV has the columns ``path, prediction`` followed by one numeric column
per output, named ``<kind>:<name>``:

====================  ================================  ===================================
task                  ``prediction``                    numeric columns
====================  ================================  ===================================
``classification``    the argmax class name             ``prob:<class>``: softmax
                                                        probability of each class
``multilabel``        the classes whose score reaches   ``score:<class>``: sigmoid score of
                      ``threshold`` (task parameter,    each class
                      default 0.5), joined by ``;``
``regression``        the value (one target) or the     ``value:<target>``: in target units
                      values joined by ``;``            (``state.target_mean``/``_std``
                                                        undone when the task recorded them)
``binary``            the positive or negative class    ``prob:<positive class>``: sigmoid
                      (``threshold``, default 0.5)      probability of the positive class
====================  ================================  ===================================

so a reader can select a task's columns by prefix. Another task adds a rule to
:data:`OUTPUT_RULES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from geofl.errors import RunDirError
from geofl.models.spec import ModelSpec

__all__ = ["OUTPUT_RULES", "PredictionColumns", "prediction_columns"]


@dataclass(frozen=True)
class PredictionColumns:
    """Predictions of a batch as table columns.

    Attributes:
        prediction: One human-readable prediction per sample.
        names: Names of the numeric columns (``prob:<class>``, ...).
        values: ``[B, len(names)]`` float values of those columns.
    """

    prediction: list[str]
    names: list[str]
    values: torch.Tensor


OutputRule = Callable[[torch.Tensor, ModelSpec], PredictionColumns]


def _names(spec: ModelSpec, width: int, fallback: str) -> Sequence[str]:
    if len(spec.classes) == width:
        return spec.classes
    return [f"{fallback}{i}" for i in range(width)]


def _classification(out: torch.Tensor, spec: ModelSpec) -> PredictionColumns:
    """Softmax probabilities; the class is the argmax of the logits (as evaluation takes)."""
    names = _names(spec, out.shape[1], "class")
    best = out.argmax(dim=1).tolist()
    probs = torch.softmax(out.to(torch.float32), dim=1)
    return PredictionColumns([names[i] for i in best], [f"prob:{n}" for n in names], probs)


def _multilabel(out: torch.Tensor, spec: ModelSpec) -> PredictionColumns:
    """Sigmoid scores; the labels whose score reaches the task's threshold."""
    names = _names(spec, out.shape[1], "label")
    threshold = float(spec.task.params.get("threshold", 0.5))
    scores = torch.sigmoid(out.to(torch.float32))
    chosen = [
        ";".join(n for n, s in zip(names, row, strict=True) if s >= threshold)
        for row in scores.tolist()
    ]
    return PredictionColumns(chosen, [f"score:{n}" for n in names], scores)


def _binary(out: torch.Tensor, spec: ModelSpec) -> PredictionColumns:
    """Sigmoid probability of the positive class; 1 where it reaches the task's threshold."""
    threshold = float(spec.task.params.get("threshold", 0.5))
    prob = torch.sigmoid(out.to(torch.float32).reshape(out.shape[0], -1)[:, :1])
    positive = spec.classes[1] if len(spec.classes) == 2 else "1"
    negative = spec.classes[0] if len(spec.classes) == 2 else "0"
    chosen = [positive if p >= threshold else negative for p in prob[:, 0].tolist()]
    return PredictionColumns(chosen, [f"prob:{positive}"], prob)


def _regression(out: torch.Tensor, spec: ModelSpec) -> PredictionColumns:
    """Values in target units (the task's standardisation undone when it recorded one)."""
    values = out.to(torch.float32).reshape(out.shape[0], -1)
    state = spec.task.state
    if "target_mean" in state and "target_std" in state:
        mean = torch.as_tensor(state["target_mean"], dtype=torch.float32).reshape(1, -1)
        std = torch.as_tensor(state["target_std"], dtype=torch.float32).reshape(1, -1)
        values = values * std + mean
    targets = spec.task.params.get("targets")
    width = values.shape[1]
    names = list(targets) if isinstance(targets, list) and len(targets) == width else None
    names = names or ([f"target{i}" for i in range(width)] if width > 1 else ["target"])
    text = [";".join(f"{v:.9g}" for v in row) for row in values.tolist()]
    return PredictionColumns(text, [f"value:{n}" for n in names], values)


#: Task name → how its outputs become prediction columns.
OUTPUT_RULES: dict[str, OutputRule] = {
    "classification": _classification,
    "multilabel": _multilabel,
    "regression": _regression,
    "binary": _binary,
}


def prediction_columns(outputs: torch.Tensor, spec: ModelSpec) -> PredictionColumns:
    """The prediction columns of a batch of network outputs.

    Raises:
        RunDirError: the spec's task has no rule here.
    """
    rule = OUTPUT_RULES.get(spec.task.name)
    if rule is None:
        raise RunDirError(
            f"task {spec.task.name!r} has no prediction columns in this geofl (known: "
            f"{', '.join(OUTPUT_RULES)}); use geofl.load_model and the model's raw outputs"
        )
    return rule(outputs, spec)
