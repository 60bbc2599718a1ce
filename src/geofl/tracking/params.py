"""Records of a run as tracker inputs: flattened params and per-round scalar metrics.

Both trackers take flat ``name -> scalar`` maps: the resolved config becomes dotted keys
(``federation.num_clients``), a round record the finite scalars it holds, named
``<split>_<metric>`` (``test_accuracy``, ``val_loss``, ``train_loss``, ``bytes_up``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from geofl.records import RoundRecord

__all__ = ["MAX_PARAM_CHARS", "final_metrics", "flatten", "method_params", "round_metrics"]

#: Longest param value MLflow stores (its ``MAX_PARAM_VAL_LENGTH``); longer ones are cut.
MAX_PARAM_CHARS = 6000


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted keys of a nested mapping with values as text.

    Lists of scalars stay one value (``seeds: "[1, 2]"``); lists holding mappings are
    indexed (``methods.0.name``). ``None`` becomes ``"null"``.

    Example:
        >>> flatten({"a": {"b": 1, "c": [1, 2]}, "m": [{"n": "x"}], "z": None})
        {'a.b': '1', 'a.c': '[1, 2]', 'm.0.n': 'x', 'z': 'null'}
    """
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list) and any(isinstance(v, Mapping) for v in value):
            out.update(flatten({str(i): v for i, v in enumerate(value)}, f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            out[name] = text[:MAX_PARAM_CHARS]
    return out


def method_params(resolved: Mapping[str, Any], method: str, seed: int) -> dict[str, str]:
    """Params of one (method, seed) run: the config with ``methods`` replaced by this
    method's entry (``method.*``), plus ``seed``."""
    rest = {k: v for k, v in resolved.items() if k not in ("methods", "seeds")}
    methods: list[Mapping[str, Any]] = list(resolved.get("methods") or [])
    entry: Mapping[str, Any] = next((m for m in methods if m.get("name") == method), {})
    return {**flatten(rest), **flatten({"method": entry}), "seed": str(seed)}


def _finite(value: Any) -> TypeGuard[float]:
    """A real number that is finite (not a bool, None or NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def round_metrics(record: RoundRecord) -> dict[str, float]:
    """The finite scalar metrics of one round.

    ``val_*`` and ``test_*`` (evaluated rounds only), ``train_loss`` and ``train_<metric>``
    (the round's local batches), ``bytes_up``/``bytes_down``, ``participants``,
    ``rejected`` and ``time_s`` (the round's wall time).
    """
    out: dict[str, float] = {}
    for split in ("val", "test"):
        metrics = getattr(record, split)
        if metrics is not None:
            out.update((f"{split}_{k}", float(v)) for k, v in metrics.values.items() if _finite(v))
    out.update((f"train_{k}", float(v)) for k, v in record.train_metrics.items() if _finite(v))
    scalars = {
        "train_loss": record.train_loss,
        "bytes_up": record.bytes_up,
        "bytes_down": record.bytes_down,
        "participants": len(record.participants),
        "rejected": len(record.rejected),
        "time_s": record.time_s.get("total"),
    }
    out.update((k, float(v)) for k, v in scalars.items() if _finite(v))
    return out


def final_metrics(final: Mapping[str, Any]) -> dict[str, float]:
    """The finite scalars of ``final.json``: ``final_<split>_<metric>``,
    ``best_val_test_<metric>``, ``best_val_round``, ``epsilon_max`` and ``wall_s``."""
    out: dict[str, float] = {}
    for split, metrics in (final.get("final") or {}).items():
        if isinstance(metrics, Mapping):
            out.update((f"final_{split}_{k}", float(v)) for k, v in metrics.items() if _finite(v))
    best = final.get("best_val") or {}
    out.update(
        (f"best_val_test_{k}", float(v)) for k, v in (best.get("test") or {}).items() if _finite(v)
    )
    extra = {
        "best_val_round": best.get("round"),
        "epsilon_max": (final.get("privacy") or {}).get("epsilon_max"),
        "wall_s": final.get("wall_s"),
    }
    out.update((k, float(v)) for k, v in extra.items() if _finite(v))
    out.pop("final_test_n", None)
    out.pop("final_val_n", None)
    out.pop("best_val_test_n", None)
    return out
