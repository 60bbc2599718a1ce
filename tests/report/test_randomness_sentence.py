"""The report states where the accounted noise came from (``privacy.randomness``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from geofl.report.privacy import randomness_sentence


def _run(*finals: dict[str, Any] | None) -> Any:
    seeds = {i: SimpleNamespace(final=f) for i, f in enumerate(finals)}
    return SimpleNamespace(methods={"m": seeds})


def test_randomness_sentence_names_each_mode() -> None:
    assert randomness_sentence(_run({"final": {}}, None)) is None  # nothing private
    old = randomness_sentence(_run({"privacy": {"epsilon_max": 1.0}}))  # before the field
    assert old is not None and old.startswith("Randomness (privacy.randomness): seeded — ")
    assert "can regenerate and remove the noise" in old
    both = randomness_sentence(
        _run({"privacy": {"randomness": "seeded"}}, {"server_privacy": {"randomness": "secure"}})
    )
    assert both is not None and ": secure — " in both and "; seeded — " in both
