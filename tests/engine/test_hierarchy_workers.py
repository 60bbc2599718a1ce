"""``federation.workers: 2`` on the 003 hierarchy (issue 32 item 4): the tractors' client
steps run in worker processes, each job carrying the model its tractor holds, and the run is
bit-identical to one worker — every round record (less wall times), the final model and the
clients' privacy events — in the asynchronous hierarchy, where tractors behind an outage or
a late downlink start from older versions than the GEO's newest, and with personalization,
where every tractor starts from its own model. With one shared slot the models that found
no slot travel pickled with their job, and the run is still the same."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.engine.hierarchy_helpers import SEED, agri_raw, config, make_run, round_records

from geofl.config.validate import validate_config
from geofl.engine import workers as workers_mod
from geofl.engine.clients.runner import ClientJob, StepOutcome
from geofl.engine.experiment import run_experiment
from geofl.rundir import seed_dir

# Orbit contacts, ground outages and driver failures: downlinks reach clusters at different
# times, so a round's tractors hold different global versions.
HIER = {"round_s": 1800.0, "driver_deadline_s": 300.0, "p_driver_fail": 0.3}
UPLINK = {"network": {"p_fail": 0.2}}


def _run(tmp: Path, name: str, workers: int, hierarchy: dict[str, Any]) -> Path:
    raw = agri_raw(hierarchy, rounds=4, uplink=UPLINK)
    raw["federation"]["workers"] = workers
    return run_experiment(config(tmp, raw, name), tmp / name)


def _final(run: Path) -> dict[str, Any]:
    return torch.load(seed_dir(run, "hier", SEED) / "checkpoint.pt", weights_only=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "slots"),
    [({}, None), ({"personalization": {"alpha": 0.6, "beta": 0.2}}, 1)],
    ids=["async", "personal-one-slot"],
)
def test_two_workers_equal_one_on_the_hierarchy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], slots: int | None
) -> None:
    if slots is not None:
        monkeypatch.setattr(workers_mod, "HELD_SLOTS", slots)
    distinct: list[int] = []
    call = workers_mod.ClientWorkers.__call__

    def spy(
        self: workers_mod.ClientWorkers, params: torch.Tensor, jobs: Sequence[ClientJob]
    ) -> Iterator[StepOutcome]:
        distinct.append(len({id(params if j.held is None else j.held) for j in jobs}))
        return call(self, params, jobs)

    monkeypatch.setattr(workers_mod.ClientWorkers, "__call__", spy)
    hier = {**HIER, **extra}
    one, two = _run(tmp_path, "one", 1, hier), _run(tmp_path, "two", 2, hier)
    assert max(distinct) >= 2  # tractors really started from different models
    recs = round_records(one)
    assert recs == round_records(two)
    assert any(r["participants"] for r in recs)
    assert max(s for r in recs for s in r["hierarchy"]["staleness"]) >= 1
    a, b = _final(one), _final(two)
    assert torch.equal(a["params"], b["params"])
    assert a["clients"]["events"] == b["clients"]["events"]


class _InProcess:
    """A runner that runs each job here from the model the job carries (or the round's)."""

    def __init__(self, sched: Any) -> None:
        self.sched, self.held = sched, 0

    def __call__(self, params: torch.Tensor, jobs: Sequence[ClientJob]) -> Iterator[StepOutcome]:
        for job in jobs:
            self.held += job.held is not None
            yield self.sched.run_client(
                params if job.held is None else job.held, job.directives.client_id, job.directives
            )


def _rounds(tmp: Path, name: str, *, runner: bool) -> tuple[list[torch.Tensor], int]:
    raw = agri_raw(HIER, rounds=3, uplink=UPLINK)
    run = make_run(config(tmp, raw, name), tmp / name)
    fake = _InProcess(run.scheduler.sync) if runner else None
    run.scheduler.runner = fake  # what FederatedRun does with its ClientWorkers
    params, out = run.init_params, []
    for r in range(1, 4):
        params = run.scheduler.round(params, r).params
        run.comps.store.commit()
        out.append(params)
    return out, 0 if fake is None else fake.held


def test_a_runner_gets_each_tractors_held_model_and_the_round_is_the_same(
    tmp_path: Path,
) -> None:
    here, _ = _rounds(tmp_path, "here", runner=False)
    there, held = _rounds(tmp_path, "there", runner=True)
    assert held > 0
    assert all(torch.equal(a, b) for a, b in zip(here, there, strict=True))


def test_config_validate_accepts_workers_on_a_hierarchy_method(tmp_path: Path) -> None:
    raw = agri_raw(HIER)
    raw["federation"]["workers"] = 2
    validate_config(config(tmp_path, raw))  # no ConfigError


def test_model_slots_one_for_flat_a_few_for_the_hierarchy_within_the_memory_cap(
    tmp_path: Path,
) -> None:
    flat = config(tmp_path, agri_raw(None), "flat").methods[0]
    hier = config(tmp_path, agri_raw(HIER), "hier").methods[0]
    assert workers_mod.model_slots(flat, 1000) == 1
    assert workers_mod.model_slots(hier, 1000) == workers_mod.HELD_SLOTS
    huge = workers_mod.HELD_SLOT_BYTES // 4  # one slot fills the cap
    assert workers_mod.model_slots(hier, huge) == 1
    assert workers_mod.model_slots(hier, huge // 2) == 2
