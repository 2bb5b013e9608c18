"""The web page's batch / video section in a real browser (Playwright + Debian's Chromium, a real server)."""

from __future__ import annotations

import io
import re
import sys
import threading
import traceback
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from job_helpers import make_clip
from serve_helpers import LiveServer
from test_web_page import ARTIFACTS, open_page

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from facefuse.config import StoreConfig
from facefuse.imageio import read_label

KEY = "page-key"


@pytest.fixture(scope="module")
def server(store_config: StoreConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(store_config, jobs_dir=tmp_path_factory.mktemp("web-jobs"), api_key=KEY) as live:
        yield live


def wait_for_job_end(page, server: LiveServer, shown: str, problems: list[str]) -> None:
    """Waits for ``shown`` (the job's error box or its download link); when it never appears, fails with what the
    page says, the page's problems, the job as the server has it and where the server's job workers are (a
    once-seen CI timeout said none of that; the server runs in this process)."""
    try:
        page.locator(shown).wait_for(state="visible")
    except PlaywrightTimeout:
        job_id = page.evaluate("() => jobs.id")
        try:
            job = (httpx.get(f"{server.url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {KEY}"},
                             timeout=10).text if job_id else None)
        except httpx.HTTPError as exc:
            job = f"no answer: {exc!r}"
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        workers = {names[ident]: "".join(traceback.format_stack(frame, limit=-8))
                   for ident, frame in sys._current_frames().items()
                   if names.get(ident, "").startswith(("job-", "AnyIO", "facefuse"))}
        pytest.fail(f"{shown} never shown; the page says {page.locator('#jobs-text').inner_text()!r}, "
                    f"its problems: {problems}, its job {job_id}: {job}; the server's workers: {workers}")


def test_photo_batch_from_the_page(browser, server, faces_dir: Path):
    rec = faces_dir / "face_recognition"
    # the server asks for a key: the first load of the page is answered 401 until the user gives it
    context, page, problems = open_page(browser, server, api_errors={401}, viewport={"width": 1280, "height": 900})
    try:
        # the server asks for a key: the page says so and opens its settings, where the user types it
        page.locator("#error-message").wait_for(state="visible")
        assert "API key" in page.locator("#error-message").inner_text()
        page.locator("#api-key").fill(KEY)
        page.set_input_files("#source-file", str(rec / "obama.jpg"))
        assert page.locator("#jobs-start").is_disabled()  # nothing chosen to fuse into yet
        page.set_input_files("#jobs-files", [str(rec / "biden.jpg"), str(rec / "obama2.jpg"),
                                             str(faces_dir / "insightface/inspireface/bulk/view.jpg")])
        assert page.locator("#jobs-chosen").inner_text() == "3 files chosen"
        page.locator("#jobs-start").click()
        wait_for_job_end(page, server, "#jobs-download", problems)
        assert page.locator("#jobs-text").inner_text() == "Done: 2 of 3 photos fused."
        assert page.evaluate("() => document.getElementById('jobs-progress').value") == 100
        assert page.locator("#jobs-failures li").inner_text() == "view.jpg: No face found in the target photo"
        assert not page.locator("#jobs-video").is_visible()  # photos give a zip, not a video
        with page.expect_download() as download:
            page.locator("#jobs-download").click()
        archive = zipfile.ZipFile(io.BytesIO(Path(download.value.path()).read_bytes()))
        photos = [name for name in archive.namelist() if name.endswith(".jpg")]
        assert photos == ["0001-biden.jpg", "0002-obama2.jpg"]
        assert all(read_label(archive.read(name)) for name in photos)
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#jobs").screenshot(path=str(ARTIFACTS / "web-jobs-photos.png"))
        assert problems == []
    finally:
        context.close()


def test_more_photos_of_the_source_person_go_with_a_batch(browser, server, faces_dir: Path):
    same = faces_dir / "hard" / "same-person"
    context, page, problems = open_page(browser, server, api_errors={401}, viewport={"width": 1280, "height": 900})
    try:
        page.locator("#api-key").fill(KEY)
        page.set_input_files("#source-file", str(same / "jay_chou/01_studio_tilted_warm.jpg"))
        # step 1's more photos, the last without a face: the job that receives all three names that one
        page.set_input_files("#more-sources-file", [str(same / "jay_chou/02_aligned_crop_frontal.jpg"),
                                                    str(faces_dir / "insightface/inspireface/bulk/view.jpg")])
        page.set_input_files("#jobs-files", str(same / "yang_mi/01_selfie_indoor_ambient.jpg"))
        page.locator("#jobs-start").click()
        wait_for_job_end(page, server, "#jobs-error", problems)
        assert page.locator("#jobs-text").inner_text() == "The job failed"
        assert page.locator("#jobs-error-message").inner_text() == "No face found in the source photo (source photo 3)."
        page.set_input_files("#more-sources-file", str(same / "jay_chou/02_aligned_crop_frontal.jpg"))
        page.locator("#jobs-start").click()
        wait_for_job_end(page, server, "#jobs-download", problems)
        assert page.locator("#jobs-text").inner_text().startswith("Done: 1 of 1 photos fused")
        assert problems == []
    finally:
        context.close()


def test_page_asks_for_the_api_key_and_the_source(browser, server, faces_dir: Path):
    rec = faces_dir / "face_recognition"
    context, page, problems = open_page(browser, server, api_errors={401}, viewport={"width": 390, "height": 844},
                                        is_mobile=True)
    try:
        page.set_input_files("#source-file", str(rec / "obama.jpg"))
        page.set_input_files("#jobs-files", str(rec / "biden.jpg"))
        page.locator("#jobs-start").click()
        page.locator("#jobs-error").wait_for(state="visible")
        assert page.locator("#jobs-error-message").inner_text() == "This server needs an API key."
        assert page.locator("#settings").get_attribute("open") is not None
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0  # the section fits a phone
        assert problems == []
    finally:
        context.close()


def test_video_job_plays_in_the_page(browser, server, faces_dir: Path, tmp_path: Path):
    rec = faces_dir / "face_recognition"
    # long enough that the page polls (every 0.5 s) while it runs on a fast CPU too: 40 frames once ended first
    clip = make_clip(tmp_path / "clip.mp4", faces_dir, frames=120, fps=20)
    # the server asks for a key: the first load of the page is answered 401 until the user gives it
    context, page, problems = open_page(browser, server, api_errors={401}, viewport={"width": 1280, "height": 900})
    try:
        page.evaluate("key => sessionStorage.setItem('facefuse-api-key', key)", KEY)
        page.reload()  # the page keeps the key for the tab, as after a user typed it once
        page.set_input_files("#source-file", str(rec / "biden.jpg"))
        page.set_input_files("#jobs-files", str(clip))
        assert page.locator("#jobs-chosen").inner_text() == "Video: clip.mp4"
        page.evaluate("""() => { window.shown = [];  // every progress line the page showed
            new MutationObserver(() => window.shown.push(document.getElementById('jobs-text').textContent))
                .observe(document.getElementById('jobs-text'), { childList: true, characterData: true, subtree: true });
        }""")
        page.locator("#jobs-start").click()
        page.locator("#jobs-status").wait_for(state="visible")
        page.locator("#jobs-video").wait_for(state="visible")
        assert page.locator("#jobs-text").inner_text() == "Done."
        running = [line for line in page.evaluate("() => window.shown") if "frames/s" in line]
        assert running and re.fullmatch(r"\d+ % · \d+ / 120 frames · [\d.]+ frames/s( · about \d+ s left)?",
                                        running[0]), running
        assert page.locator("#jobs-download").inner_text() == "Download the video"
        page.wait_for_function("() => document.getElementById('jobs-video').readyState >= 2")  # decodable frames
        size = page.evaluate("() => { const v = document.getElementById('jobs-video');"
                             " return [v.videoWidth, v.videoHeight, Math.round(v.duration * 10) / 10]; }")
        assert size == [480, 360, 6.0]  # 120 frames at 20 fps
        page.evaluate("() => document.getElementById('jobs-video').play()")
        page.wait_for_function("() => document.getElementById('jobs-video').currentTime > 0.3")  # it plays
        page.locator("#jobs").screenshot(path=str(ARTIFACTS / "web-jobs-video.png"))
        assert problems == []
    finally:
        context.close()


def test_video_start_end_fields_and_warnings_on_the_page(browser, server, faces_dir: Path):
    clip = faces_dir.parent / "video" / "short_hamilton_clip.mp4"  # stage light: the face is lost in some frames
    # the server asks for a key: the first load of the page is answered 401 until the user gives it
    context, page, problems = open_page(browser, server, api_errors={401}, viewport={"width": 1280, "height": 900})
    try:
        page.evaluate("key => sessionStorage.setItem('facefuse-api-key', key)", KEY)
        page.reload()
        page.set_input_files("#source-file", str(faces_dir / "face_recognition/obama.jpg"))
        page.set_input_files("#jobs-files", str(faces_dir / "face_recognition/biden.jpg"))
        assert not page.locator("#jobs-range").is_visible()  # start and end are for a video only
        page.set_input_files("#jobs-files", str(clip))
        page.locator("#jobs-start-s").fill("0.5")
        page.locator("#jobs-end-s").fill("2")
        page.locator("#jobs-start").click()
        page.locator("#jobs-video").wait_for(state="visible", timeout=180_000)
        page.wait_for_function("() => document.getElementById('jobs-video').readyState >= 1")
        duration = page.evaluate("() => document.getElementById('jobs-video').duration")
        assert 1.3 <= duration <= 1.7  # 0.5 s to 2 s of the clip
        warnings = page.locator("#jobs-warnings li").all_inner_texts()
        assert any(re.fullmatch(r"\d+ of \d+ frames had no usable chosen face and were left as they are\.", w)
                   for w in warnings), warnings
        page.locator("#jobs").screenshot(path=str(ARTIFACTS / "web-jobs-video-warnings.png"))
        assert problems == []
    finally:
        context.close()


def test_cancel_from_the_page_stops_the_job(browser, server, faces_dir: Path, tmp_path: Path):
    clip = make_clip(tmp_path / "long.mp4", faces_dir, frames=120, fps=20, audio=False)
    # the server asks for a key: the first load of the page is answered 401 until the user gives it
    context, page, problems = open_page(browser, server, api_errors={401}, viewport={"width": 1280, "height": 900})
    try:
        page.evaluate("key => sessionStorage.setItem('facefuse-api-key', key)", KEY)
        page.reload()
        page.set_input_files("#source-file", str(faces_dir / "face_recognition/biden.jpg"))
        page.set_input_files("#jobs-files", str(clip))
        page.locator("#jobs-start").click()
        page.wait_for_function("() => document.getElementById('jobs-text').textContent.includes('frames/s')")
        folder = server.settings.jobs_dir / page.evaluate("() => jobs.id")  # the job the page is following
        assert folder.is_dir()
        page.locator("#jobs-cancel").click()
        page.wait_for_function("() => document.getElementById('jobs-text').textContent === 'Cancelled'")
        assert not page.locator("#jobs-cancel").is_visible() and not page.locator("#jobs-start").is_disabled()
        for _ in range(100):  # the worker stops at its next frame, then the folder goes
            if not folder.exists():
                break
            page.wait_for_timeout(100)
        assert not folder.exists()  # the cancelled job's upload and partial output are deleted
        assert problems == []
    finally:
        context.close()
