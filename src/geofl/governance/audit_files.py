"""Audit of a governed run's rule document, ``config.yaml`` and model files (000 §3.5.1, §4.7).

``governance.rule.json`` and ``config.yaml`` match the committed rule; ``checkpoint.pt``
exists and holds the model committed for the last round; ``best.pt`` exists and holds the
model committed for the best-validation round (``final.json``); a file holding another
round's committed model is reported as swapped or stale.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

from geofl.errors import RunDirError
from geofl.governance.audit_chain import ChainRecords, Finding, LedgerRun
from geofl.governance.audit_read import (
    BEST_FILE,
    CHECKPOINT_FILE,
    CONFIG_FILE,
    FINAL_FILE,
    _read,
    _short,
    _why,
)
from geofl.governance.ledger import hash_json
from geofl.governance.subscriber import LEDGER_DIR, RULE_FILE
from geofl.hashing import params_sha256

__all__ = ["audit_files"]


def _strip(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k != "governance"}


def _check_rule(run: LedgerRun, chain: ChainRecords, run_dir: Path) -> Iterator[Finding]:
    if not chain.rules:
        yield Finding(LEDGER_DIR, "no rule record on chain")
        return
    rule = chain.rules[0]
    raw = _read(run.seed_dir / RULE_FILE)
    try:
        rule_doc = json.loads(raw if raw is not None else b"")
    except ValueError as err:
        state = "missing" if raw is None else f"damaged ({_why(err)})"
        yield Finding(RULE_FILE, f"{state}; rule {rule.label} unverifiable")
        return
    if hash_json(rule_doc) != rule.rule_hash:
        yield Finding(RULE_FILE, f"does not match rule record {rule.index} ({rule.label})")
    raw_cfg = _read(Path(run_dir) / CONFIG_FILE)
    if raw_cfg is None:
        yield Finding(CONFIG_FILE, f"missing; rule {rule.label} unverifiable")
        return
    try:
        config = yaml.safe_load(raw_cfg.decode("utf-8"))
    except (ValueError, yaml.YAMLError) as err:
        yield Finding(CONFIG_FILE, f"damaged ({_why(err)})")
        return
    doc_cfg = rule_doc.get("config") if isinstance(rule_doc, dict) else None
    if not isinstance(config, dict) or _strip(doc_cfg or {}) != _strip(config):
        yield Finding(CONFIG_FILE, f"differs from the committed rule ({rule.label})")


def _load_model(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A model file's content and the hash of its parameters, or ``None`` and why not.

    Loads with ``weights_only`` (plain containers and tensors), so a crafted pickle in an
    audited directory cannot run code.

    Raises:
        RunDirError: if it exists but cannot be read.
    """
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        digest = "0x" + params_sha256(ckpt["params"])
        ckpt["round"] = int(ckpt["round"])
        return ckpt, digest
    except FileNotFoundError:
        return None, "missing"
    except (PermissionError, IsADirectoryError) as err:
        raise RunDirError(f"{path}: cannot be read ({err.strerror or err})") from None
    except Exception as err:  # a flipped byte can break the archive or the pickle itself
        return None, f"cannot be read ({_why(err)})"


def _holds(digest: str, chain: ChainRecords) -> list[int]:
    return [a.round_id for a in chain.aggregations if a.model_hash == digest]


def _check_model_file(
    name: str,
    ckpt: dict[str, Any],
    digest: str,
    r: int,
    why: str,
    chain: ChainRecords,
    layout: str,
) -> Iterator[Finding]:
    """``name`` must hold round ``r``'s committed model; ``layout`` names a wrong layout."""
    want = chain.by_round[r]
    note = f"; it has {layout}'s layout" if layout else ""
    if digest == want.model_hash:
        if ckpt["round"] != r:
            what = f"says round {ckpt['round']}; it must hold round {r} ({why})"
            yield Finding(name, what, r)
        elif layout:
            yield Finding(name, f"holds round {r}'s committed model but has the layout of {layout}")
        return
    others = _holds(digest, chain)
    if others:
        rs = ", ".join(str(o) for o in others)
        yield Finding(
            name,
            f"holds the model committed for round {rs}, not round {r}'s ({why}{note}): "
            "swapped or stale",
            r,
        )
    else:
        yield Finding(
            name,
            f"model hash {_short(digest)} matches no committed round; round {r} ({why}{note}) "
            f"commits {_short(want.model_hash)}",
            r,
        )


def _best_round(run: LedgerRun, ckpt: dict[str, Any] | None) -> tuple[list[Finding], int | None]:
    """The best-validation round: from ``final.json``, else from the checkpoint's record."""
    raw = _read(run.seed_dir / FINAL_FILE)
    from_final: int | None = None
    if raw is not None:
        try:
            best = json.loads(raw)["best_val"]
            from_final = None if best is None else int(best["round"])
        except (ValueError, KeyError, TypeError) as err:
            return [Finding(FINAL_FILE, f"damaged ({_why(err)}); best.pt's round unknown")], None
    from_ckpt: int | None = None
    if ckpt is not None and isinstance(ckpt.get("best"), dict):
        try:
            from_ckpt = int(ckpt["best"]["round"])
        except (KeyError, TypeError, ValueError) as err:
            return [Finding(CHECKPOINT_FILE, f"damaged best-round record ({_why(err)})")], None
    if from_final is not None and from_ckpt is not None and from_final != from_ckpt:
        what = f"best-validation round {from_final} differs from {CHECKPOINT_FILE}'s {from_ckpt}"
        return [Finding(FINAL_FILE, what)], None
    return [], from_final if from_final is not None else from_ckpt


def audit_files(run: LedgerRun, chain: ChainRecords, run_dir: Path) -> list[Finding]:
    """The rule document, ``config.yaml`` and the model files against the chain.

    Raises:
        RunDirError: if one of them exists but cannot be read.
    """
    out = list(_check_rule(run, chain, run_dir))
    last = chain.last_round
    if last is None:
        return out
    sd = run.seed_dir
    ckpt, digest = _load_model(sd / CHECKPOINT_FILE)
    if ckpt is None:
        what = f"{digest}; it must hold round {last.round_id}'s committed model"
        out.append(Finding(CHECKPOINT_FILE, f"{what} {_short(last.model_hash)}", last.round_id))
    else:
        layout = "" if "format" in ckpt else BEST_FILE
        why = "the last committed round"
        out += _check_model_file(CHECKPOINT_FILE, ckpt, digest, last.round_id, why, chain, layout)
    trusted = ckpt is not None and digest == last.model_hash and "format" in ckpt
    found, best_r = _best_round(run, ckpt if trusted else None)
    out += found
    if best_r is not None and best_r not in chain.by_round:
        out.append(Finding(FINAL_FILE, f"best-validation round {best_r} is not committed on chain"))
        best_r = None
    best, best_digest = _load_model(sd / BEST_FILE)
    if best is None:
        if best_r is not None or best_digest != "missing":
            want = (
                f"round {best_r}'s committed model {_short(chain.by_round[best_r].model_hash)}"
                if best_r is not None
                else "a committed model"
            )
            out.append(Finding(BEST_FILE, f"{best_digest}; it must hold {want}", best_r))
    elif best_r is None:  # the best round is unknown: it must hold some committed model
        if not _holds(best_digest, chain):
            what = f"model hash {_short(best_digest)} matches no committed round"
            out.append(Finding(BEST_FILE, what))
    else:
        layout = CHECKPOINT_FILE if "format" in best else ""
        why = "the best-validation round"
        out += _check_model_file(BEST_FILE, best, best_digest, best_r, why, chain, layout)
    return out
