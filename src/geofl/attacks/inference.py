"""Passive attribute-inference attack of an honest-but-curious server (000 §4.4, Fig. 9).

Threat model: the server sees only what it legitimately receives — each client's released
(perturbed) update and the global models it produced — and wants to infer two sensitive
client attributes: (a) *high-risk* (the client's spatial risk level, 000 Eq. 3–4, is High)
and (b) *low-entropy* (its label distribution is concentrated). The engine records the
server's view as per-round update statistics (``observations.jsonl``,
:mod:`geofl.attacks.observe`); this analysis turns them into samples and trains a
scikit-learn classifier.

Protocol (no label leakage):
    * A sample is one client over a window of ``window`` consecutive rounds: the mean and
      standard deviation of each per-round statistic over the window.
    * Ground truth comes from the partition files (label histograms, per-client GSD) with
      the same risk map R the risk-aware release uses; *low-entropy* means the client's
      normalised label entropy is below the ``low_entropy_quantile`` of its seed's clients.
      Labels are used only to train and score the attacker, never as features.
    * Cross-validation never puts windows of one client in both train and test: with
      several seeds it is leave-one-seed-out (each seed has its own partition, so the
      held-out clients are unseen); with one seed it is GroupKFold over clients.
    * ROC-AUC is computed once over all out-of-fold scores (pooled); per-fold AUCs are
      reported next to it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.attacks.analyses import ANALYSES, Analysis
from geofl.io import read_jsonl, write_json_atomic
from geofl.privacy.risk import RiskParams, assess_risk, normalized_entropy
from geofl.registry import CheckContext

__all__ = ["AttributeInferenceParams", "attack_auc", "client_samples", "run_attribute_inference"]

Attribute = Literal["high_risk", "low_entropy"]
_ATTRIBUTES: tuple[Attribute, ...] = ("high_risk", "low_entropy")


class AttributeInferenceParams(BaseModel):
    """Parameters of the ``attribute_inference`` analysis."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    methods: list[str] | None = Field(
        None, description="methods to attack (default: every method with observations)"
    )
    window: int = Field(5, ge=1, description="rounds per sample")
    classifier: Literal["forest", "logistic"] = "forest"
    n_estimators: int = Field(300, ge=10, description="trees of the random forest")
    low_entropy_quantile: float = Field(0.5, gt=0.0, lt=1.0)
    risk: RiskParams = Field(default_factory=RiskParams, description="ground-truth risk map")
    random_state: int = 0
    paper: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="published values per method (high_risk, low_entropy AUC, best_test_accuracy)",
    )


def _client_labels(partition: dict[str, Any], params: AttributeInferenceParams) -> np.ndarray:
    """``[K, 2]`` bool ground truth (high_risk, low_entropy) from a partition file."""
    hists = np.asarray(partition["histograms"], dtype=np.float64)
    classes = partition["classes"]
    gsd = partition.get("gsd_m") or [None] * len(hists)
    high = [
        assess_risk(h, classes, gsd_m=g, params=params.risk).level == "high"
        for h, g in zip(hists, gsd, strict=True)
    ]
    ent = np.array([normalized_entropy(h) for h in hists])
    low = ent < np.quantile(ent, params.low_entropy_quantile)
    return np.stack([np.array(high), low], axis=1)


def client_samples(
    seed_dir: Path, params: AttributeInferenceParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windowed samples of one (method, seed) run.

    Returns:
        ``X [S, 2F]`` (window mean and std of each statistic), ``y [S, 2]`` bool
        (high_risk, low_entropy) and ``client [S]`` ids.
    """
    obs = read_jsonl(seed_dir / "observations.jsonl")
    partition = json.loads((seed_dir / "partition.json").read_text())
    labels = _client_labels(partition, params)
    per_client: dict[int, list[tuple[int, list[float]]]] = {}
    for o in obs:
        for c, f in zip(o["clients"], o["features"], strict=True):
            per_client.setdefault(int(c), []).append((int(o["round"]), f))
    xs, ys, cs = [], [], []
    for c, rows in sorted(per_client.items()):
        feats = np.asarray([f for _, f in sorted(rows)], dtype=np.float64)
        for start in range(0, len(feats) - params.window + 1, params.window):
            w = feats[start : start + params.window]
            xs.append(np.concatenate([w.mean(axis=0), w.std(axis=0)]))
            ys.append(labels[c])
            cs.append(c)
    if not xs:
        raise ValueError(f"{seed_dir}: fewer observed rounds than window={params.window}")
    return np.asarray(xs), np.asarray(ys, dtype=bool), np.asarray(cs)


def _classifier(params: AttributeInferenceParams) -> Any:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if params.classifier == "forest":
        return RandomForestClassifier(
            n_estimators=params.n_estimators,
            min_samples_leaf=2,
            random_state=params.random_state,
            n_jobs=1,
        )
    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))


def attack_auc(
    X: np.ndarray, y: np.ndarray, groups: np.ndarray, params: AttributeInferenceParams
) -> dict[str, Any]:
    """Out-of-fold ROC-AUC of the attacker, folds by ``groups`` (no group in two folds).

    Args:
        X: ``[S, F]`` features.
        y: ``[S]`` bool labels.
        groups: ``[S]`` fold groups (seed, or client when there is one seed).
        params: Classifier choice.

    Returns:
        ``auc`` (pooled; NaN if y has one class), ``fold_auc`` and sample counts.
    """
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

    uniq = np.unique(groups)
    splitter: Any = LeaveOneGroupOut() if len(uniq) <= 5 else GroupKFold(n_splits=min(5, len(uniq)))
    scores = np.full(len(y), np.nan)
    fold_auc: list[float | None] = []
    for train, test in splitter.split(X, y, groups):
        if len(np.unique(y[train])) < 2:
            scores[test] = float(y[train].mean())  # a constant guess: uninformative
        else:
            clf = _classifier(params).fit(X[train], y[train])
            scores[test] = clf.predict_proba(X[test])[:, 1]
        both = len(np.unique(y[test])) == 2
        fold_auc.append(float(roc_auc_score(y[test], scores[test])) if both else None)
    pooled = float(roc_auc_score(y, scores)) if len(np.unique(y)) == 2 else math.nan
    return {
        "auc": pooled,
        "fold_auc": fold_auc,
        "n_samples": len(y),
        "positive_fraction": float(y.mean()),
    }


def _run_risk_map(run_dir: Path, params: AttributeInferenceParams) -> AttributeInferenceParams:
    """Use the run's own ``risk_aware`` map R for the ground truth, when it has one."""
    import yaml

    cfg_path = run_dir / "config.yaml"
    if not cfg_path.exists():
        return params
    cfg = yaml.safe_load(cfg_path.read_text()) or {}
    maps = {
        json.dumps(step.get("risk", {}), sort_keys=True)
        for m in cfg.get("methods", [])
        for step in m.get("release", [])
        if step.get("name") == "risk_aware"
    }
    if not maps:
        return params
    if len(maps) > 1:
        raise ValueError(
            f"{cfg_path}: the risk_aware steps use different risk maps; the attack's ground "
            "truth needs one — give every risk_aware step the same risk parameters"
        )
    risk = RiskParams.model_validate(json.loads(maps.pop()))
    return params.model_copy(update={"risk": risk})


def run_attribute_inference(run_dir: Path, params: AttributeInferenceParams) -> dict[str, Any]:
    """Attack every observed method of ``run_dir``; writes ``analysis/attribute_inference.json``.

    The high-risk ground truth uses the run's ``risk_aware`` risk map when the run has one
    (so labels match the levels the clients used), else ``params.risk``.
    """
    run_dir = Path(run_dir)
    params = _run_risk_map(run_dir, params)
    methods_dir = run_dir / "methods"
    names = params.methods or sorted(
        p.name for p in methods_dir.iterdir() if any(p.glob("*/observations.jsonl"))
    )
    result: dict[str, Any] = {
        "protocol": (
            f"samples = client × {params.window}-round windows of update statistics; "
            "leave-one-seed-out CV (GroupKFold over clients for a single seed); pooled "
            f"out-of-fold ROC-AUC; classifier {params.classifier}"
        ),
        "methods": {},
        "paper": params.paper,
    }
    for name in names:
        seed_dirs = sorted(
            (p for p in (methods_dir / name).iterdir() if (p / "observations.jsonl").exists()),
            key=lambda p: p.name,
        )
        if not seed_dirs:
            raise ValueError(
                f"method {name!r} has no observations.jsonl; run it with eval.observe_updates: true"
            )
        parts = [client_samples(d, params) for d in seed_dirs]
        X = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        if len(seed_dirs) > 1:
            groups = np.concatenate([np.full(len(p[2]), i) for i, p in enumerate(parts)])
        else:
            groups = parts[0][2]
        entry: dict[str, Any] = {
            "seeds": [d.name for d in seed_dirs],
            "n_clients": int(sum(len(np.unique(p[2])) for p in parts)),
        }
        for j, attr in enumerate(_ATTRIBUTES):
            entry[attr] = attack_auc(X, y[:, j], groups, params)
        best = []
        for d in seed_dirs:
            final = d / "final.json"
            if final.exists():
                bv = json.loads(final.read_text()).get("best_val")
                if bv:
                    best.append(float(bv["test"]["accuracy"]))
        entry["best_val_test_accuracy"] = float(np.mean(best)) if best else None
        result["methods"][name] = entry
    write_json_atomic(run_dir / "analysis" / "attribute_inference.json", result)
    return result


class _AttributeInference:
    name = "attribute_inference"

    def __init__(self, params: AttributeInferenceParams) -> None:
        self.params = params

    def __call__(self, run_dir: Path) -> dict[str, Any]:
        return run_attribute_inference(run_dir, self.params)


def _check(params: AttributeInferenceParams, ctx: CheckContext) -> None:
    """The attack needs the server's recorded view and enough rounds for one window."""
    exp = ctx.experiment
    if not (exp.get("eval") or {}).get("observe_updates"):
        ctx.fail("", "attribute_inference needs eval.observe_updates: true (the server's view)")
    names = sorted(m["name"] for m in exp["methods"])
    unknown = sorted(set(params.methods or []) - set(names))
    if unknown:
        ctx.fail("methods", f"unknown methods {unknown}; choose from {names}")
    rounds = int(exp["federation"]["rounds"])
    if params.window > rounds:
        ctx.fail("window", f"window={params.window} exceeds federation.rounds={rounds}; lower it")


@ANALYSES.register("attribute_inference", params=AttributeInferenceParams, check=_check)
def build_attribute_inference(params: AttributeInferenceParams) -> Analysis:
    """Passive attribute inference (high-risk, low-entropy clients) from update statistics."""
    return _AttributeInference(params)
