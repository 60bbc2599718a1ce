"""Fuzzing the decode-once cache key: every change to what decoding reads is a new key.

Hypothesis writes small class-folder trees in EuroSAT's layout (file bytes are never
decoded here, only scanned), applies one random edit that the old fingerprint (file count,
total bytes, newest mtime) could not see — an image moved to another class folder with its
mtime, two files exchanging sizes, an older file touched, a file renamed — and checks that
:func:`~geofl.data.readers.folderscan.scan_folder`'s ``manifest`` changes, while rescanning an
unchanged tree (written in another order, with hostile but legal file names) keeps it. The
digest helpers are checked on random rows and arrays: distinct inputs, distinct digests.

The runs are derandomized (the same examples in CI every time) and take a few seconds.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from geofl.data.readers.eurosat import EUROSAT_RGB_SPEC
from geofl.data.readers.folderscan import scan_folder
from geofl.data.storage.cache import array_digest, file_manifest, manifest_digest

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
CLASSES = EUROSAT_RGB_SPEC.classes
#: Legal file names a dataset could hold: spaces, quotes, commas, brackets, non-ASCII.
STEMS = st.text(
    alphabet=st.sampled_from(list("ab_-. ,'\"[]{}é漢0")), min_size=1, max_size=8
).filter(lambda s: not s.startswith(".") and s.strip() == s)

#: One file: (class index, stem, size in bytes, mtime in whole seconds).
File = tuple[int, str, int, int]
FILES = st.lists(
    st.tuples(
        st.integers(0, len(CLASSES) - 1),
        STEMS,
        st.integers(1, 40),
        st.integers(1_600_000_000, 1_600_000_100),
    ),
    min_size=2,
    max_size=8,
    unique_by=lambda f: (f[0], f[1]),
)
EDITS = ("move", "sizes", "touch", "rename")


def _write(root: Path, files: list[File]) -> Path:
    for cls, stem, size, mtime in files:
        path = root / "2750" / CLASSES[cls] / f"{stem}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (mtime, mtime))
    return root


def _edit(files: list[File], edit: str, k: int) -> list[File] | None:
    """``files`` after ``edit`` of file ``k`` (count, total bytes and newest mtime kept),
    or None when this edit cannot be applied to these files."""
    out = list(files)
    cls, stem, size, mtime = out[k]
    other = out[(k + 1) % len(out)]
    if edit == "move":
        target = (cls + 1) % len(CLASSES)
        if any(f[0] == target and f[1] == stem for f in out):
            return None
        out[k] = (target, stem, size, mtime)
    elif edit == "sizes":
        if other[2] == size:
            return None
        out[k] = (cls, stem, other[2], mtime)
        out[(k + 1) % len(out)] = (*other[:2], size, other[3])
    elif edit == "touch":
        if mtime == max(f[3] for f in out):
            return None
        out[k] = (cls, stem, size, mtime - 1)
    else:
        new = stem + "z"
        if any(f[0] == cls and f[1] == new for f in out):
            return None
        out[k] = (cls, new, size, mtime)
    return out


def _fingerprint(files: list[File]) -> dict[str, int | str]:
    with tempfile.TemporaryDirectory() as tmp:
        return scan_folder(EUROSAT_RGB_SPEC, _write(Path(tmp), files)).fingerprint


@FUZZ
@given(files=FILES, edit=st.sampled_from(EDITS), pick=st.integers(0, 7))
def test_every_edit_changes_the_manifest(files: list[File], edit: str, pick: int) -> None:
    edited = _edit(files, edit, pick % len(files))
    assume(edited is not None)
    assert edited is not None
    before, after = _fingerprint(files), _fingerprint(edited)
    note(f"{edit}: {files} -> {edited}")
    old_fields = ("files", "bytes", "mtime_ns")  # the whole key before issue 31, item 12
    assert [before[k] for k in old_fields] == [after[k] for k in old_fields]
    assert before["manifest"] != after["manifest"]


@FUZZ
@given(files=FILES)
def test_an_unchanged_tree_keeps_its_manifest(files: list[File]) -> None:
    """Written in another order (another ``scandir`` order): the same key."""
    assert _fingerprint(files) == _fingerprint(files[::-1])


TEXT = st.text(alphabet=st.sampled_from(list('a/," \\[]\n漢')), max_size=5)
ROWS = st.lists(
    st.tuples(TEXT, st.integers(-1, 3), st.integers(-1, 3) | TEXT),
    max_size=4,
)


@FUZZ
@given(a=ROWS, b=ROWS)
def test_distinct_manifests_have_distinct_digests(
    a: list[tuple[str, int, int | str]], b: list[tuple[str, int, int | str]]
) -> None:
    assert (manifest_digest(a) == manifest_digest(b)) == (a == b)


ARRAYS = st.lists(
    st.tuples(
        st.sampled_from(["<f4", "<f8", "<i8"]),
        st.lists(st.integers(0, 3), min_size=1, max_size=3),
        st.integers(0, 2**16),
    ),
    max_size=3,
)


def _arrays(spec: list[tuple[str, list[int], int]]) -> list[np.ndarray]:
    out = []
    for dtype, shape, seed in spec:
        values = np.random.default_rng(seed).integers(0, 3, size=shape)
        out.append(values.astype(np.dtype(dtype)))
    return out


@FUZZ
@given(a=ARRAYS, b=ARRAYS)
def test_distinct_arrays_have_distinct_digests(
    a: list[tuple[str, list[int], int]], b: list[tuple[str, list[int], int]]
) -> None:
    xa, xb = _arrays(a), _arrays(b)
    same = len(xa) == len(xb) and all(
        u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)
        for u, v in zip(xa, xb, strict=True)
    )
    assert (array_digest(xa) == array_digest(xb)) == same


@FUZZ
@given(stems=st.lists(STEMS, min_size=1, max_size=5, unique=True))
def test_file_manifest_names_files_relative_to_the_root(stems: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data set, 漢"
        paths = [root / "Forest" / f"{s}.jpg" for s in stems]
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(p.stem.encode())
        rows = file_manifest(paths, root=root)
        assert [r[0] for r in rows] == [f"Forest/{s}.jpg" for s in stems]
        assert [r[1] for r in rows] == [len(s.encode()) for s in stems]
        moved = Path(tmp) / "elsewhere"
        root.rename(moved)
        again = file_manifest([moved / "Forest" / f"{s}.jpg" for s in stems], root=moved)
        assert [r[:2] for r in again] == [r[:2] for r in rows]  # a moved copy: same names
