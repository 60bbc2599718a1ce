"""Reading the CSV tables of the agricultural readers, with one-line errors naming the file,
the line and the column."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from geofl.errors import DataError

__all__ = ["CsvTable", "read_csv"]


class CsvTable:
    """Columns of a CSV file as strings, with the file's path for messages.

    Args:
        path: The file.
        header: Column names.
        rows: Cell strings per row (``len(header)`` each).
    """

    def __init__(self, path: Path, header: list[str], rows: list[list[str]]) -> None:
        self.path = path
        self._col = {name: i for i, name in enumerate(header)}
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def text(self, name: str) -> np.ndarray:
        """``[n]`` the column's stripped strings."""
        i = self._col[name]
        return np.array([r[i].strip() for r in self._rows], dtype=object)

    def numbers(self, name: str, *, allow_empty: bool = False) -> np.ndarray:
        """``[n]`` float64 values of a numeric column (NaN for empty cells if allowed).

        Raises:
            DataError: ``<file> line <n>: column '<name>' value '<v>' is not a number``.
        """
        i = self._col[name]
        out = np.empty(len(self._rows))
        for k, row in enumerate(self._rows):
            cell = row[i].strip()
            if cell == "" and allow_empty:
                out[k] = np.nan
                continue
            try:
                out[k] = float(cell)
            except ValueError:
                raise DataError(
                    f"{self.path} line {k + 2}: column {name!r} value {cell!r} is not a number"
                ) from None
            if not np.isfinite(out[k]):
                raise DataError(f"{self.path} line {k + 2}: column {name!r} is not finite")
        return out


def read_csv(path: Path, required: Sequence[str], what: str) -> CsvTable:
    """Read a comma-separated file with a header row.

    Args:
        path: The file.
        required: Columns that must be present (others are ignored).
        what: What the file is, for messages ("SSURGO soil table").

    Raises:
        DataError: naming the file when it is missing, empty, ragged or lacks a column.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} {path} does not exist")
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            lines = list(csv.reader(fh))
    except (UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{path}: not a readable CSV file ({err})") from err
    lines = [r for r in lines if any(c.strip() for c in r)]
    if not lines:
        raise DataError(f"{path}: empty {what}, expected a header row with {list(required)}")
    header = [h.strip() for h in lines[0]]
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(
            f"{path}: {what} lacks column {missing[0]!r}; required columns: {list(required)}"
        )
    for k, row in enumerate(lines[1:]):
        if len(row) != len(header):
            raise DataError(f"{path} line {k + 2}: {len(row)} fields, the header has {len(header)}")
    return CsvTable(path, header, lines[1:])
