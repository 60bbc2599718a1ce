"""Checks that a tracker can be written before round 1, and how a failure reads.

A tracker that fails late fails slowly and loudly: MLflow retries an unreachable server
with exponential backoff for minutes (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, default 7), and
retries creating a SQLite store it cannot write for about two minutes (a fixed retry loop
in ``create_sqlalchemy_engine_with_retry``). So the run checks each enabled tracker first —
the URI scheme, a SQLite file's directory, a log directory — and contacts the server with
no retry and a short timeout (:func:`fast_http`: a server that refuses now is for the user
to fix, not to wait for, and a retry would print urllib3's warning too). What fails is one
line naming the URI or directory and the cause (:func:`cause`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

__all__ = [
    "PROBE_RETRIES",
    "PROBE_TIMEOUT_S",
    "cause",
    "check_sqlite",
    "check_writable_dir",
    "fast_http",
]

#: HTTP retries while probing a tracking server (MLflow's default is 7, with backoff).
PROBE_RETRIES = 0
#: Seconds one probing HTTP request may take (MLflow's default is 120).
PROBE_TIMEOUT_S = 10


@contextlib.contextmanager
def fast_http() -> Iterator[None]:
    """MLflow's HTTP requests in the block: :data:`PROBE_RETRIES` retries (one-second
    backoff), :data:`PROBE_TIMEOUT_S` seconds each (read per request, so the
    process environment is set for the block and restored after it)."""
    wanted = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(PROBE_RETRIES),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(PROBE_TIMEOUT_S),
    }
    before = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def cause(err: BaseException) -> str:
    """A short one-line cause of ``err``: the OS error inside a connection failure
    (``[Errno 111] Connection refused``), else its first line, cut to 200 characters."""
    text = str(err) or type(err).__name__
    found = re.search(r"\[Errno -?\d+\] [^'\")\]\n]+", text)
    if found:
        return found.group(0).strip()
    return text.splitlines()[0][:200] if text.strip() else type(err).__name__


def check_writable_dir(path: Path) -> str | None:
    """Why files cannot be created in directory ``path`` (None: they can).

    The nearest existing ancestor must be a directory; a file is created and removed in it
    (``os.access`` would not do: it says yes to root for any mode).
    """
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        return f"{here} is not a directory"
    try:
        with tempfile.TemporaryFile(dir=here):
            pass
    except OSError as err:
        return f"{here} cannot be written ({err.strerror or err})"
    return None


def check_sqlite(uri: str) -> str | None:
    """Why the SQLite database of ``sqlite:///PATH`` cannot be written (None: it can).

    Its directory must be writable; an existing file must be a SQLite database that takes a
    write lock (``BEGIN IMMEDIATE``, rolled back at once: nothing is changed).
    """
    path = urlparse(uri).path
    if uri.startswith("sqlite:///"):  # sqlite:///rel.db is relative, sqlite:////abs.db not
        path = uri[len("sqlite:///") :].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    db = Path(path)
    if db.is_dir():
        return f"{db} is a directory, not a database file"
    problem = check_writable_dir(db.parent)
    if problem is not None or not db.exists():
        return problem
    try:
        con = sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=5)
        try:
            con.execute("PRAGMA schema_version")
            con.execute("BEGIN IMMEDIATE")
            con.execute("ROLLBACK")
        finally:
            con.close()
    except sqlite3.Error as err:
        return f"{db}: {err}"
    return None
