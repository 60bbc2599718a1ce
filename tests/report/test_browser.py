"""The report in a real headless browser (Debian's chromium through Playwright): a
single-seed and a three-seed report of real engine runs render, every image loads and
every link and anchor resolves.

Skips when chromium or the ``playwright`` package is missing (``.ci/run`` installs
chromium). ``GEOFL_REPORT_SHOTS=DIR`` keeps the full-page screenshots in DIR.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.engine.records.provenance import Provenance
from geofl.report import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Headless, offline, no sandbox (CI runs as root), nothing fetched in the background.
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# Starting Chromium costs seconds per page: the full suite renders the reports, the fast
# tier does not.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium not installed (apt-get install chromium)"
    ),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (dev extra)")

_PAGE_FACTS = """() => ({
  images: [...document.images].map(i => ({src: i.getAttribute('src'), ok: i.complete,
                                           width: i.naturalWidth})),
  links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
  ids: [...document.querySelectorAll('[id]')].map(e => e.id),
})"""


def _report(tmp: Path, name: str, seeds: list[int]) -> Path:
    """A real run of two methods (labelled) over ``seeds``, and its report."""
    raw = tiny_raw(seeds=seeds, eval={"rolling_window": 2})
    raw["methods"][0]["label"] = "Centralized"
    raw["methods"][1]["label"] = "FedAvg (Dirichlet α=0.5)"
    cfg_path = tmp / f"{name}.yaml"
    cfg_path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    prov = Provenance(argv=("geofl", "run", str(cfg_path)), overrides=())
    run_dir = run_experiment(load_config(cfg_path, []), tmp / name, provenance=prov)
    return write_report(run_dir)


@pytest.fixture(scope="module")
def browser() -> Any:
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.mark.parametrize(("name", "seeds"), [("one-seed", [3]), ("three-seeds", [3, 4, 5])])
def test_report_renders_in_chromium(
    browser: Any, tmp_path: Path, name: str, seeds: list[int]
) -> None:
    ids = _check_page(browser, _report(tmp_path, name, seeds), name)
    assert {"results", "figures", "run-facts", "configuration"} <= ids


def test_paper_report_renders_in_chromium(browser: Any, tmp_path: Path) -> None:
    """Every paper-000 section: Table 1, ε, the attack chart, re-drawn figures, weights."""
    from .conftest import ATTACK, FIGURES, LABELS, PAPER_TABLE1, write_fake_run

    run_dir = write_fake_run(
        tmp_path,
        paper=PAPER_TABLE1,
        labels=LABELS,
        figures=FIGURES,
        attack=ATTACK,
        privacy={"consistency": {0: 5.5e7, 1: 4.0e7}, "fedavg": {0: 3.2, 1: 2.5}},
        weighting={"consistency": {"name": "consistency", "beta": 5.0}},
        rolling_window=5,
    )
    ids = _check_page(browser, write_report(run_dir), "paper-000")
    assert {"privacy", "paper-figures-re-drawn-from-our-runs", "aggregation-weights"} <= ids


def _check_page(browser: Any, index: Path, name: str) -> set[str]:
    """Open ``index``: screenshot, images, links, anchors, console; returns the page's ids."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(index.as_uri(), wait_until="load")
    shot = page.screenshot(full_page=True)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 50_000
    keep = os.environ.get("GEOFL_REPORT_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"report-{name}.png").write_bytes(shot)
    facts = page.evaluate(_PAGE_FACTS)
    page.close()
    assert not errors, errors
    assert len(facts["images"]) >= 4
    broken = [i["src"] for i in facts["images"] if not (i["ok"] and i["width"] > 0)]
    assert not broken, f"images that did not load: {broken}"
    ids = set(facts["ids"])
    for href in facts["links"]:
        url = urlparse(href)
        if href.startswith("#"):
            assert href[1:] in ids, f"anchor {href} has no target"
        else:
            assert url.scheme in ("", "file"), f"link leaves the report: {href}"
            target = (index.parent / unquote(url.path)).resolve()
            assert target.exists(), f"broken link {href}"
    return ids
