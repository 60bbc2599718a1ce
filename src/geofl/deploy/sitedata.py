"""Site-local data on Flower (``data.sites``): sites hold their data, the server none.

A site's SuperNode names which entry of ``data.sites`` it is (node config ``site``) and
may name its own data (node config ``data``: a YAML file ``{dataset: …, params: …}``
replacing the entry's definition, e.g. its local folder). The site loads, splits and
partitions its data itself (:mod:`geofl.engine.sites`); the server never loads or needs
it. What leaves a site, and when:

1. **Discovery** (``query``, before round 1): its name, the ids of the clients it hosts,
   its :class:`~geofl.engine.sites.DataSchema` (bands, classes, target kind and shape,
   sample shape — no samples) and the :class:`~geofl.engine.sites.BandStats` of its raw
   train split (count, per-band Σx and Σx² in float64) — of its held-out val split for a
   DP method, so that no training record leaves outside the clients' ε. The server checks
   that the sites agree, adds the statistics in site order and sends the global mean/std
   back with every later message. These statistics are aggregate but *not* differentially
   private.
2. **Training** (``train``, per client and round): the client step's upload and metadata,
   as in the shared-dataset mode (:mod:`geofl.deploy.wire`).
3. **Evaluation** (``evaluate``, per site and evaluated round): the global model's
   statistics on the site's val and test split (:mod:`geofl.engine.site_reports.evaluation`:
   a confusion matrix and summed loss for classification, else split metrics and sample
   count); the server merges them in site order and selects the best model by the merged
   validation metric.

Messages are stateless: each carries what the site needs (fingerprint, mean/std), so a
site restarted between messages rebuilds the same data.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from geofl.config.schema import ExperimentConfig, SiteDataConfig
from geofl.data.splitting.partition import Partition
from geofl.deploy.setup import DeploySetup, fingerprint
from geofl.deploy.site import Site
from geofl.deploy.wire import NORM_MEAN, NORM_STD, decode_norm, exchange
from geofl.engine.components import PreparedData
from geofl.engine.experiment import method_stats_split
from geofl.engine.site_reports.evaluation import LocalSiteEvaluator, SiteEvalStats, SiteHeldOut
from geofl.engine.sites import (
    BandStats,
    DataSchema,
    band_stats,
    check_schemas,
    check_site_data,
    client_offsets,
    combine_band_stats,
    empty_dataset,
    load_site,
    normalised,
    site_partition,
    site_stats_inputs,
    split_site,
)
from geofl.errors import DeployError

__all__ = [
    "EVALUATE",
    "FlowerSiteEvaluator",
    "LocalSite",
    "SiteFederation",
    "decode_eval_reply",
    "encode_eval_reply",
    "site_federation",
]

log = logging.getLogger("geofl")

EVALUATE = "evaluate"

Norm = tuple[torch.Tensor, torch.Tensor] | None


def _site_entry(cfg: ExperimentConfig, name: str) -> tuple[int, SiteDataConfig]:
    names = [s.name for s in cfg.data.sites or []]
    if name not in names:
        raise DeployError(
            f"node config site={name!r}: no such site in data.sites (sites: {names}); give "
            "the name of this site's entry"
        )
    i = names.index(name)
    return i, (cfg.data.sites or [])[i]


def _site_spec(entry: SiteDataConfig, data_file: str) -> SiteDataConfig:
    """``entry`` with the dataset definition of the node config's ``data`` file."""
    if not data_file:
        return entry
    path = Path(data_file).expanduser()
    if not path.is_file():
        raise DeployError(f"site {entry.name}: node config data={data_file!r}: file not found")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        return SiteDataConfig(
            name=entry.name,
            clients=entry.clients,
            dataset=str(doc["dataset"]),
            params=dict(doc.get("params") or {}),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
        raise DeployError(
            f"site {entry.name}: node config data={data_file!r}: expected YAML with dataset "
            f"and params ({type(err).__name__})"
        ) from None


class LocalSite:
    """A SuperNode's own data: loaded, checked and split at construction, normalised and
    turned into a training :class:`~geofl.deploy.site.Site` once the server's mean/std
    arrive.

    Args:
        setup: The experiment's (method, seed) (no data: site-local mode).
        name: This site's ``data.sites`` name (node config ``site``).
        data_file: Node config ``data`` (its own dataset definition; "" for none).
        state_dir: The site's state directory.

    Raises:
        DeployError: unknown site, unreadable ``data`` file.
        ConfigError: naming ``data.sites.<i>…`` and the site: missing data, bands it
            lacks, targets the task cannot learn.
    """

    def __init__(
        self, setup: DeploySetup, name: str, data_file: str, state_dir: Path | None
    ) -> None:
        cfg = self.cfg = setup.cfg
        self.setup, self.state_dir = setup, state_dir
        self.index, entry = _site_entry(cfg, name)
        self.name = name
        ds = load_site(cfg, self.index, _site_spec(entry, data_file))
        check_site_data(cfg, ds, name)
        self.schema = DataSchema.of(ds)
        self.split = split_site(cfg, self.index, ds, setup.seed)
        self.stats_from = method_stats_split(setup.method)  # val for a DP method
        standardize = cfg.data.normalize == "standardize"
        inputs = site_stats_inputs(self.split, self.stats_from) if standardize else None
        self.stats = None if inputs is None else band_stats(inputs)
        first = client_offsets(cfg)[self.index]
        self.clients = list(range(first, first + entry.clients))
        self.fingerprint = fingerprint(cfg, setup.method, setup.seed)
        self._sites: dict[bytes, Site] = {}

    def describe(self) -> dict[str, Any]:
        """The discovery reply: name, clients, schema, band statistics."""
        info: dict[str, Any] = {
            "clients": json.dumps(self.clients),
            "site_name": self.name,
            "schema": self.schema.to_json(),
        }
        if self.stats is not None:
            info.update(
                stats_count=int(self.stats.count),
                stats_sum=[float(v) for v in self.stats.sum],
                stats_sumsq=[float(v) for v in self.stats.sumsq],
            )
        return info

    def site(self, norm: Norm) -> Site:
        """The training site of this data normalised with ``norm`` (built once per norm).

        Raises:
            DeployError: the server sent no mean/std although the config standardises.
        """
        if (norm is None) != (self.stats is None):
            raise DeployError(f"site {self.name}: the server's band statistics are missing")
        key = b"" if norm is None else norm[0].numpy().tobytes() + norm[1].numpy().tobytes()
        if key not in self._sites:
            self._sites[key] = self._build(norm)
        return self._sites[key]

    def resume_site(self) -> Site:
        """A site to check a resume with (its state directory only; data not normalised)."""
        if not self._sites:
            self._sites[b"raw"] = self._build(None)
        return next(iter(self._sites.values()))

    def _build(self, norm: Norm) -> Site:
        cfg, s = self.cfg, self.split
        mean, std = (None, None) if norm is None else norm
        if norm is not None:
            s = normalised(s, norm[0], norm[1])
        part = site_partition(cfg, self.setup.method, self.index, s.train, self.setup.seed)
        k = cfg.federation.num_clients
        indices = [np.zeros(0, dtype=np.int64)] * k
        hist = np.zeros((k, part.histograms.shape[1]), dtype=np.int64)
        for j, c in enumerate(self.clients):
            indices[c], hist[c] = np.asarray(part.indices[j], dtype=np.int64), part.histograms[j]
        held_out = (SiteHeldOut(s.name, s.val, s.test),)
        data = PreparedData(s.train, s.val, s.test, mean, std, held_out, self.stats_from)
        setup = replace(self.setup, data=data, partition=Partition(tuple(indices), hist))
        return Site(setup, self.clients, self.state_dir)

    def evaluate(self, params: torch.Tensor, norm: Norm) -> tuple[SiteEvalStats, SiteEvalStats]:
        """(val, test) statistics of the global model ``params`` on this site's splits."""
        site = self.site(norm)
        ev = LocalSiteEvaluator(site.workspace, site.held_out, site.task, self.cfg.eval.batch_size)
        return ev(params)[0]


# ------------------------------------------------------------------------- wire
def _stats_record(prefix: str, s: SiteEvalStats) -> tuple[dict[str, Any], dict[str, Array]]:
    metrics: dict[str, Any] = {f"{prefix}.n": s.n, f"{prefix}.loss_sum": s.loss_sum}
    metrics.update({f"{prefix}.value.{k}": float(v) for k, v in s.values.items()})
    arrays = {} if s.confusion is None else {f"{prefix}.confusion": Array(s.confusion)}
    return metrics, arrays


def encode_eval_reply(val: SiteEvalStats, test: SiteEvalStats) -> RecordDict:
    """A site's ``evaluate`` reply (``eval`` MetricRecord, ``confusion`` ArrayRecord)."""
    mv, av = _stats_record("val", val)
    mt, at = _stats_record("test", test)
    return RecordDict({"eval": MetricRecord({**mv, **mt}), "confusion": ArrayRecord({**av, **at})})


def decode_eval_reply(content: RecordDict) -> tuple[SiteEvalStats, SiteEvalStats]:
    """Inverse of :func:`encode_eval_reply`."""
    m, arrays = content.metric_records["eval"], content.array_records["confusion"]
    out = []
    for p in ("val", "test"):
        key = f"{p}.value."
        cm = arrays.get(f"{p}.confusion")
        out.append(
            SiteEvalStats(
                int(m[f"{p}.n"]),  # type: ignore[arg-type]
                float(m[f"{p}.loss_sum"]),  # type: ignore[arg-type]
                None if cm is None else np.array(cm.numpy(), copy=True),
                {k[len(key) :]: float(v) for k, v in m.items() if k.startswith(key)},  # type: ignore[arg-type]
            )
        )
    return out[0], out[1]


def encode_eval_request(params: torch.Tensor, fp: str, norm: Norm) -> RecordDict:
    """An ``evaluate`` message: the global model, the config fingerprint, mean/std."""
    arrays = {"params": Array(np.ascontiguousarray(params.numpy()))}
    if norm is not None:
        arrays[NORM_MEAN] = Array(np.ascontiguousarray(norm[0].numpy()))
        arrays[NORM_STD] = Array(np.ascontiguousarray(norm[1].numpy()))
    return RecordDict({"model": ArrayRecord(arrays), "query": ConfigRecord({"fingerprint": fp})})


def decode_eval_request(content: RecordDict) -> tuple[torch.Tensor, str, Norm]:
    """Inverse of :func:`encode_eval_request`."""
    arrays = content.array_records["model"]
    params = torch.from_numpy(np.array(arrays["params"].numpy(), copy=True))
    return params, str(content.config_records["query"]["fingerprint"]), decode_norm(arrays)


# ------------------------------------------------------------------------- server
@dataclass(frozen=True)
class SiteFederation:
    """The server's view of site-local data: who serves which site, no samples.

    Attributes:
        nodes: SuperNode id of every site, in site order.
        data: Empty splits of the sites' schema, with the global mean/std.
        partition: K empty client index sets.
        norm: The global ``(mean, std)`` every message carries (None: not standardised).
    """

    nodes: tuple[int, ...]
    data: PreparedData
    partition: Partition
    norm: Norm


def site_federation(
    cfg: ExperimentConfig, infos: Mapping[int, Mapping[str, Any]]
) -> SiteFederation:
    """Check the sites' discovery replies (node → info) and combine their statistics.

    Raises:
        DeployError: a site served by no node or by two.
        ConfigError: sites that disagree on their data (:func:`check_schemas`).
    """
    names = [s.name for s in cfg.data.sites or []]
    by_name: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for node, info in infos.items():
        name = str(info.get("site_name", ""))
        if name in by_name:
            raise DeployError(f"site {name} is served by two nodes ({by_name[name][0]}, {node})")
        by_name[name] = (node, info)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise DeployError(
            f"no SuperNode serves sites {missing}; start each with node config site=<name>"
        )
    rows = [by_name[n][1] for n in names]
    schemas = [DataSchema.from_json(str(r["schema"])) for r in rows]
    check_schemas(names, schemas)
    empty = empty_dataset(schemas[0])
    norm: Norm = None
    if cfg.data.normalize == "standardize":
        stats = [
            BandStats(
                int(r["stats_count"]),
                np.asarray(r["stats_sum"], dtype=np.float64),
                np.asarray(r["stats_sumsq"], dtype=np.float64),
            )
            for r in rows
        ]
        norm = combine_band_stats(stats, empty.inputs.ndim)
    k = cfg.federation.num_clients
    mean, std = (None, None) if norm is None else norm
    part = Partition(
        tuple(np.zeros(0, dtype=np.int64) for _ in range(k)),
        np.zeros((k, max(len(schemas[0].classes), 1)), dtype=np.int64),
    )
    nodes = tuple(by_name[n][0] for n in names)
    return SiteFederation(nodes, PreparedData(empty, empty, empty, mean, std), part, norm)


class FlowerSiteEvaluator:
    """Federated evaluation on the sites.

    A :data:`~geofl.engine.site_reports.evaluation.SiteEvaluator`:
    one ``evaluate`` message per site, replies in site order.

    A site that does not answer within ``timeout`` seconds, or answers with an error, is
    left out of that evaluation (logged); when none answers the run stops.

    Args:
        grid: The ServerApp's grid.
        names: Site names, in site order.
        nodes: SuperNode of every site, in site order.
        fp: The config fingerprint (JSON).
        norm: The global mean/std.
        timeout: Seconds an evaluation waits.
    """

    def __init__(
        self,
        grid: Grid,
        names: Sequence[str],
        nodes: Sequence[int],
        fp: str,
        norm: Norm,
        timeout: float,
    ) -> None:
        self.grid, self.names, self.nodes = grid, list(names), list(nodes)
        self.fp, self.norm, self.timeout = fp, norm, timeout

    def __call__(self, params: torch.Tensor) -> list[tuple[SiteEvalStats, SiteEvalStats]]:
        content = encode_eval_request(params, self.fp, self.norm)
        msgs = [
            Message(content, dst_node_id=n, message_type=EVALUATE, group_id="eval")
            for n in self.nodes
        ]
        ids, got = exchange(self.grid, msgs, self.timeout)
        out = []
        for name, mid in zip(self.names, ids, strict=True):
            reply = got.get(mid)
            why = _eval_failure(reply, self.timeout)
            if reply is not None and why is None:
                out.append(decode_eval_reply(reply.content))
            else:
                log.warning("site %s left out of this evaluation: %s", name, why)
        if not out:
            raise DeployError("no site returned its evaluation; check the SuperNodes' logs")
        return out


def _eval_failure(rep: Message | None, timeout: float) -> str | None:
    if rep is None:
        return f"no reply within {timeout:g} s"
    if rep.has_error():
        return str(rep.error.reason)
    site = rep.content.config_records.get("site")
    if site is not None and "error" in site:
        return str(site["error"])
    return None
