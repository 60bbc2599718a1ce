"""Writing helpers shared by the fixture generators in ``tests/data/<name>/data.py``.

Each generator defines *what* its dataset looks like on disk (paths and encoded bytes);
these functions only write a file tree, a zip with the same members, and the small CLI.
"""

from __future__ import annotations

import argparse
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["fixture_cli", "write_tree", "write_zip"]


def write_tree(root: Path, files: Mapping[str, bytes]) -> Path:
    """Write ``root/<relative path>`` for every entry of ``files``; returns ``root``."""
    for rel, data in files.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return Path(root)


def write_zip(path: Path, files: Mapping[str, bytes]) -> Path:
    """Write a zip at ``path`` whose members are ``files``; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
    return path


def fixture_cli(
    doc: str, make_fixture: Callable[[Path, int], Path], make_zip: Callable[[Path, int], Path]
) -> None:
    """``OUT_DIR [--seed N]``: write the extracted fixture and its zip under OUT_DIR."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(make_fixture(args.out, args.seed), make_zip(args.out, args.seed))
