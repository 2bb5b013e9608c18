"""The web page's live camera in a real Chromium whose fake camera plays the shared Hamilton clip (a Y4M made at
test time), against a real server on loopback with an API key and one live session allowed."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from browser import camera_browser, make_fake_camera
from serve_helpers import LiveServer
from test_web_page import ARTIFACTS, open_page

from facefuse.config import StoreConfig

KEY = "live-page-key"


@pytest.fixture(scope="module")
def server(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config, api_key=KEY, live_max_sessions=1) as live:
        yield live


@pytest.fixture(scope="module")
def camera(browser, faces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    clip = faces_dir.parent / "video" / "short_hamilton_clip.mp4"
    y4m = make_fake_camera(clip, tmp_path_factory.mktemp("camera") / "hamilton.y4m", seconds=3)
    with camera_browser(browser, y4m) as chromium:
        yield chromium


def live_page(camera, server, api_errors=(), **kwargs):
    # the first load, before the key is in the tab's storage, is answered 401 (the page then asks for the key)
    context, page, problems = open_page(camera, server, api_errors={401, *api_errors},
                                        viewport={"width": 1280, "height": 900}, permissions=["camera"], **kwargs)
    page.evaluate("key => sessionStorage.setItem('facefuse-api-key', key)", KEY)
    page.reload()
    return context, page, problems


def wait_for_frames(page, condition: str, problems: list[str]) -> None:
    """Wait until ``condition`` holds on ``window.facefuseLive``; if it never does, fail with what the page shows
    (its statistics, an error, the camera's state, frames waiting for an answer) instead of a bare timeout."""
    try:
        page.wait_for_function(f"() => {{ const s = window.facefuseLive; return {condition}; }}", timeout=120_000)
    except PlaywrightTimeoutError:
        seen = page.evaluate("""() => {
            const s = window.facefuseLive, video = document.getElementById('live-camera');
            const error = document.getElementById('live-error');
            return { shown: s.shown, fused: s.fused, skipped: s.skipped, dropped: s.dropped, inFlight: s.inFlight,
                     waiting: live.sent.size, socket: live.ws && live.ws.readyState,
                     statsLine: document.getElementById('live-stats').textContent,
                     error: error.hidden ? null : error.innerText,
                     camera: [video.videoWidth, video.videoHeight, video.readyState, video.paused] }; }""")
        pytest.fail(f"the live view never reached {condition}: {seen}; problems on the page: {problems}",
                    pytrace=False)


def test_live_camera_shows_fused_frames_with_rate_and_latency(camera, server, faces_dir: Path):
    context, page, problems = live_page(camera, server, api_errors={429})
    other = None
    try:
        assert page.locator("#live-start").is_disabled()  # no source face yet
        page.set_input_files("#source-file", str(faces_dir / "face_recognition" / "obama.jpg"))
        page.locator("#live-start").click()
        wait_for_frames(page, "s.shown >= 15 && s.fused >= 5", problems)
        stats = page.evaluate("() => window.facefuseLive")
        assert len(stats["latencyMs"]) >= 10 and all(0 < ms < 60_000 for ms in stats["latencyMs"])
        assert all(ms > 0 for ms in stats["serverMs"])
        text = page.locator("#live-stats").inner_text()
        found = re.match(r"^\d+\.\d frames/s · latency \d+ ms \(camera to screen\) · server \d+ ms · \d+ frames skipped · "
                         r"a face fused in (\d+) % of the last (\d+) frames$", text)
        assert found, text
        assert 0 < int(found[2]) <= 60 and 0 <= int(found[1]) <= 100
        # the caption under the fused view says whether the frame shown has a face fused (read in one go with the
        # frame's flag, so a frame arriving in between cannot split them)
        caption, flag = page.evaluate("() => [document.getElementById('live-output-caption').textContent,"
                                      " window.facefuseLive.fusedFlags.at(-1)]")
        assert caption == ("Fused (AI-generated)" if flag else
                           "Not fused: no face found, or turned too far (shown as captured)")
        size = page.evaluate("() => [document.getElementById('live-output').width,"
                             " document.getElementById('live-output').height]")
        assert size == [640, 360]  # the camera's frames, back at their size
        # the AI-generated mark's dark box is in the bottom-right corner of the fused view
        corner = page.evaluate("""() => {
            const c = document.getElementById('live-output');
            const d = c.getContext('2d').getImageData(c.width - 60, c.height - 14, 40, 6).data;
            let white = 0;
            for (let i = 0; i < d.length; i += 4) white += d[i] > 200 && d[i + 1] > 200 && d[i + 2] > 200;
            return white;
        }""")
        assert corner > 0  # the mark's white letters
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#live").screenshot(path=str(ARTIFACTS / "web-live.png"))

        # a second visitor while the only session is in use: told the server is busy, and when to retry
        other, other_page, other_problems = live_page(camera, server, api_errors={429})
        other_page.set_input_files("#source-file", str(faces_dir / "face_recognition" / "obama.jpg"))
        other_page.locator("#live-start").click()
        other_page.locator("#live-error").wait_for(state="visible")
        assert other_page.locator("#live-error-message").inner_text() == "The server is busy."
        assert re.search(r"[Tt]ry again in \d+ s", other_page.locator("#live-error-hint").inner_text())
        assert other_problems == []

        page.locator("#live-stop").click()
        assert page.locator("#live-stats").inner_text() == "Stopped"
        assert page.evaluate("() => document.getElementById('live-camera').srcObject") is None  # camera off
        assert not page.locator("#live-start").is_disabled()
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: the two views stack, nothing overflows
        assert page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 0
        assert problems == []
    finally:
        if other is not None:
            other.close()
        context.close()


def wait_for_a_free_session(server) -> None:
    """The previous test's session is released when the server sees its socket close, a moment after the page's
    Stop: wait until ``GET /v1/live`` says a session may start (the module's server allows one)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = httpx.get(server.url + "/v1/live", headers={"Authorization": f"Bearer {KEY}"})
        if answer.status_code == 200 and answer.json()["sessions"] < answer.json()["max_sessions"]:
            return
        time.sleep(0.2)
    pytest.fail("the live session of the test before was never released", pytrace=False)


def test_more_photos_of_the_source_person_go_with_the_live_camera(camera, server, faces_dir: Path):
    """Step 1's more photos are sent after the source photo (the start message counts them): one without a face
    ends the session with its place named; without it the session runs."""
    wait_for_a_free_session(server)
    context, page, problems = live_page(camera, server, api_errors={422})
    try:
        rec = faces_dir / "face_recognition"
        page.set_input_files("#source-file", str(rec / "obama.jpg"))
        page.set_input_files("#more-sources-file", [str(rec / "obama2.jpg"),
                                                    str(faces_dir / "insightface/inspireface/bulk/view.jpg")])
        page.locator("#live-start").click()
        page.locator("#live-error").wait_for(state="visible")
        assert page.locator("#live-error-message").inner_text() == "No face found in the source photo (source photo 3)."
        wait_for_a_free_session(server)
        page.set_input_files("#more-sources-file", str(rec / "obama2.jpg"))
        page.locator("#live-start").click()
        wait_for_frames(page, "s.shown >= 5 && s.fused >= 2", problems)
        page.locator("#live-stop").click()
        assert problems == []
    finally:
        context.close()


def test_frames_keep_coming_when_the_browser_presents_no_video_frame(camera, server, faces_dir: Path):
    """A browser may stop presenting a video it considers out of sight, and then never calls
    requestVideoFrameCallback: the page's timer sends the frame it has instead (a page that waited for the callback
    alone stalled with nothing shown). Here the callback is taken away before the session starts."""
    wait_for_a_free_session(server)
    context, page, problems = live_page(camera, server)
    try:
        page.evaluate("""() => {
            HTMLVideoElement.prototype.requestVideoFrameCallback = function () { return 1; };
            HTMLVideoElement.prototype.cancelVideoFrameCallback = function () {};
        }""")
        page.set_input_files("#source-file", str(faces_dir / "face_recognition" / "obama.jpg"))
        page.locator("#live-start").click()
        wait_for_frames(page, "s.shown >= 10", problems)
        assert page.evaluate("() => window.facefuseLive.skipped") == 0  # a timer's call is no camera frame skipped
        page.locator("#live-stop").click()
        assert problems == []
    finally:
        context.close()


def test_the_page_sends_a_second_frame_while_latency_has_room_and_goes_back_to_one_over_budget(camera, server):
    """The page's own choice of frames in flight (live.js, liveAdapt), fed measured latencies: one at the start, two
    once the median of ten frames came back under 100 ms, one again once it passed 150 ms, no change in between;
    nothing changes while the page is told a fixed number."""
    context, page, problems = live_page(camera, server)
    try:
        steps = page.evaluate("""() => {
            const s = window.facefuseLive, seen = [s.inFlight];
            const frames = (ms) => { for (let i = 0; i < 10; i++) { s.latencyMs.push(ms); s.shown += 1; liveAdapt(); }
                                     seen.push(s.inFlight); };
            frames(60); frames(120); frames(200); frames(120); frames(60);
            s.adaptive = false; frames(200);
            return seen;
        }""")
        assert steps == [1, 2, 2, 1, 1, 2, 2]
        assert problems == []
    finally:
        context.close()
