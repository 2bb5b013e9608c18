"""Debian's Chromium driven by Playwright, shared by every browser test through conftest's ``browser`` fixture.

One session-wide Playwright instance: two sync Playwright instances in one thread cannot coexist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]  # a synthetic camera


def _install_chromium() -> None:
    """Debian's package; Playwright's own browser download is neither wanted nor reachable here."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail("Chromium is missing: install Debian's 'chromium' package (apt-get install -y chromium)",
                    pytrace=False)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)


@contextmanager
def chromium_browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        _install_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        yield chromium
        chromium.close()
