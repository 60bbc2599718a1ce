"""A finished method frees its model: memory stays bounded by one method, not their number.

``geofl run paper001-dp-utility`` grew from ~1.1 GB to 3-3.8 GB over three DP-SGD rows:
every DP-SGD step's layer records and gradients, and so every row's model, outlived the step.
The cause was a reference cycle that Python's collector cannot see: the book-keeping engine kept
GroupNorm's statistics as read from its autograd node, whose graph edges lead (through C++
nodes) to a tap's callback, whose closure holds the engine and so the model. These tests hold
weak references only: no RSS or timing threshold.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from tests.conftest import tiny_raw
from torch import nn

from geofl.client.bookkeeping import BookKeepingEngine
from geofl.config.schema import ExperimentConfig
from geofl.engine import experiment
from geofl.engine.run import FederatedRun


def _gn_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=1),
        nn.GroupNorm(2, 8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 3),
    )


def test_a_bk_step_on_a_groupnorm_model_leaves_no_reference_to_it() -> None:
    gen = torch.Generator().manual_seed(0)
    model = _gn_model()
    engine = BookKeepingEngine(model, F.cross_entropy)
    x, y = torch.randn(6, 4, 8, 8, generator=gen), torch.randint(0, 3, (6,), generator=gen)
    out = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    engine.clipped_sum(x, y, 1.0, out)
    engine(x, y)  # the materialised path too
    alive = weakref.ref(model)
    del model, engine, out
    gc.collect()
    assert alive() is None


def _dp_methods(*sigmas: float) -> list[dict[str, Any]]:
    return [
        {
            "name": f"dp{s}",
            "partition": {"name": "iid"},
            "trainer": {"name": "dp_sgd", "noise_multiplier": s, "clip": 1.0},
        }
        for s in sigmas
    ]


def test_three_dp_methods_in_one_process_free_each_finished_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = tiny_raw(
        methods=_dp_methods(0.8, 1.0, 1.5),
        federation={"num_clients": 3, "rounds": 1, "participation": 1.0},
        model={"name": "small_cnn", "params": {"width": 8, "blocks": 2, "norm": "group"}},
    )
    cfg = ExperimentConfig.model_validate(raw)
    earlier: list[tuple[str, weakref.ref[Any], weakref.ref[Any]]] = []
    held: list[list[str]] = []

    class Watched(FederatedRun):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            gc.collect()  # what a finished method still holds when the next one starts
            held.append([name for name, m, c in earlier if m() is not None or c() is not None])
            super().__init__(*args, **kwargs)
            mod = weakref.ref(self.workspace.module)
            earlier.append((self.method.name, mod, weakref.ref(self.comps)))

    monkeypatch.setattr(experiment, "FederatedRun", Watched)
    experiment.run_experiment(cfg, tmp_path / "run")
    gc.collect()
    assert [name for name, _, _ in earlier] == ["dp0.8", "dp1.0", "dp1.5"]
    assert held == [[], [], []]  # no earlier method's model when the next one starts
    assert [name for name, m, c in earlier if m() is not None or c() is not None] == []
