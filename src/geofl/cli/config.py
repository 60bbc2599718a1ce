"""``geofl config show|validate``: a config as a run would see it, before running it.

``validate`` makes every refusal ``geofl run`` makes from the config alone, by the same
code (:func:`geofl.config.validate.validate_config`, then the memory estimate of
:mod:`geofl.config.memory`, whose limit ``GEOFL_MEMORY_LIMIT`` overrides). What needs the
data itself is checked by ``geofl run`` before anything is written: the model, release
steps, uplink and attack against the dataset's inputs and metadata, the task against its
targets, splits and partitions, the first round's privacy budget, the hierarchy's fleet
(farm/tractor context, clusters) and site-local data.
"""

from __future__ import annotations

import sys

import typer

from geofl.cli.common import SeedsOpt, SetOpt, SourceArg, fail, parse_seeds
from geofl.errors import GeoflError

__all__ = ["config_app", "show_cmd", "validate_cmd"]

config_app = typer.Typer(
    no_args_is_help=True, help="Show or check an experiment config (preset or YAML)."
)


@config_app.command("show")
def show_cmd(source: SourceArg, set_: SetOpt = None, seeds: SeedsOpt = None) -> None:
    """Print the fully resolved config as YAML: what the run's config.yaml would hold."""
    from geofl.config.load import dump_config, load_config

    try:
        cfg = load_config(source, set_ or [], parse_seeds(seeds))
    except GeoflError as err:
        raise fail(str(err)) from None
    sys.stdout.write(dump_config(cfg))


@config_app.command("validate")
def validate_cmd(source: SourceArg, set_: SetOpt = None, seeds: SeedsOpt = None) -> None:
    """Load and check a config (every plug-in's checks); one line: ok, or the error."""
    from geofl.config.load import load_config

    try:
        cfg = load_config(source, set_ or [], parse_seeds(seeds))
    except GeoflError as err:
        raise fail(str(err)) from None
    print(
        f"ok: {cfg.name} ({len(cfg.methods)} methods × {len(cfg.seeds)} seeds, "
        f"{cfg.federation.rounds} rounds)"
    )
