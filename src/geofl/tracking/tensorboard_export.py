"""TensorBoard export: one event directory per (method, seed), one for the report.

``TRACKING_DIR/<method>/seed-<seed>/`` (default ``RUN_DIR/tensorboard``) holds the
resolved config as text (tag ``config``) and every round's scalars with the round as step,
tagged ``<split>/<metric>`` (``test/accuracy``, ``val/loss``, ``train/loss``,
``bytes/up``), then the final ones under ``final/``. ``TRACKING_DIR/report/`` holds the
report's figures as images. ``tensorboard --logdir RUN_DIR/tensorboard`` shows them.
Written with PyTorch's ``SummaryWriter`` (needs the ``tensorboard`` package).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from geofl.config.schema import TrackingConfig
from geofl.errors import ConfigError
from geofl.events import RunInfo
from geofl.records import RoundRecord
from geofl.tracking.params import final_metrics, round_metrics
from geofl.tracking.probe import check_writable_dir
from geofl.tracking.state import require

__all__ = ["TensorboardExport", "scalar_tag"]

#: Folder of the report's figures inside the TensorBoard directory.
REPORT_DIR = "report"


def scalar_tag(name: str) -> str:
    """The TensorBoard tag of a metric: its first ``_`` becomes a group separator
    (``test_accuracy`` → ``test/accuracy``); names without one stay as they are."""
    return name.replace("_", "/", 1)


class TensorboardExport:
    """Writes a geofl run as TensorBoard event files (see the module docstring).

    Args:
        cfg: The ``tracking`` section.
        resolved: The resolved experiment config (plain data).
        run_dir: The run directory.

    Raises:
        ConfigError: ``tensorboard`` (the ``tracking`` extra) is not installed.
    """

    def __init__(self, cfg: TrackingConfig, resolved: Mapping[str, Any], run_dir: Path) -> None:
        self._writer_cls = require("torch.utils.tensorboard", "tracking.tensorboard").SummaryWriter
        where = Path(cfg.tensorboard_dir) if cfg.tensorboard_dir else Path(run_dir) / "tensorboard"
        self.log_dir = where.resolve()  # absolute: tracking.json is read from any directory
        self.config_text = yaml.safe_dump(
            {k: v for k, v in resolved.items() if k != "tracking"},
            sort_keys=False,
            allow_unicode=True,
        )
        self._writer: Any = None

    def check(self) -> None:
        """Before round 1: files can be created in the log directory (the disk takes them).

        Raises:
            ConfigError: naming ``tracking.tensorboard_dir``, the directory and the cause.
        """
        problem = check_writable_dir(self.log_dir)
        if problem is not None:
            raise ConfigError(
                "tracking.tensorboard_dir",
                f"{self.log_dir} cannot be used: {problem}; choose a writable directory, "
                "or set tracking.tensorboard: false",
            )

    def start(self, info: RunInfo, earlier: Iterable[RoundRecord]) -> None:
        """Open the run's writer; a new directory gets the config and ``earlier`` rounds."""
        where = self.log_dir / info.method / f"seed-{info.seed}"
        new = not any(where.glob("events.out.tfevents.*"))
        self._writer = self._writer_cls(log_dir=str(where))
        if new:
            # Markdown code block: TensorBoard renders the text as Markdown.
            self._writer.add_text("config", "```yaml\n" + self.config_text + "```", 0)
            for record in earlier:
                self.round(record)

    def round(self, record: RoundRecord) -> None:
        """Write one round's scalars with the round as step."""
        if self._writer is not None:
            for name, value in round_metrics(record).items():
                self._writer.add_scalar(scalar_tag(name), value, record.round)

    def end(self, info: RunInfo, final: Mapping[str, Any]) -> None:
        """Write the final scalars (``final/…``) at the last round and close the writer."""
        if self._writer is None:
            return
        for name, value in final_metrics(final).items():
            self._writer.add_scalar(f"final/{name}", value, info.rounds)
        self._writer.close()
        self._writer = None

    def report(self, report_dir: Path, summary_text: str) -> None:
        """The report's PNGs as images and the summary as text, in ``report/``."""
        from PIL import Image

        writer = self._writer_cls(log_dir=str(self.log_dir / REPORT_DIR))
        try:
            writer.add_text("summary", summary_text, 0)
            for png in sorted(Path(report_dir).glob("*.png")):
                with Image.open(png) as im:
                    pixels = np.asarray(im.convert("RGB"))
                writer.add_image(png.stem, pixels, 0, dataformats="HWC")
        finally:
            writer.close()
