"""``geofl deploy``: run geofl on Flower 1.42 (needs the ``deploy`` extra).

* ``geofl deploy app DIR`` — write the Flower app directory (``pyproject.toml`` naming
  geofl's ServerApp and ClientApp) for ``flwr run DIR <superlink>``;
* ``geofl deploy certs DIR --host NAME`` — a CA and the SuperLink's TLS certificate;
* ``geofl deploy key DIR NAME`` — a SuperNode's authentication key pair (``NAME``,
  ``NAME.pub``) for ``flwr supernode register``;
* ``geofl deploy loopback CONFIG --out DIR`` — start a SuperLink and one SuperNode per site
  on this machine, run (method, seed) of CONFIG on them and stop them again (a rehearsal
  of a multi-site deployment; README "Many cores, many sites"); ``--resume`` continues a
  run directory from its checkpoint (the sites' state lies under ``DIR/flower``). With
  site-local data (``data.sites``) it starts one SuperNode per site (``--sites`` is
  ignored), each loading its own entry's data. ``--randomness`` sets the server's and every
  site's ``privacy.randomness`` (default the config's, else ``secure``: nobody can
  regenerate another party's noise); ``seeded`` reproduces the simulation bit for bit and
  prints a warning. ``--secagg`` sends the updates through Flower's SecAgg+ (the server
  learns only each round's weighted sum, :mod:`geofl.deploy.secagg`); a method whose
  server side needs individual updates is refused in one line (exit 2) before anything
  starts, as ``privacy.secure_aggregation`` in the config is by ``geofl config validate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geofl.cli.common import fail

__all__ = ["deploy_app"]

deploy_app = typer.Typer(no_args_is_help=True, help="Run geofl on Flower (SuperLink/SuperNodes).")


@deploy_app.command("app")
def app_cmd(path: Annotated[Path, typer.Argument(help="Directory to write.")]) -> None:
    """Write the Flower app directory for ``flwr run``."""
    try:
        from geofl.deploy.loopback import write_app
    except ImportError:
        raise fail("geofl deploy needs Flower: pip install 'geofl[deploy]'") from None
    print(write_app(path))


@deploy_app.command("certs")
def certs_cmd(
    path: Annotated[Path, typer.Argument(help="Directory to write.")],
    host: Annotated[
        list[str] | None,
        typer.Option(help="SuperLink host name or IP (repeatable; default 127.0.0.1, localhost)."),
    ] = None,
    days: Annotated[int, typer.Option(min=1, help="Validity in days.")] = 365,
) -> None:
    """Write ca.crt, server.pem and server.key for a TLS SuperLink."""
    try:
        from geofl.deploy.certs import write_certificates
    except ImportError:
        raise fail("geofl deploy needs Flower: pip install 'geofl[deploy]'") from None
    c = write_certificates(path, host or ["127.0.0.1", "localhost"], days)
    print("\n".join(str(p) for p in (c.ca, c.cert, c.key)))


@deploy_app.command("key")
def key_cmd(
    path: Annotated[Path, typer.Argument(help="Directory to write.")],
    name: Annotated[str, typer.Argument(help="Key name (e.g. the site's).")],
) -> None:
    """Write a SuperNode authentication key pair NAME and NAME.pub (P-384, OpenSSH)."""
    try:
        from geofl.deploy.certs import write_node_key
    except ImportError:
        raise fail("geofl deploy needs Flower: pip install 'geofl[deploy]'") from None
    if (path / name).exists():
        raise fail(f"{path / name} exists; choose another name or directory")
    k = write_node_key(path, name)
    print(f"{k.private}\n{k.public}")


@deploy_app.command("loopback")
def loopback_cmd(
    config: Annotated[Path, typer.Argument(help="Experiment YAML.")],
    out: Annotated[Path, typer.Option(help="Run directory the server writes.")],
    sites: Annotated[
        int,
        typer.Option(min=1, help="SuperNodes; clients split evenly (data.sites: one per site)."),
    ] = 2,
    method: Annotated[str, typer.Option(help="Method to run (default: the only one).")] = "",
    seed: Annotated[int, typer.Option(help="Seed (-1: the config's first).")] = -1,
    round_timeout: Annotated[float, typer.Option(help="Seconds a round waits.")] = 300.0,
    timeout: Annotated[float, typer.Option(help="Seconds the whole run may take.")] = 3600.0,
    resume: Annotated[bool, typer.Option(help="Continue from the run's checkpoint.")] = False,
    randomness: Annotated[
        str,
        typer.Option(
            help="secure (default: secret noise per site) or seeded (reproducible, and "
            "regenerable by the server: a warning)."
        ),
    ] = "",
    secagg: Annotated[
        bool,
        typer.Option(
            "--secagg",
            help="Secure aggregation (Flower's SecAgg+): the server learns only the round's "
            "weighted sum; refused for methods that inspect individual updates.",
        ),
    ] = False,
) -> None:
    """Run CONFIG on a SuperLink and SuperNodes started on this machine."""
    try:
        from geofl.config.load import load_config
        from geofl.deploy.flower import ERROR_FILE
        from geofl.deploy.loopback import Loopback
        from geofl.deploy.server import check_resumed_randomness
        from geofl.deploy.setup import SEEDED_WARNING, deploy_randomness, with_secure_aggregation
    except ImportError:
        raise fail("geofl deploy needs Flower: pip install 'geofl[deploy]'") from None
    from geofl.errors import GeoflError

    try:
        cfg = with_secure_aggregation(load_config(config), secagg)  # refused before starting
        mode = deploy_randomness(cfg, randomness or None)
        if resume:  # before anything starts: a run's rounds must not mix modes
            check_resumed_randomness(out.resolve(), mode)
        if mode == "seeded":
            typer.echo(f"warning: {SEEDED_WARNING}", err=True)
        k = cfg.federation.num_clients
        if cfg.data.sites is not None:  # site-local data: one SuperNode per site
            nodes = [{"site": s.name} for s in cfg.data.sites]
            sites = len(nodes)
        elif sites > k:
            raise fail(f"--sites: {sites} sites for {k} clients; at most one site per client")
        else:
            nodes = [
                {"clients": ",".join(str(c) for c in range(i, k, sites))} for i in range(sites)
            ]
        rc: dict[str, object] = {
            "config": str(config.resolve()),
            "out": str(out.resolve()),
            "method": method,
            "seed": seed,
            "sites": sites,
            "resume": resume,
            "round-timeout": round_timeout,
            "connect-timeout": 120.0,
            "randomness": mode,
            "secure-aggregation": secagg,
        }
        mine = {"randomness": mode, "secure-aggregation": str(secagg).lower()}
        nodes = [{**node, **mine} for node in nodes]  # each site's own choice
        with Loopback(out.resolve() / "flower", nodes) as lb:
            output = lb.run(rc, timeout=timeout)
    except GeoflError as err:
        raise fail(str(err)) from None
    error = out / ERROR_FILE
    if error.exists():
        raise fail(error.read_text(encoding="utf-8").strip())
    if not list(out.glob("methods/*/*/final.json")):
        raise fail(
            f"the deployment wrote no final.json under {out}; flwr run said: {output[-500:]}"
        )
    print(out)
