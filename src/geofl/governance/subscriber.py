"""Governance as an engine subscriber (live) and from a finished run directory (offline).

Live: :class:`GovernanceSubscriber` opens a ledger for every governed (method, seed) run
in ``<seed dir>/ledger/``, commits the rule record at run start and the reputation,
committee, aggregation and permission records after every round, writing a readable log
to ``<seed dir>/governance.jsonl``. It observes only; its :meth:`allows` gate is the one
way permissions act on training (suspended/removed nodes sit out).

Offline: :func:`build_offline` replays a finished run's ``rounds.jsonl`` through the same
:class:`~geofl.governance.process.GovernanceProcess`, producing the same ledger (000 §4.7:
governance built from "real off-chain training results").
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from geofl.errors import GovernanceError
from geofl.events import SUBSCRIBERS, RunInfo, Subscriber
from geofl.governance.config import GovernanceConfig
from geofl.io import append_jsonl, write_json_atomic
from geofl.records import RoundRecord, read_rounds
from geofl.registry import CheckContext

if TYPE_CHECKING:  # the ledger and the process need the `governance` extra (web3, py-evm)
    from geofl.governance.ledger import Ledger
    from geofl.governance.process import GovernanceProcess

__all__ = ["GovernanceSubscriber", "build_offline", "open_ledger"]

LEDGER_DIR = "ledger"
LOG_FILE = "governance.jsonl"
#: The exact document whose hash is the rule commitment (for audits).
RULE_FILE = "governance.rule.json"


def open_ledger(cfg: GovernanceConfig, seed_dir: Path, seed: int) -> Ledger:
    """A fresh ledger for one run: embedded in ``seed_dir/ledger`` or on a JSON-RPC node."""
    # the backends import web3 (seconds; the `governance` extra): only a governed run
    # pays for them, and the core install registers this subscriber without them
    from geofl.governance.ledger import EmbeddedLedger, RpcLedger
    from geofl.governance.process import COORDINATOR

    backend = cfg.backend
    if backend.name == "embedded":
        path = seed_dir / LEDGER_DIR
        if path.exists():
            shutil.rmtree(path)
        return EmbeddedLedger.create(path, seed=seed, coordinator=COORDINATOR)
    if backend.name == "rpc":
        url = backend.params.get("url")
        if not isinstance(url, str) or not url:
            raise GovernanceError("governance.backend.url: give the node's JSON-RPC URL")
        ledger = RpcLedger.create(url, seed=seed, coordinator=COORDINATOR)
        (seed_dir / LEDGER_DIR).mkdir(parents=True, exist_ok=True)
        (seed_dir / LEDGER_DIR / "rpc.json").write_text(
            json.dumps({"url": url, "address": ledger.contract_address, "seed": seed})
        )
        return ledger
    raise GovernanceError(
        f"governance.backend.name: unknown backend {backend.name!r}; use embedded or rpc"
    )


def _close(ledger: Ledger) -> None:
    close = getattr(ledger, "close", None)
    if close is not None:
        close()


def _process(
    cfg: GovernanceConfig,
    resolved: dict[str, Any],
    seed_dir: Path,
    seed: int,
    method: str,
    num_params: int,
) -> GovernanceProcess:
    from geofl.governance.process import GovernanceProcess, rule_document

    part = json.loads((seed_dir / "partition.json").read_text())
    hist = np.asarray(part["histograms"], dtype=np.int64)
    ledger = open_ledger(cfg, seed_dir, seed)
    proc = GovernanceProcess(
        cfg,
        ledger=ledger,
        seed=seed,
        num_clients=len(hist),
        histograms=hist,
        resolved_config=resolved,
        num_params=num_params,
    )
    write_json_atomic(seed_dir / RULE_FILE, rule_document(resolved))
    log_path = seed_dir / LOG_FILE
    log_path.write_text("")
    append_jsonl(log_path, proc.start(f"{cfg.label}_{method}_seed{seed}"))
    return proc


class GovernanceSubscriber:
    """Commits a run's governance records as it trains (000 §3.5; never changes metrics).

    Args:
        gov: The validated ``governance`` section.
        resolved: The whole resolved experiment config (its hash is the rule commitment).
    """

    def __init__(self, gov: GovernanceConfig, resolved: Mapping[str, Any]) -> None:
        self.gov = gov
        self.resolved = dict(resolved)
        self._proc: GovernanceProcess | None = None
        self._dir: Path | None = None

    def on_run_start(self, info: RunInfo) -> None:
        self._proc = None
        if self.gov.methods is not None and info.method not in self.gov.methods:
            return
        self._dir = info.out_dir
        self._proc = _process(
            self.gov, self.resolved, info.out_dir, info.seed, info.method, info.num_params
        )
        if info.start_round > 1:  # resume: rebuild the same chain from the kept rounds
            for rec in read_rounds(info.out_dir / "rounds.jsonl"):
                if rec.round < info.start_round:
                    append_jsonl(info.out_dir / LOG_FILE, self._proc.round(rec))

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if self._proc is not None and self._dir is not None:
            append_jsonl(self._dir / LOG_FILE, self._proc.round(record))

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        if self._proc is not None:
            _close(self._proc.ledger)
            self._proc = None

    def allows(self, client: int, round_idx: int) -> bool:
        """The permission gate the engine consults before each round."""
        return self._proc is None or self._proc.allows(client)


def build_offline(run_dir: Path, method: str, seed: int, cfg: GovernanceConfig) -> Path:
    """Build the governance record of a finished run from its round log.

    Returns:
        The seed directory now holding ``ledger/`` and ``governance.jsonl``.
    """
    import yaml

    run_dir = Path(run_dir)
    seed_dir = run_dir / "methods" / method / f"seed-{seed}"
    rounds_path = seed_dir / "rounds.jsonl"
    if not rounds_path.exists():
        raise GovernanceError(f"{rounds_path} not found; run the experiment first")
    try:
        resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
        num_params = int(json.loads((seed_dir / "final.json").read_text())["num_params"])
    except (OSError, ValueError, KeyError, yaml.YAMLError) as err:
        raise GovernanceError(
            f"{run_dir}: cannot read the finished run ({err}); build governance from a "
            "complete run directory"
        ) from None
    resolved["governance"] = cfg.model_dump(mode="json")
    proc = _process(cfg, resolved, seed_dir, seed, method, num_params)
    try:
        for rec in read_rounds(rounds_path):
            if not rec.model_sha256:
                raise GovernanceError(
                    f"{rounds_path}: round {rec.round} has no model hash; it was written "
                    "by an older geofl, rerun the experiment"
                )
            append_jsonl(seed_dir / LOG_FILE, proc.round(rec))
    finally:
        _close(proc.ledger)
    return seed_dir


def _check(gov: GovernanceConfig, ctx: CheckContext) -> None:
    """Governed nodes must exist, validators must be governed, seats must be fillable."""
    exp = ctx.experiment
    k = int(exp["federation"]["num_clients"])
    nodes = gov.nodes if gov.nodes is not None else list(range(k))
    bad = sorted(n for n in nodes if not 0 <= n < k)
    if bad:
        ctx.fail("nodes", f"clients {bad} do not exist (K={k})")
    validators = gov.validators if gov.validators is not None else nodes
    outside = sorted(set(validators) - set(nodes))
    if outside:
        ctx.fail("validators", f"{outside} are not governed nodes {nodes}")
    if len(set(validators)) < gov.committee.size:
        ctx.fail(
            "committee.size",
            f"{gov.committee.size} seats but only {len(set(validators))} validators",
        )
    names = {m["name"] for m in exp["methods"]}
    unknown = sorted(set(gov.methods or []) - names)
    if unknown:
        ctx.fail("methods", f"unknown methods {unknown}")


@SUBSCRIBERS.register("governance", params=GovernanceConfig, check=_check, requires=("governance",))
def build_governance(gov: GovernanceConfig, *, experiment: Mapping[str, Any]) -> Subscriber:
    """The on-chain governance layer (000 §3.5) for the experiment's governed runs."""
    return GovernanceSubscriber(gov, experiment)
