"""A SuperLink and SuperNodes on this machine, and ``flwr run`` of the geofl app on them.

Used by the loopback equivalence test and ``geofl deploy loopback``; the same commands,
with other addresses and real certificates, start a multi-site deployment (README).
Every process gets a bounded timeout; telemetry is off and the SuperLink never installs
dependencies at run time (``--disable-runtime-dependency-installation``): the app is geofl
as installed. With ``auth`` the SuperLink admits only SuperNodes whose public keys were
registered (``--enable-supernode-auth``, ``flwr supernode register``; TLS required).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from geofl.deploy.certs import Certificates, NodeKey, write_certificates, write_node_key
from geofl.deploy.warmsite import DEFAULT_POLL_S
from geofl.errors import DeployError

__all__ = ["APP_CONFIG", "Loopback", "free_port", "write_app"]

#: The app's run-config keys and defaults (``[tool.flwr.app.config]``).
APP_CONFIG: dict[str, Any] = {
    "config": "",
    "method": "",
    "seed": -1,
    "out": "geofl-deploy",
    "resume": False,
    "sites": 2,
    "round-timeout": 120.0,
    "connect-timeout": 60.0,
    "randomness": "",  # the server's privacy.randomness ("": the config's, else secure)
    "secure-aggregation": False,  # True: SecAgg+ (else the config's privacy.secure_aggregation)
}


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_app(path: Path) -> Path:
    """Write the Flower app directory (``pyproject.toml`` naming geofl's apps)."""
    path.mkdir(parents=True, exist_ok=True)
    doc = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {
            "name": "geofl-app",
            "version": "1.0.0",
            "description": "geofl's round loop on Flower (server side and sites)",
            "license": "Apache-2.0",
            "dependencies": [],
        },
        "tool": {
            "hatch": {"build": {"targets": {"wheel": {"packages": ["."]}}}},
            "flwr": {
                "app": {
                    "publisher": "geofl",
                    "components": {
                        "serverapp": "geofl.deploy.flower:server_app",
                        "clientapp": "geofl.deploy.flower:client_app",
                    },
                    "config": APP_CONFIG,
                }
            },
        },
    }
    (path / "pyproject.toml").write_text(tomli_w.dumps(doc), encoding="utf-8")
    return path


#: Seconds between a SuperExec's polls for a task to launch (Flower's default: 1 s). A
#: SuperNode's SuperExec starts a ClientApp process per message, so on loopback, where
#: polling is free, the default would add up to 1 s to every message.
SUPEREXEC_POLL_S = 0.1


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_HOME=str(home), PYTHONUNBUFFERED="1")
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", str(SUPEREXEC_POLL_S))
    # Flower starts its helpers (flower-superexec, flwr-serverapp, …) by name.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _bin(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise DeployError(
            f"{name} not found; install the deploy extra (pip install 'geofl[deploy]')"
        )
    return found


@dataclass
class Loopback:
    """A SuperLink and one SuperNode per site on 127.0.0.1 (insecure: loopback only).

    Args:
        workdir: Where logs, the app, the Flower home and the sites' state go.
        sites: Node config of each SuperNode (e.g. ``{"clients": "0"}``); a site without
            ``state-dir`` gets ``<workdir>/site<i>-state``.
        start_timeout: Seconds to wait for the SuperLink to listen.
        tls: Encrypt every connection with certificates generated here
            (:func:`geofl.deploy.certs.write_certificates`) instead of running insecure.
        auth: SuperNode authentication (implies ``tls``): a key pair per site
            (:func:`geofl.deploy.certs.write_node_key`), each public key registered with
            ``flwr supernode register`` once the SuperLink listens.
        warm: Run each site warm (:mod:`geofl.deploy.warmsite`): its SuperNode with
            ``--isolation process`` and idle waits of ``poll_s``, beside one long-lived
            process that runs every ClientApp task; False: Flower's stock SuperNode, which
            starts a ``flwr-clientapp`` process per message (the slow path, kept for
            ``benchmarks/bench_deploy.py``'s comparison).
        poll_s: Seconds between a warm site's (and its SuperNode's) looks for work.
    """

    workdir: Path
    sites: Sequence[Mapping[str, str]]
    start_timeout: float = 60.0
    tls: bool = False
    auth: bool = False
    warm: bool = True
    poll_s: float = DEFAULT_POLL_S
    port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    nodes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    certs: Certificates | None = None
    keys: list[NodeKey] = field(default_factory=list)

    def __enter__(self) -> Loopback:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home = self.workdir / "flwr-home"
        self.home.mkdir(exist_ok=True)
        self.port = self.port or free_port()
        self.ports.append(self.port)
        self.sites = [
            {"state-dir": str(self.workdir / f"site{i}-state"), **node}
            for i, node in enumerate(self.sites)
        ]
        loop: dict[str, Any] = {"address": f"127.0.0.1:{self.port}", "insecure": True}
        if self.tls or self.auth:
            self.certs = write_certificates(self.workdir / "certs")
            loop = {"address": loop["address"], "root-certificates": str(self.certs.ca)}
        if self.auth:
            self.keys = [
                write_node_key(self.workdir / "keys", f"site{i}") for i in range(len(self.sites))
            ]
        conn = {"superlink": {"default": "loop", "loop": loop}}
        (self.home / "config.toml").write_text(tomli_w.dumps(conn), encoding="utf-8")
        self.app = write_app(self.workdir / "app")
        self.start_superlink()
        for i, node in enumerate(self.sites):
            self.start_supernode(i, node)
        return self

    def _link_security(self) -> list[str]:
        c = self.certs
        if c is None:
            return ["--insecure"]
        auth = ["--enable-supernode-auth"] if self.auth else []
        return [
            "--ssl-ca-certfile",
            str(c.ca),
            "--ssl-certfile",
            str(c.cert),
            "--ssl-keyfile",
            str(c.key),
            *auth,
        ]

    def _node_security(self, key: Path | None) -> list[str]:
        if self.certs is None:
            return ["--insecure"]
        auth = [] if key is None else ["--auth-supernode-private-key", str(key)]
        return ["--root-certificates", str(self.certs.ca), *auth]

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=_env(self.home), start_new_session=True
        )
        self.procs.append(proc)
        return proc

    def start_superlink(self) -> None:
        """Start the SuperLink, wait until it listens, register the sites' keys (auth)."""
        self.link = self._spawn(
            "superlink",
            [
                _bin("flower-superlink"),
                *self._link_security(),
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",
            ],
        )
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise DeployError(
                        f"the SuperLink did not listen on port {self.port} within "
                        f"{self.start_timeout:g} s"
                    ) from None
                time.sleep(0.2)
        for key in self.keys:
            self.register(key)

    def register(self, key: NodeKey) -> str:
        """``flwr supernode register`` the public key of ``key``; the command's output.

        Raises:
            DeployError: when the SuperLink refuses it or does not answer within 60 s.
        """
        args = [self.flwr, "supernode", "register", str(key.public), "loop"]
        try:
            proc = subprocess.run(
                args, capture_output=True, timeout=60, env=self.env, cwd=self.workdir
            )
        except subprocess.TimeoutExpired:
            raise DeployError(f"flwr supernode register {key.public} took over 60 s") from None
        out = (proc.stdout + proc.stderr).decode(errors="replace")
        if proc.returncode != 0:
            raise DeployError(f"flwr supernode register {key.public} failed: {out.strip()}")
        return out

    def start_supernode(
        self,
        i: int,
        node: Mapping[str, str],
        superlink: str | None = None,
        key: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start SuperNode ``i`` with ``node`` as its node config (with ``auth``, and
        ``key`` None, it authenticates with site ``i``'s key); with ``warm``, its warm site
        process too (started by the node's command, in its process group and log)."""
        if key is None and self.auth and i < len(self.keys):
            key = self.keys[i].private
        cfg = " ".join(f'{k}="{v}"' for k, v in node.items())
        port = free_port()
        self.ports.append(port)
        link = superlink or f"127.0.0.1:{self.port}"
        retry = ["--max-retries", "3", "--max-wait-time", "20"]
        args = [*self._node_security(key), "--superlink", link, "--port", str(port), *retry]
        args += ["--node-config", cfg]
        cmd = [_bin("flower-supernode")]
        if self.warm:
            cmd = [sys.executable, "-m", "geofl.deploy.warmsite", "supernode"]
            cmd += ["--poll", str(self.poll_s)]
            cmd += ["--no-auth", "--"] if self.certs is not None and not self.auth else ["--"]
        proc = self._spawn(f"supernode{i}", [*cmd, *args])
        self.nodes[i] = proc
        return proc

    @property
    def flwr(self) -> str:
        """The ``flwr`` command."""
        return _bin("flwr")

    @property
    def env(self) -> dict[str, str]:
        """The environment Flower's commands run in here."""
        return _env(self.home)

    def write_run_config(self, run_config: Mapping[str, Any]) -> str:
        """Write ``run_config`` as the TOML file ``flwr run --run-config`` reads; its path."""
        rc = self.workdir / "run-config.toml"
        rc.write_text(tomli_w.dumps(dict(run_config)), encoding="utf-8")
        return str(rc)

    def kill_supernode(self, i: int) -> None:
        """Kill SuperNode ``i`` and its app processes (a site that fails)."""
        proc = self.nodes[i]
        _signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_supernode(self, i: int) -> None:
        """Stop SuperNode ``i`` (SIGTERM: it leaves the SuperLink's node list; SIGKILL after
        30 s)."""
        proc = self.nodes[i]
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)

    def kill_superlink(self) -> None:
        """Kill the SuperLink and the ServerApp it runs (a server machine that fails); the
        SuperNodes stay."""
        _signal_group(self.link, signal.SIGKILL)
        self.link.wait(timeout=10)
        nodes = {p.pid for p in self.nodes.values()}
        for pid in _processes_using([self.port]):  # Flower's detached ServerApp executor
            if pid not in nodes:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def run(self, run_config: Mapping[str, Any], timeout: float) -> str:
        """``flwr run`` the app with ``run_config`` and stream its logs; the output.

        Raises:
            DeployError: when it does not finish within ``timeout`` seconds.
        """
        rc = self.write_run_config(run_config)
        args = [self.flwr, "run", str(self.app), "loop", "--run-config", rc, "--stream"]
        try:
            proc = subprocess.run(
                args, capture_output=True, timeout=timeout, env=_env(self.home), cwd=self.workdir
            )
        except subprocess.TimeoutExpired as err:
            out = (err.stdout or b"").decode(errors="replace")
            raise DeployError(
                f"flwr run did not finish within {timeout:g} s:\n{out[-2000:]}"
            ) from None
        return proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")

    def __exit__(self, *exc: object) -> None:
        # Each process leads its own session: its group holds the app processes it started.
        for proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=10)
            _signal_group(proc, signal.SIGKILL)
        # Flower detaches its executors (own sessions): find them by our ports.
        for pid in _processes_using(self.ports):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _processes_using(ports: Sequence[int]) -> list[int]:
    """Processes whose command line names one of ``ports`` on 127.0.0.1 (ours: the ports
    were free when we took them)."""
    marks = re.compile(rb"127\.0\.0\.1:(" + "|".join(map(str, ports)).encode() + rb")(?!\d)")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if ports and marks.search(cmd):
            found.append(int(entry.name))
    return found


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
