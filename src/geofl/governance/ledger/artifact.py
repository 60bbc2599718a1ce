"""The compiled governance contract shipped with the package, and its compiler.

``contracts/Governance.vy`` is the source; ``contracts/Governance.json`` holds its ABI and
bytecode, compiled with the pinned vyper. Loading checks that the artifact was built from
the shipped source (SHA-256), so an edited contract without a recompile is caught.
Regenerate with::

    .venv/bin/python -c "from geofl.governance.ledger.artifact import write_artifact as w; w()"
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from geofl.errors import LedgerError
from geofl.io import write_text_atomic

__all__ = [
    "ARTIFACT_PATH",
    "SOURCE_PATH",
    "Artifact",
    "compile_artifact",
    "load_artifact",
    "write_artifact",
]

CONTRACT_DIR = Path(__file__).resolve().parent.parent / "contracts"
SOURCE_PATH = CONTRACT_DIR / "Governance.vy"
ARTIFACT_PATH = CONTRACT_DIR / "Governance.json"


@dataclass(frozen=True)
class Artifact:
    """ABI and creation bytecode of the governance contract.

    Attributes:
        abi: Contract ABI (list of JSON entries).
        bytecode: Creation bytecode (constructor arguments are appended to it).
        compiler: Compiler and version that produced it, e.g. ``"vyper 0.4.3"``.
        source_sha256: SHA-256 hex of the source it was compiled from.
    """

    abi: list[dict[str, Any]]
    bytecode: bytes
    compiler: str
    source_sha256: str


def _source_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compile_artifact(source: Path = SOURCE_PATH) -> dict[str, Any]:
    """Compile ``source`` with the installed vyper into the artifact's JSON object.

    Raises:
        LedgerError: if vyper is not installed.
    """
    try:
        import vyper
        from vyper.compiler import compile_code
    except ImportError as err:  # pragma: no cover - vyper is a dependency
        raise LedgerError(f"compiling {source.name} needs vyper: pip install vyper") from err
    out = compile_code(source.read_text(encoding="utf-8"), output_formats=["abi", "bytecode"])
    return {
        "contract": source.stem,
        "compiler": f"vyper {vyper.__version__}",
        "source_sha256": _source_sha256(source),
        "abi": out["abi"],
        "bytecode": out["bytecode"],
    }


def write_artifact(path: Path = ARTIFACT_PATH, source: Path = SOURCE_PATH) -> None:
    """Compile ``source`` and write the artifact to ``path`` atomically."""
    data = json.dumps(compile_artifact(source), indent=1, sort_keys=True) + "\n"
    write_text_atomic(path, data)


@lru_cache(maxsize=1)
def load_artifact() -> Artifact:
    """The shipped artifact, checked against the shipped source.

    Raises:
        LedgerError: if the artifact is missing or was compiled from another source.
    """
    try:
        data = json.loads(ARTIFACT_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise LedgerError(f"cannot read the contract artifact {ARTIFACT_PATH}: {err}") from None
    if SOURCE_PATH.exists() and data["source_sha256"] != _source_sha256(SOURCE_PATH):
        raise LedgerError(
            f"{ARTIFACT_PATH.name} was not compiled from the shipped {SOURCE_PATH.name}; "
            "regenerate it with geofl.governance.ledger.artifact.write_artifact()"
        )
    return Artifact(
        abi=data["abi"],
        bytecode=bytes.fromhex(data["bytecode"].removeprefix("0x")),
        compiler=data["compiler"],
        source_sha256=data["source_sha256"],
    )
