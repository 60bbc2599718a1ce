"""Audit queries over a run directory's governance ledgers (000 §3.5.1 audit node, §4.7).

Everything here reads: the stored ledger is replayed read-only (which already checks every
block hash), then its records are compared with what the run directory says — the rule
document against ``config.yaml``, every aggregation commitment against ``rounds.jsonl``,
and the model hashes of ``checkpoint.pt`` and ``best.pt`` against the commitments of their
rounds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from geofl.errors import GovernanceError, LedgerError
from geofl.governance.ledger import EmbeddedLedger, Ledger, RpcLedger, hash_json
from geofl.governance.subscriber import LEDGER_DIR, LOG_FILE, RULE_FILE
from geofl.hashing import params_sha256
from geofl.io import read_jsonl

__all__ = ["LedgerRun", "find_ledgers", "governance_log", "open_readonly", "verify_run"]


@dataclass(frozen=True)
class LedgerRun:
    """One governed (method, seed) run."""

    method: str
    seed: int
    seed_dir: Path

    @property
    def name(self) -> str:
        """``method/seed-N``."""
        return f"{self.method}/seed-{self.seed}"


def find_ledgers(
    run_dir: Path, method: str | None = None, seed: int | None = None
) -> list[LedgerRun]:
    """The governed runs of ``run_dir`` (optionally one method and/or seed).

    Raises:
        GovernanceError: if nothing matches.
    """
    run_dir = Path(run_dir)
    out = []
    for led in sorted((run_dir / "methods").glob(f"*/seed-*/{LEDGER_DIR}")):
        sd = led.parent
        m, s = sd.parent.name, int(sd.name.removeprefix("seed-"))
        if (method is None or m == method) and (seed is None or s == seed):
            out.append(LedgerRun(m, s, sd))
    if not out:
        what = " ".join(x for x in (method and f"method {method}", seed and f"seed {seed}") if x)
        raise GovernanceError(
            f"{run_dir}: no governance ledger{' for ' + what if what else ''}; run with a "
            "governance section or build one with `geofl ledger build`"
        )
    return out


def open_readonly(run: LedgerRun) -> Ledger:
    """Reopen a run's ledger for reading (an embedded one is replayed and checked)."""
    path = run.seed_dir / LEDGER_DIR
    rpc = path / "rpc.json"
    if rpc.exists():
        info = json.loads(rpc.read_text())
        return RpcLedger.attach(info["url"], info["address"], seed=info["seed"])
    return EmbeddedLedger.open(path, read_only=True)


def governance_log(run: LedgerRun) -> list[dict[str, Any]]:
    """The round entries of ``governance.jsonl`` (the rule entry left out)."""
    return [e for e in read_jsonl(run.seed_dir / LOG_FILE) if "round" in e]


def _strip(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k != "governance"}


def _checks(run: LedgerRun, ledger: Ledger, run_dir: Path) -> Iterator[str]:
    sd = run.seed_dir
    rule = ledger.rule(1)
    try:
        rule_doc = json.loads((sd / RULE_FILE).read_text())
    except (OSError, ValueError) as err:
        yield f"{run.name}: {RULE_FILE} cannot be read ({err}); rule {rule.label} unverifiable"
        return
    if hash_json(rule_doc) != rule.rule_hash:
        yield f"{run.name}: rule record 1 ({rule.label}) does not match {RULE_FILE}"
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError) as err:
        yield f"{run.name}: config.yaml cannot be read ({err})"
        return
    if _strip(rule_doc.get("config", {})) != _strip(config or {}):
        yield f"{run.name}: config.yaml differs from the committed rule ({rule.label})"
    by_round: dict[int, tuple[str, str]] = {}
    for rec in read_jsonl(sd / "rounds.jsonl"):
        r = int(rec["round"])
        agg = ledger.aggregation(r)
        if agg is None:
            yield f"{run.name}: round {r} has no aggregation record on the ledger"
            continue
        by_round[r] = (agg.model_hash, agg.update_set_hash)
        if (agg.model_hash, agg.update_set_hash) != (
            "0x" + str(rec.get("model_sha256")),
            "0x" + str(rec.get("update_set_sha256")),
        ):
            yield f"{run.name}: aggregation record of round {r} does not match rounds.jsonl"
    for name in ("checkpoint.pt", "best.pt"):
        path = sd / name
        if not path.exists():
            continue
        try:
            ckpt = torch.load(path, weights_only=False)
            r, digest = int(ckpt["round"]), "0x" + params_sha256(ckpt["params"])
        except Exception as err:  # a flipped byte can break the pickle itself
            yield f"{run.name}: {name} cannot be read ({type(err).__name__}: {err})"
            continue
        if by_round.get(r, ("",))[0] != digest:
            yield f"{run.name}: {name} (round {r}) does not match aggregation record of round {r}"


def verify_run(
    run_dir: Path, method: str | None = None, seed: int | None = None
) -> tuple[list[str], list[str]]:
    """Verify every governed run; returns (what was checked, problems found)."""
    checked: list[str] = []
    problems: list[str] = []
    for run in find_ledgers(run_dir, method, seed):
        try:
            ledger = open_readonly(run)
        except LedgerError as err:
            problems.append(f"{run.name}: {err}")
            continue
        try:
            found = list(_checks(run, ledger, Path(run_dir)))
        finally:
            ledger.close()
        problems += found
        if not found:
            checked.append(run.name)
    return checked, problems
