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


def make_fake_camera(clip: Path, y4m: Path, seconds: float = 3.0, size: tuple[int, int] | None = None,
                     start: float = 0.0) -> Path:
    """``seconds`` of ``clip`` from ``start`` as a Y4M file, the format Chromium's fake camera plays in a loop
    (``--use-file-for-fake-video-capture``); ``size`` (width, height) rescales it. ~0.35 MB per 640×360 frame, so
    keep it short and in a temporary folder."""
    import av

    with av.open(str(clip)) as source, av.open(str(y4m), "w", format="yuv4mpegpipe") as out:
        decoded = source.streams.video[0]
        rate = decoded.average_rate or 30
        stream = out.add_stream("rawvideo", rate=rate)
        stream.width, stream.height = size or (decoded.codec_context.width, decoded.codec_context.height)
        stream.pix_fmt = "yuv420p"
        for index, frame in enumerate(source.decode(decoded)):
            if index < start * float(rate):
                continue
            if index >= (start + seconds) * float(rate):
                break
            for packet in stream.encode(frame.reformat(stream.width, stream.height, "yuv420p")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return y4m


@contextmanager
def camera_browser(browser: object, y4m: Path) -> Iterator[object]:
    """A second Chromium of the same Playwright instance whose camera plays ``y4m`` (see :func:`make_fake_camera`)."""
    chromium = browser.browser_type.launch(  # type: ignore[attr-defined]
        executable_path=str(CHROMIUM), args=BROWSER_ARGS + [f"--use-file-for-fake-video-capture={y4m}"])
    try:
        yield chromium
    finally:
        chromium.close()
