"""A local ganache 7 node for the JSON-RPC backend's tests and benchmark.

ganache is installed from the npm registry into a cache directory on first use
(``npm install --prefix <cache>/ganache ganache@7``, under a file lock so that parallel
test workers install it once) and started on a free loopback port with deterministic
options: fixed accounts, chain id 1337, a fixed start time and instant mining.

Example::

    with GanacheNode() as node:
        ledger = RpcLedger.create(node.url, seed=1)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from geofl.errors import LedgerError

__all__ = ["GANACHE_SPEC", "GanacheNode", "ganache_cache_dir", "install_ganache", "missing_tools"]

GANACHE_SPEC = "ganache@7"
#: Options making the node's chain reproducible (accounts, chain id, clock, mining).
DETERMINISTIC_OPTIONS = (
    "--wallet.deterministic",
    "--chain.chainId",
    "1337",
    "--chain.time",
    "2023-11-14T22:13:20Z",
    "--miner.timestampIncrement",
    "1",
    "--chain.hardfork",
    "shanghai",
    "--logging.quiet",
)


def ganache_cache_dir() -> Path:
    """``$GEOFL_CACHE/ganache`` (``~/.cache/geofl/ganache`` if ``GEOFL_CACHE`` is unset)."""
    env = os.environ.get("GEOFL_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "geofl"
    return root / "ganache"


def missing_tools() -> str | None:
    """Why ganache cannot run here (``node`` or ``npm`` not on PATH), or ``None``."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not found on PATH" if missing else None


def _cli(prefix: Path) -> Path:
    return prefix / "node_modules" / "ganache" / "dist" / "node" / "cli.js"


def install_ganache(prefix: Path | None = None, *, timeout_s: float = 600.0) -> Path:
    """Install ganache into ``prefix`` unless it is there; the path of its ``cli.js``.

    Raises:
        LedgerError: if node/npm are missing or the install fails.
    """
    reason = missing_tools()
    if reason:
        raise LedgerError(f"cannot install ganache: {reason}")
    prefix = Path(prefix) if prefix is not None else ganache_cache_dir()
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cli = _cli(prefix)
        if not cli.exists():
            cmd = [
                "npm",
                "install",
                "--prefix",
                str(prefix),
                GANACHE_SPEC,
                "--no-audit",
                "--no-fund",
            ]
            try:
                done = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=timeout_s, check=False
                )
            except subprocess.TimeoutExpired:
                raise LedgerError(
                    f"npm install {GANACHE_SPEC} took over {timeout_s:.0f}s"
                ) from None
            if done.returncode != 0 or not cli.exists():
                tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
                raise LedgerError(f"npm install {GANACHE_SPEC} failed: {' | '.join(tail)}")
    return cli


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GanacheNode:
    """A ganache process on a loopback port; a context manager that stops it on exit.

    Args:
        port: Port to listen on (a free one if ``None``).
        prefix: Where ganache is (or gets) installed.
        startup_timeout_s: How long to wait for the node to answer.
    """

    def __init__(
        self, port: int | None = None, prefix: Path | None = None, startup_timeout_s: float = 60.0
    ) -> None:
        self.port = port or free_port()
        self.prefix = prefix
        self.startup_timeout_s = startup_timeout_s
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: tempfile._TemporaryFileWrapper[bytes] | None = None

    def start(self) -> GanacheNode:
        """Install if needed, start the node and wait until it answers ``eth_chainId``.

        Raises:
            LedgerError: if it exits or does not answer in time.
        """
        cli = install_ganache(self.prefix)
        cmd = ["node", str(cli), "--server.host", "127.0.0.1", "--server.port", str(self.port)]
        # Kept open for the node's lifetime (closed in stop()), so no context manager.
        self._log = tempfile.NamedTemporaryFile(prefix="ganache-", suffix=".log")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [*cmd, *DETERMINISTIC_OPTIONS], stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while not self.ready():
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")
                self.stop()
                raise LedgerError(f"ganache exited with {code}: {err[-500:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise LedgerError(f"ganache did not answer within {self.startup_timeout_s:.0f}s")
            time.sleep(0.1)
        return self

    def ready(self) -> bool:
        """Whether the node answers a JSON-RPC request."""
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []})
        request = urllib.request.Request(
            self.url, data=body.encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=1.0) as response:
                return "result" in json.loads(response.read())
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        """Terminate the node (kill it if it does not exit within 5 s)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> GanacheNode:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
