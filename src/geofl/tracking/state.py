"""``RUN_DIR/tracking.json``: where a run's tracker records are, so that a resumed run and
``geofl report`` add to the same MLflow runs and TensorBoard directory.

Content: ``{"mlflow": {"uri", "experiment_id", "parent", "runs": {"<method>/<seed>": id}},
"tensorboard": {"log_dir"}}`` (each section only when that tracker is on).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from geofl.errors import ConfigError
from geofl.io import write_json_atomic

__all__ = ["STATE_FILE", "read_state", "require", "update_state"]

STATE_FILE = "tracking.json"


def require(module: str, field: str) -> ModuleType:
    """Import an optional tracker library, or fail in one line naming ``field``.

    Raises:
        ConfigError: The library is not installed.
    """
    package = "tensorboard" if module == "torch.utils.tensorboard" else module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(
            field,
            f"needs {package}, which is not installed ({err}); install the extra with "
            f"pip install 'geofl[tracking]', or set {field}: false",
        ) from None


def read_state(run_dir: Path) -> dict[str, Any]:
    """The run's ``tracking.json`` (``{}`` when absent or unreadable)."""
    path = Path(run_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def update_state(run_dir: Path, section: str, values: dict[str, Any]) -> None:
    """Merge ``values`` into ``section`` of ``tracking.json`` (written atomically)."""
    state = read_state(run_dir)
    state[section] = {**(state.get(section) or {}), **values}
    write_json_atomic(Path(run_dir) / STATE_FILE, state)
