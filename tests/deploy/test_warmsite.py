"""Warm sites (issue 33, deployment at in-process speed): one long-lived process per
SuperNode runs every ClientApp task, so what it builds must follow the files it was built
from; the SuperNode's idle waits are capped; the command line refuses bad input with one
line and exit 2. The end-to-end checks — warm sites reproduce the simulator bit for bit
with TLS and authenticated SuperNodes, and no message starts a ``flwr-clientapp``
process — are in ``test_flower_loopback.py``."""

from __future__ import annotations

import time
import types
from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_raw

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from geofl.deploy import flower, warmsite


def _context(config: Path) -> Context:
    run_config = {"config": str(config), "method": "fedavg", "seed": -1}
    return Context(1, 1, {"clients": "0"}, RecordDict(), run_config)  # type: ignore[arg-type]


def test_a_warm_site_rebuilds_when_its_config_file_changes(tmp_path: Path) -> None:
    """A warm process serves run after run: a config edited in place (same path) must not
    be answered with the site built from the old file (its fingerprint would match the old
    server config and train the old model)."""
    config = tmp_path / "exp.yaml"
    raw = tiny_raw(methods=[tiny_raw()["methods"][1]])
    config.write_text(yaml.safe_dump(raw))
    first = flower._site(_context(config))
    assert flower._site(_context(config)) is first  # warm: built once
    raw["model"]["params"]["width"] = 4
    config.write_text(yaml.safe_dump(raw))
    second = flower._site(_context(config))
    assert second is not first
    assert second.fingerprint["model"] != first.fingerprint["model"]
    assert len(flower._SITES) <= flower.MAX_SITES


def test_supernode_idle_waits_are_capped() -> None:
    fake = types.ModuleType("fake_loop")
    fake.time = time  # type: ignore[attr-defined]
    assert warmsite.cap_supernode_waits(0.01, fake)
    t0 = time.monotonic()
    fake.time.sleep(3)  # the SuperNode's wait when the SuperLink has nothing
    assert time.monotonic() - t0 < 1.0
    assert fake.time.monotonic() > 0  # the rest of the time module is still there
    assert not warmsite.cap_supernode_waits(0.01, types.ModuleType("other_loop"))


def test_this_flower_has_the_supernode_loop_the_warm_site_caps() -> None:
    """Flower 1.42's SuperNode loop sleeps through its module's ``time``: an upgrade that
    changes that shows here, not as slow rounds."""
    import flwr.supernode.start_client_internal as loop

    assert loop.time is time or isinstance(loop.time, warmsite._CappedClock)


def test_runtime_api_address_follows_the_supernode_args() -> None:
    assert warmsite._runtime_of(["--superlink", "x:1", "--port", "9123"]) == "127.0.0.1:9123"
    assert warmsite._runtime_of(["--host", "0.0.0.0"]) == "127.0.0.1:9094"
    assert warmsite._runtime_of(["--host", "::1", "--port", "7"]) == "[::1]:7"


@pytest.mark.parametrize("poll", ["0", "-1", "61", "nan"])
def test_bad_poll_is_one_line_and_exit_2(poll: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = warmsite.main(["site", "--runtime-api-address", "127.0.0.1:1", "--poll", poll])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--poll {poll}" in err.lower()
