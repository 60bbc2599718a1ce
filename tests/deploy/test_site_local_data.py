"""Site-local data on Flower without a network (``data.sites``): sites built from their
own data answer discovery with schema and band statistics only, the server combines
them, and a federation run in this process through the wire records — server with no
data, sites training and evaluating on theirs — equals the simulator's run bit for bit.
A site that cannot take part fails in one line naming the site and the field."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, RecordDict

from geofl.config.load import load_config
from geofl.deploy.setup import fingerprint, fingerprint_mismatch, load_setup
from geofl.deploy.sitedata import (
    LocalSite,
    decode_eval_reply,
    decode_eval_request,
    encode_eval_reply,
    encode_eval_request,
    site_federation,
)
from geofl.deploy.wire import decode_reply, decode_request, encode_request
from geofl.engine.experiment import run_experiment
from geofl.engine.run import FederatedRun
from geofl.engine.scheduler import ClientJob, StepOutcome
from geofl.engine.site_reports.evaluation import SiteEvalStats
from geofl.errors import ConfigError, DeployError
from geofl.rundir import seed_dir
from tests.engine.test_sites import sites_raw, synthetic_site, write_npz


def _write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _rounds(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        rec.pop("time_s", None)
        out.append(rec)
    return out


class InProcess:
    """The server's view of the sites, through the wire records, in this process."""

    def __init__(self, sites: Sequence[LocalSite], norm: Any, fp: str) -> None:
        self.sites, self.norm, self.fp = list(sites), norm, fp
        self.host = {k: s for s in sites for k in s.clients}
        self.state = {k: RecordDict() for k in self.host}

    def __call__(self, params: torch.Tensor, jobs: Sequence[ClientJob]) -> Iterator[StepOutcome]:
        for job in jobs:
            d = job.directives
            req = decode_request(encode_request(params, d, self.fp, 0, norm=self.norm))
            site = self.host[d.client_id].site(req.norm)
            yield decode_reply(site.train(req, self.state[d.client_id]))

    def evaluate(self, params: torch.Tensor) -> list[tuple[SiteEvalStats, SiteEvalStats]]:
        out = []
        for s in self.sites:
            p, fp, norm = decode_eval_request(encode_eval_request(params, self.fp, self.norm))
            assert not fingerprint_mismatch(json.loads(fp), s.fingerprint)
            out.append(decode_eval_reply(encode_eval_reply(*s.evaluate(p, norm))))
        return out


def test_in_process_federation_equals_the_simulator(tmp_path: Path) -> None:
    npz = write_npz(tmp_path / "south.npz", n=40, seed=5)
    from geofl.data.synthetic.landcover import SYNTHETIC_CLASSES

    south = {
        "name": "south",
        "dataset": "sentinel2_npz",
        "clients": 2,
        "params": {"path": str(npz), "classes": list(SYNTHETIC_CLASSES)},
    }
    raw = sites_raw(synthetic_site("north", 1), south)
    raw["federation"]["rounds"] = 2
    config = _write(tmp_path / "exp.yaml", raw)
    sim = seed_dir(run_experiment(load_config(config), tmp_path / "sim"), "fedavg", 3)
    setup = load_setup(config, None, None, "seeded")  # the simulator's generators
    assert setup.data is None  # the server loads nothing
    sites = [LocalSite(setup, n, "", tmp_path / f"{n}-state") for n in ("north", "south")]
    assert [s.clients for s in sites] == [[0], [1, 2]]
    infos = {i: ConfigRecord(s.describe()) for i, s in enumerate(sites)}  # as on the wire
    assert set(infos[0]) == {
        "clients",
        "site_name",
        "schema",
        "stats_count",
        "stats_sum",
        "stats_sumsq",
    }
    fed = site_federation(setup.cfg, infos)
    assert len(fed.data.train) == 0 and fed.norm is not None
    fp = json.dumps(fingerprint(setup.cfg, setup.method, setup.seed))
    net = InProcess(sites, fed.norm, fp)
    out = tmp_path / "dep"
    run = FederatedRun(
        setup.cfg, setup.method, 3, fed.data, fed.partition, out, (), net, net.evaluate
    )
    run.run()
    a, b = _rounds(sim / "rounds.jsonl"), _rounds(out / "rounds.jsonl")
    assert [r["model_sha256"] for r in a] == [r["model_sha256"] for r in b]
    assert a == b  # val/test merged from the sites' confusion matrices, as simulated
    assert a[-1]["test"]["n"] == sum(len(s.split.test) for s in sites)
    fa = json.loads((sim / "final.json").read_text())
    fb = json.loads((out / "final.json").read_text())
    assert fa["best_val"] == fb["best_val"]


def test_site_paths_stay_out_of_the_fingerprint(tmp_path: Path) -> None:
    raw = sites_raw()
    cfg = load_config(_write(tmp_path / "a.yaml", raw))
    raw["data"]["sites"][1]["params"]["seed"] = 7  # another site's own definition
    other = load_config(_write(tmp_path / "b.yaml", raw))
    m = cfg.methods[0]
    assert fingerprint(cfg, m, 3) == fingerprint(other, m, 3)
    raw["data"]["sites"][1]["name"] = "west"
    renamed = load_config(_write(tmp_path / "c.yaml", raw))
    assert fingerprint_mismatch(fingerprint(cfg, m, 3), fingerprint(renamed, m, 3)) == ["data"]


def test_a_site_names_its_own_data_and_bad_sites_fail_in_one_line(tmp_path: Path) -> None:
    raw = sites_raw()
    del raw["data"]["sites"][1]["dataset"]  # south's data is named at the site only
    del raw["data"]["sites"][1]["params"]
    setup = load_setup(_write(tmp_path / "exp.yaml", raw), None, None)
    own_data = {"dataset": "synthetic", "params": {"num_samples": 60, "size": 16, "seed": 2}}
    own = _write(tmp_path / "south-data.yaml", own_data)
    site = LocalSite(setup, "south", str(own), None)
    assert site.clients == [1] and len(site.split.train) > 0
    with pytest.raises(ConfigError, match=r"^data.sites.1.dataset: site south: no dataset named"):
        LocalSite(setup, "south", "", None)
    with pytest.raises(DeployError, match=r"node config site='east': no such site"):
        LocalSite(setup, "east", "", None)
    with pytest.raises(DeployError, match=r"^site south: node config data=.*: file not found"):
        LocalSite(setup, "south", str(tmp_path / "nope.yaml"), None)
    gone_data = {"dataset": "sentinel2_npz", "params": {"path": str(tmp_path / "x.npz")}}
    gone = _write(tmp_path / "gone.yaml", gone_data)
    with pytest.raises(ConfigError) as err:
        LocalSite(setup, "south", str(gone), None)
    assert str(err.value).startswith("data.sites.1.params: site south: sentinel2_npz file")
    wrong = _write(tmp_path / "ml.yaml", {"dataset": "synthetic_multilabel", "params": {}})
    with pytest.raises(ConfigError, match=r"^(task|model).name: site south: "):
        LocalSite(setup, "south", str(wrong), None)


def test_server_refuses_sites_that_disagree(tmp_path: Path) -> None:
    from geofl.data.synthetic.landcover import SYNTHETIC_CLASSES

    npz = write_npz(tmp_path / "rgb.npz", bands=3)
    south = {
        "name": "south",
        "dataset": "sentinel2_npz",
        "params": {"path": str(npz), "classes": list(SYNTHETIC_CLASSES)},
    }
    setup = load_setup(
        _write(tmp_path / "exp.yaml", sites_raw(synthetic_site("north", 1), south)), None, None
    )
    sites = [LocalSite(setup, n, "", None) for n in ("north", "south")]  # each alone is fine
    infos = {i: ConfigRecord(s.describe()) for i, s in enumerate(sites)}
    with pytest.raises(
        ConfigError,
        match=r"^data.sites: sites disagree on bands .*south: \['B01', 'B02', 'B03'\] \(3\)",
    ):
        site_federation(setup.cfg, infos)
    with pytest.raises(DeployError, match=r"no SuperNode serves sites \['south'\]"):
        site_federation(setup.cfg, {0: infos[0]})
    with pytest.raises(DeployError, match="site north is served by two nodes"):
        site_federation(setup.cfg, {0: infos[0], 1: infos[0]})
    assert np.isfinite(sites[0].stats.sum).all()  # type: ignore[union-attr]
