"""Client side: batch schedule, local SGD update, release steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofl.client.data import ClientData, batch_indices
from geofl.client.release import RELEASE_STEPS, apply_release, l2_clip
from geofl.client.trainer import LOCAL_TRAINERS
from geofl.config.schema import TrainConfig
from geofl.models import MODELS, FlatModel
from geofl.rng import torch_generator
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta


def test_batch_indices_epochs_and_steps() -> None:
    g = torch_generator(0)
    batches = list(batch_indices(10, 4, epochs=2, steps=None, generator=g))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2]
    assert sorted(torch.cat(batches[:3]).tolist()) == list(range(10))
    steps = list(batch_indices(10, 4, epochs=1, steps=5, generator=torch_generator(0)))
    assert [len(b) for b in steps] == [4, 4, 2, 4, 4]


def test_l2_clip_by_hand() -> None:
    clipped, norm = l2_clip(torch.tensor([3.0, 4.0]), 2.5)
    assert norm == 5.0 and clipped.tolist() == [1.5, 2.0]
    same, _ = l2_clip(torch.tensor([3.0, 4.0]), 10.0)
    assert same.tolist() == [3.0, 4.0]
    zero, n0 = l2_clip(torch.zeros(3), 1.0)
    assert n0 == 0.0 and zero.tolist() == [0.0, 0.0, 0.0]


def test_release_pipeline_reports_and_does_not_mutate() -> None:
    step = RELEASE_STEPS.build("l2_clip", {"bound": 1.0})
    delta = torch.tensor([3.0, 4.0])
    upd = ClientUpdate(delta, UpdateMeta(client_id=0, num_samples=1, round=1))
    data = _client(4)
    out = apply_release(
        upd, [step], data=data, directives=ClientDirectives(1, 0), generator=torch_generator(0)
    )
    assert delta.tolist() == [3.0, 4.0]
    assert torch.allclose(out.delta, torch.tensor([0.6, 0.8]))
    assert out.local_log["l2_clip"] == {"norm": 5.0, "bound": 1.0, "clipped": True}
    per_client = apply_release(
        upd,
        [step],
        data=data,
        directives=ClientDirectives(1, 0, {"clip_bound": 10.0}),
        generator=torch_generator(0),
    )
    assert per_client.delta.tolist() == [3.0, 4.0]


def _client(n: int = 40) -> ClientData:
    g = torch_generator(1, "data")
    x = torch.randn(n, 3, 8, 8, generator=g)
    y = (x[:, 0].mean((1, 2)) > 0).long()
    return ClientData(0, x, y, np.bincount(y.numpy(), minlength=2))


def test_local_sgd_update_is_delta_and_deterministic() -> None:
    model = MODELS.build(
        "small_cnn",
        {"width": 4, "blocks": 1},
        in_channels=3,
        num_classes=2,
        generator=torch_generator(0),
    )
    ws = FlatModel(model)
    trainer = LOCAL_TRAINERS.build(
        "local_sgd",
        {},
        workspace=ws,
        train=TrainConfig(batch_size=8, local_epochs=2),
        task=ClassificationTask(2),
    )
    w0 = ws.snapshot()
    a = trainer(w0, _client(), ClientDirectives(1, 0), torch_generator(5))
    b = trainer(w0, _client(), ClientDirectives(1, 0), torch_generator(5))
    assert torch.equal(a.delta, b.delta)
    assert torch.allclose(ws.flat, w0 + a.delta, atol=1e-7)  # workspace holds the local model
    assert a.meta.steps == 10 and a.meta.num_samples == 40
    assert a.meta.bytes_sent == 4 * w0.numel()
    assert float(a.delta.norm()) > 0
    assert a.meta.label_histogram is not None and a.meta.label_histogram.sum() == 40


def test_local_sgd_one_step_matches_manual_sgd() -> None:
    """Reference: one plain SGD step (no momentum/wd) equals w − lr·∇L on the batch."""
    model = MODELS.build(
        "small_cnn",
        {"width": 4, "blocks": 1, "norm": "none"},
        in_channels=3,
        num_classes=2,
        generator=torch_generator(0),
    )
    ws = FlatModel(model)
    w0 = ws.snapshot()
    data = _client(8)
    trainer = LOCAL_TRAINERS.build(
        "local_sgd",
        {},
        workspace=ws,
        train=TrainConfig(batch_size=8, local_steps=1, lr=0.1, momentum=0.0, weight_decay=0.0),
        task=ClassificationTask(2),
    )
    upd = trainer(w0, data, ClientDirectives(1, 0), torch_generator(0))
    ws.load(w0)
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(data.inputs), data.targets).backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])  # type: ignore[union-attr]
    assert torch.allclose(upd.delta, -0.1 * grad, atol=1e-6)


@pytest.mark.parametrize("bound", [0.0, -1.0])
def test_l2_clip_bound_must_be_positive(bound: float) -> None:
    from geofl.errors import ConfigError

    with pytest.raises(ConfigError, match="bound"):
        RELEASE_STEPS.validate("l2_clip", {"bound": bound})


def test_dropout_masks_depend_on_the_round_stream_not_on_what_ran_before() -> None:
    """A trainer reseeds dropout from the train stream's seed: the same (seed, round,
    client) gives the same update whatever the trainer ran before (resume), and another
    round's stream gives other masks."""
    model = MODELS.build(
        "mlp",
        {"hidden": [16], "dropout": 0.5},
        in_channels=6,
        num_classes=2,
        generator=torch_generator(0, "init"),
    )
    tr = LOCAL_TRAINERS.build(
        "local_sgd",
        {},
        workspace=FlatModel(model),
        train=TrainConfig(batch_size=8, local_steps=3),
        task=ClassificationTask(2),
    )
    g = torch_generator(1, "data")
    data = ClientData(
        0,
        torch.randn(24, 6, generator=g),
        torch.randint(0, 2, (24,), generator=g),
        np.array([12, 12]),
    )
    w0 = tr.workspace.snapshot()
    a = tr(w0, data, ClientDirectives(1, 0), torch_generator(7, "round", 1))
    tr(w0, data, ClientDirectives(2, 0), torch_generator(7, "round", 2))  # moves the masks
    b = tr(w0, data, ClientDirectives(1, 0), torch_generator(7, "round", 1))
    c = tr(w0, data, ClientDirectives(1, 0), torch_generator(7, "round", 3))
    assert torch.equal(a.delta, b.delta)
    assert not torch.equal(a.delta, c.delta)
